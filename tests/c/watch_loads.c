/* A test helper (tests/test_nic_rings.py loads it with ctypes): counts the loads of a 32-bit
 * word, and stores a new whole value into the word after each one, as a C program storing a
 * doorbell record at once may land between two loads of a reader.
 *
 * watch() makes the word's page inaccessible; each access faults, the SIGSEGV handler counts
 * it, opens the page and sets the trap flag, so that instruction alone runs; the SIGTRAP after
 * it stores the next value and closes the page again. unwatch() opens the page, restores the
 * handlers and returns the count. x86-64 Linux only. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define TRAP_FLAG 0x100

static uint8_t *page;
static size_t page_size;
static volatile uint32_t *word;
static const uint32_t *stores;
static int count, stored, loads;
static struct sigaction old_segv, old_trap;

static void on_segv(int sig, siginfo_t *info, void *context)
{
	ucontext_t *uc = context;

	if ((uint8_t *)info->si_addr < page || (uint8_t *)info->si_addr >= page + page_size) {
		sigaction(SIGSEGV, &old_segv, NULL); /* not ours: it faults again, as it would have */
		return;
	}
	loads++;
	mprotect(page, page_size, PROT_READ | PROT_WRITE);
	uc->uc_mcontext.gregs[REG_EFL] |= TRAP_FLAG;
}

static void on_trap(int sig, siginfo_t *info, void *context)
{
	ucontext_t *uc = context;

	uc->uc_mcontext.gregs[REG_EFL] &= ~TRAP_FLAG;
	if (stored < count)
		*word = stores[stored++];
	mprotect(page, page_size, PROT_NONE);
}

/* Watch the word at `at` (alone on its page); store `values[0..n)` in turn after each load. */
int watch(void *at, const uint32_t *values, int n)
{
	struct sigaction segv = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO};
	struct sigaction trap = {.sa_sigaction = on_trap, .sa_flags = SA_SIGINFO};

	page_size = (size_t)sysconf(_SC_PAGESIZE);
	page = (uint8_t *)((uintptr_t)at & ~(uintptr_t)(page_size - 1));
	word = at;
	stores = values;
	count = n;
	stored = loads = 0;
	sigaction(SIGSEGV, &segv, &old_segv);
	sigaction(SIGTRAP, &trap, &old_trap);
	return mprotect(page, page_size, PROT_NONE);
}

/* Stop watching: the number of loads seen. */
int unwatch(void)
{
	mprotect(page, page_size, PROT_READ | PROT_WRITE);
	sigaction(SIGSEGV, &old_segv, NULL);
	sigaction(SIGTRAP, &old_trap, NULL);
	return loads;
}

/* The shared NIC's place and its start, as src/pyroce/nicd/place.py and launch.py:
 *
 * - the name: "\0pyroce-nicd/<uid>/<fnv1a64(folder) as 016x>/<device>@<address>" in the abstract
 *   namespace, where folder is PYROCE_STATS_DIR, else Python's tempfile.gettempdir() (TMPDIR,
 *   TEMP, TMP, /tmp, /var/tmp, /usr/tmp, the working folder: the first one usable, made absolute
 *   and normal as os.path.abspath does) + "/pyroce-<uid>", made 0700 if missing
 *   (nic.registry.stats_dir; /tmp/pyroce-<uid> if it cannot be made), and address is PYROCE_ADDR
 *   in the text form of Python's ipaddress (IPv6 in hex groups, the longest run of two or more
 *   zero groups as "::", as Python 3.11 writes it), link-local refused, or 127.0.0.1;
 * - the start: `$PYROCE_PYTHON -m pyroce nicd --background --device pyroce0` with
 *   launch.service_environment's environment, its one line read to the end of its output. */
#define _GNU_SOURCE
#include "nic_place.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PYROCE_DEFAULT_PYTHON
#define PYROCE_DEFAULT_PYTHON "python3" /* the build passes the Python that built the library */
#endif

#define LAUNCH_TIMEOUT_S 30 /* launch.launch's subprocess timeout */

extern char **environ;

unsigned long long pr_fnv1a64(const void *data, size_t length)
{
	const unsigned char *byte = data;
	unsigned long long value = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < length; i++)
		value = (value ^ byte[i]) * 0x100000001b3ULL;
	return value;
}

static void say(char *why, size_t size, const char *format, ...)
{
	va_list args;

	va_start(args, format);
	vsnprintf(why, size, format, args);
	va_end(args);
}

/* --- the address --------------------------------------------------------------------- */

/* IPv6 as Python's ipaddress writes it (3.11): groups in lowercase hex, the first longest run of
 * two or more zero groups as "::"; never a dotted IPv4 tail. */
static void ipv6_text(const struct in6_addr *address, char *out, size_t size)
{
	unsigned int groups[8];
	int best = -1, best_len = 0, run = -1, run_len = 0;
	size_t at = 0;

	for (int i = 0; i < 8; i++) {
		groups[i] = (unsigned int)address->s6_addr[2 * i] << 8 | address->s6_addr[2 * i + 1];
		if (groups[i]) {
			run = -1;
			run_len = 0;
			continue;
		}
		if (run < 0)
			run = i;
		if (++run_len > best_len) {
			best = run;
			best_len = run_len;
		}
	}
	if (best_len < 2)
		best = -1;
	out[0] = 0;
	for (int i = 0; i < 8 && at < size; i++) {
		if (i == best) {
			at += snprintf(out + at, size - at, "::");
			i += best_len - 1;
			continue;
		}
		at += snprintf(out + at, size - at, "%s%x", at && out[at - 1] != ':' ? ":" : "", groups[i]);
	}
}

/* PYROCE_ADDR in its normal form (registry.configured_address), or the default: 0 or EINVAL. */
static int place_address(char *out, size_t size, char *why, size_t why_size)
{
	const char *value = getenv("PYROCE_ADDR");
	struct in_addr v4;
	struct in6_addr v6;

	if (!value || !*value) {
		snprintf(out, size, "%s", PR_DEFAULT_ADDRESS);
		return 0;
	}
	if (inet_pton(AF_INET, value, &v4) == 1) {
		if ((ntohl(v4.s_addr) >> 16) == 0xa9fe) /* 169.254.0.0/16 */
			goto link_local;
		inet_ntop(AF_INET, &v4, out, size);
		return 0;
	}
	if (inet_pton(AF_INET6, value, &v6) == 1) {
		if (v6.s6_addr[0] == 0xfe && (v6.s6_addr[1] & 0xc0) == 0x80) /* fe80::/10 */
			goto link_local;
		ipv6_text(&v6, out, size);
		return 0;
	}
	say(why, why_size, "PYROCE_ADDR='%s' is not an IPv4 or IPv6 address", value);
	return EINVAL;
link_local:
	say(why, why_size, "PYROCE_ADDR='%s' is link-local: give a global or unique-local address", value);
	return EINVAL;
}

/* --- the folder ------------------------------------------------------------------------ */

/* os.path.normpath of an absolute path, in place. */
static void normal_path(char *path)
{
	char copy[PATH_MAX], *parts[PATH_MAX / 2], *rest, *part;
	int count = 0, slashes = path[0] == '/';

	if (slashes && path[1] == '/' && path[2] != '/')
		slashes = 2; /* POSIX keeps exactly two leading slashes */
	snprintf(copy, sizeof(copy), "%s", path);
	rest = copy;
	while ((part = strsep(&rest, "/"))) {
		if (!*part || !strcmp(part, "."))
			continue;
		if (strcmp(part, "..") || (!slashes && !count) || (count && !strcmp(parts[count - 1], "..")))
			parts[count++] = part;
		else if (count)
			count--;
	}
	size_t at = snprintf(path, PATH_MAX, "%.*s", slashes, "//");
	for (int i = 0; i < count && at < PATH_MAX; i++)
		at += snprintf(path + at, PATH_MAX - at, "%s%s", i ? "/" : "", parts[i]);
	if (!at)
		snprintf(path, PATH_MAX, ".");
}

/* A folder of tempfile's list, as _get_default_tempdir takes it: absolute and normal, and one a
 * file can be made in. */
static int usable_temp(const char *candidate, char *out)
{
	struct stat info;
	char cwd[PATH_MAX];

	if (candidate[0] == '/') {
		snprintf(out, PATH_MAX, "%s", candidate);
	} else {
		if (!getcwd(cwd, sizeof(cwd)) || snprintf(out, PATH_MAX, "%s/%s", cwd, candidate) >= PATH_MAX)
			return 0;
	}
	normal_path(out);
	return !stat(out, &info) && S_ISDIR(info.st_mode) && !access(out, W_OK | X_OK);
}

/* tempfile.gettempdir() */
static void temp_folder(char *out)
{
	static const char *const names[] = {"TMPDIR", "TEMP", "TMP"};
	static const char *const folders[] = {"/tmp", "/var/tmp", "/usr/tmp"};
	char cwd[PATH_MAX];

	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
		const char *value = getenv(names[i]);
		if (value && *value && usable_temp(value, out))
			return;
	}
	for (size_t i = 0; i < sizeof(folders) / sizeof(*folders); i++)
		if (usable_temp(folders[i], out))
			return;
	snprintf(out, PATH_MAX, "%s", getcwd(cwd, sizeof(cwd)) ? cwd : ".");
}

/* os.path.join(folder, name): the length it needs, as snprintf */
static int join(char *out, size_t size, const char *folder, const char *name)
{
	size_t length = strlen(folder);

	return snprintf(out, size, "%s%s%s", folder, length && folder[length - 1] == '/' ? "" : "/", name);
}

int pr_log_path(const struct pr_place *place, char *out, size_t size)
{
	char name[128];

	snprintf(name, sizeof(name), "nicd-%s@%s.log", place->device, place->address);
	return join(out, size, place->folder, name);
}

/* os.makedirs(path, 0o700, exist_ok=True): 0, or -1 */
static int make_folders(const char *path)
{
	char partial[PATH_MAX];
	struct stat info;

	snprintf(partial, sizeof(partial), "%s", path);
	for (char *slash = strchr(partial + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = 0;
		if (mkdir(partial, 0777) && errno != EEXIST)
			return -1;
		*slash = '/';
	}
	if (mkdir(partial, 0700) && errno != EEXIST)
		return -1;
	return !stat(partial, &info) && S_ISDIR(info.st_mode) ? 0 : -1;
}

/* registry.stats_dir(), else /tmp/pyroce-<uid> as place.nic_place */
static void place_folder(char *out)
{
	const char *explicit = getenv("PYROCE_STATS_DIR");
	char temp[PATH_MAX], own[64];
	int length;

	snprintf(own, sizeof(own), "pyroce-%u", (unsigned int)getuid());
	if (explicit && *explicit) {
		length = snprintf(out, PATH_MAX, "%s", explicit);
	} else {
		temp_folder(temp);
		length = join(out, PATH_MAX, temp, own);
	}
	if ((length >= PATH_MAX || make_folders(out)) && join(out, PATH_MAX, "/tmp", own) >= PATH_MAX)
		out[0] = 0; /* never: /tmp/pyroce-<uid> is short */
}

int pr_nic_place(struct pr_place *place, char *why, size_t size)
{
	int error = place_address(place->address, sizeof(place->address), why, size);

	if (error)
		return error;
	snprintf(place->device, sizeof(place->device), "%s", PR_DEVICE);
	place_folder(place->folder);
	memset(&place->name, 0, sizeof(place->name));
	place->name.sun_family = AF_UNIX;
	int length = snprintf(place->name.sun_path + 1, sizeof(place->name.sun_path) - 1, "pyroce-nicd/%u/%016llx/%s@%s",
			      (unsigned int)getuid(), pr_fnv1a64(place->folder, strlen(place->folder)), place->device,
			      place->address);
	place->name_len = offsetof(struct sockaddr_un, sun_path) + 1 + length;
	return 0;
}

/* --- the start ------------------------------------------------------------------------- */

/* launch.service_environment: this program's environment without the C driver's library path,
 * the place's address and folder, pyroce's folders first on PYTHONPATH. NULL if out of memory. */
static char **service_environment(const struct pr_place *place, size_t *inherited)
{
	size_t count = 0;
	const char *search = getenv("PYROCE_PYTHONPATH"), *path = getenv("PYTHONPATH");

	while (environ[count])
		count++;
	char **env = calloc(count + 4, sizeof(*env)), **at = env;
	if (!env)
		return NULL;
	for (size_t i = 0; i < count; i++) {
		static const char *const dropped[] = {"LD_LIBRARY_PATH=", "LD_PRELOAD=", "PYROCE_ADDR=",
						      "PYROCE_STATS_DIR=", "PYTHONPATH="};
		int keep = 1;
		for (size_t j = 0; j < sizeof(dropped) / sizeof(*dropped); j++)
			keep &= strncmp(environ[i], dropped[j], strlen(dropped[j])) != 0;
		if (keep)
			*at++ = environ[i];
	}
	*inherited = at - env;
	search = search && *search ? search : NULL;
	path = path && *path ? path : NULL;
	if (asprintf(at++, "PYROCE_ADDR=%s", place->address) < 0 ||
	    asprintf(at++, "PYROCE_STATS_DIR=%s", place->folder) < 0 ||
	    ((search || path) && asprintf(at++, "PYTHONPATH=%s%s%s", search ? search : "", search && path ? ":" : "",
					  path ? path : "") < 0)) {
		free(env); /* what asprintf made is lost: out of memory anyway */
		return NULL;
	}
	return env;
}

static void free_environment(char **env, size_t inherited)
{
	for (char **at = env + inherited; *at; at++)
		free(*at);
	free(env);
}

static double now_s(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec + now.tv_nsec / 1e9;
}

/* Read both pipes to their ends (or the deadline): 0, or ETIMEDOUT. */
static int read_all(int fds[2], char *texts[2], size_t sizes[2], double deadline)
{
	size_t used[2] = {0, 0};

	while (fds[0] >= 0 || fds[1] >= 0) {
		struct pollfd ready[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
		double left = deadline - now_s();
		if (left <= 0)
			return ETIMEDOUT;
		if (poll(ready, 2, (int)(left * 1000) + 1) < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		for (int i = 0; i < 2; i++) {
			if (fds[i] < 0 || !ready[i].revents)
				continue;
			char chunk[512];
			ssize_t got = read(fds[i], chunk, sizeof(chunk));
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {
				close(fds[i]);
				fds[i] = -1;
				continue;
			}
			size_t keep = (size_t)got < sizes[i] - 1 - used[i] ? (size_t)got : sizes[i] - 1 - used[i];
			memcpy(texts[i] + used[i], chunk, keep);
			used[i] += keep;
			texts[i][used[i]] = 0;
		}
	}
	return 0;
}

/* str.strip() in place */
static char *strip(char *text)
{
	size_t length;

	while (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r')
		text++;
	length = strlen(text);
	while (length && strchr(" \n\t\r", text[length - 1]))
		text[--length] = 0;
	return text;
}

int pr_launch(const struct pr_place *place, char *why, size_t size)
{
	const char *python = getenv("PYROCE_PYTHON");
	char *argv[] = {NULL, "-m", "pyroce", "nicd", "--background", "--device", (char *)place->device, NULL};
	char out[1024] = "", err[4096] = "", *texts[2] = {out, err}, code[32];
	size_t sizes[2] = {sizeof(out), sizeof(err)}, inherited = 0;
	int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, error, status = 0;
	posix_spawn_file_actions_t actions;
	posix_spawnattr_t attr;
	sigset_t all, none;
	pid_t pid;

	argv[0] = (char *)(python && *python ? python : PYROCE_DEFAULT_PYTHON);
	char **env = service_environment(place, &inherited);
	if (!env) {
		say(why, size, "cannot start the shared NIC: out of memory");
		return EIO;
	}
	if (pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC)) {
		error = errno;
		goto failed_to_spawn;
	}
	/* a new process of its own: stdin /dev/null, our pipes, no other descriptor of the program
	 * (its sockets would stay open in the NIC), default signal dispositions and no mask */
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
	posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
	posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
	posix_spawnattr_init(&attr);
	sigfillset(&all);
	sigemptyset(&none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
	error = posix_spawnp(&pid, argv[0], &actions, &attr, argv, env);
	posix_spawn_file_actions_destroy(&actions);
	posix_spawnattr_destroy(&attr);
	if (error)
		goto failed_to_spawn;
	close(out_pipe[1]);
	close(err_pipe[1]);
	int reading[2] = {out_pipe[0], err_pipe[0]};
	error = read_all(reading, texts, sizes, now_s() + LAUNCH_TIMEOUT_S);
	for (int i = 0; i < 2; i++)
		if (reading[i] >= 0)
			close(reading[i]);
	if (error)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	free_environment(env, inherited);
	if (error) {
		say(why, size, "cannot start the shared NIC (%s -m pyroce nicd --background --device %s): %s", argv[0],
		    place->device, error == ETIMEDOUT ? "timed out after 30 seconds" : strerror(error));
		return EIO;
	}

	char *line = strip(out), *detail = strchr(line, ' ');
	if (detail)
		*detail++ = 0;
	else
		detail = "";
	if (!strcmp(line, "ready")) {
		char log[PATH_MAX + 128];
		pr_log_path(place, log, sizeof(log));
		fprintf(stderr, "pyroce: started the shared NIC %s on %s (pid %s; log %s; `pyroce nicd --stop` stops it)\n",
			place->device, place->address, detail, log);
		return 0;
	}
	if (!strcmp(line, "busy"))
		return 0;
	if (!*detail) { /* the last line of its stderr, else its exit status */
		char *last = strip(err), *newline = strrchr(last, '\n');
		detail = newline ? newline + 1 : last;
		if (!*detail) {
			snprintf(code, sizeof(code), "exit status %d",
				 WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
			detail = code;
		}
	}
	say(why, size, "the shared NIC %s on %s cannot start: %s", place->device, place->address, detail);
	return EIO;

failed_to_spawn:
	for (int i = 0; i < 2; i++) {
		if (out_pipe[i] >= 0)
			close(out_pipe[i]);
		if (err_pipe[i] >= 0)
			close(err_pipe[i]);
	}
	free_environment(env, inherited);
	say(why, size, "cannot start the shared NIC (%s -m pyroce nicd --background --device %s): %s", argv[0],
	    place->device, strerror(error));
	return EIO;
}

/* The way into Python: the interpreter started on first use (or the host's own, when the
 * program is Python), pyroce.driver.program imported (the shared NIC's commands, or with
 * PYROCE_NIC=embedded the NIC in this process), and each control verb one call under the GIL,
 * its exception turned into libibverbs' errno.
 *
 * A C program's interpreter is started with no signal handlers and without touching the
 * locale (the program keeps its own), then the GIL is released so any engine thread runs while
 * the program does; every call takes it back with PyGILState_Ensure, from whichever thread the
 * program calls in. With the shared NIC the interpreter has no thread of its own, so fork()
 * keeps it usable in the child (PyOS_BeforeFork/AfterFork around the program's fork).
 */
#include "pyroce_verbs.h"

#include <errno.h>
#include <signal.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t started = PTHREAD_ONCE_INIT;
static PyObject *calls;     /* pyroce.driver.program */
static int start_error;     /* errno for every verb when Python or pyroce could not start */
static pid_t started_in;    /* the process whose interpreter and engine threads these are */
static int hosted;          /* the program is Python itself (pyverbs): its interpreter is ours */
static int fork_safe;       /* the NIC is not in this process: a forked child may use the verbs */
static PyGILState_STATE fork_gil;

/* Around a fork() of a C program: Python's own state made consistent for both processes, as
 * os.fork() does (the program's interpreter does this itself when the program is Python). */
static void before_fork(void)
{
	fork_gil = PyGILState_Ensure();
	PyOS_BeforeFork();
}

static void after_fork_in_parent(void)
{
	PyOS_AfterFork_Parent();
	PyGILState_Release(fork_gil);
}

static void after_fork_in_child(void)
{
	PyOS_AfterFork_Child(); /* runs os.register_at_fork's hooks: the child connects anew */
	PyGILState_Release(fork_gil);
	started_in = getpid();
}

static void child_of_hosted_fork(void)
{
	started_in = getpid();
}

/* PYROCE_PYTHONPATH (set by `pyroce run`): the folders of the pyroce package and its
 * dependencies (a venv's site-packages, say). The interpreter the library started searches them
 * first; a Python program's own interpreter last, so its imports stay what they were. */
static void add_search_path(int first)
{
	const char *value = getenv("PYROCE_PYTHONPATH");
	PyObject *path = PySys_GetObject("path"); /* borrowed */
	Py_ssize_t at = first ? 0 : PY_SSIZE_T_MAX;

	if (!value || !path)
		return;
	char *copy = strdup(value), *rest = copy, *entry;
	while (copy && (entry = strsep(&rest, ":"))) {
		if (!*entry)
			continue;
		PyObject *item = PyUnicode_DecodeFSDefault(entry);
		if (item && PySequence_Contains(path, item) == 0)
			PyList_Insert(path, first ? at++ : at, item);
		Py_XDECREF(item);
		PyErr_Clear();
	}
	free(copy);
}

/* A Python program's interpreter runs this library's Python calls: it must be the version
 * the library was compiled for (3.11.2 for 3.11.7 is fine, the ABI is the minor version's). */
static int same_python(void)
{
	char want[16];

	snprintf(want, sizeof(want), "%d.%d.", PY_MAJOR_VERSION, PY_MINOR_VERSION);
	if (!strncmp(Py_GetVersion(), want, strlen(want)))
		return 1;
	fprintf(stderr, "pyroce: this program's Python is %.*s, pyroce's C driver was built for %s: run it with a "
		"Python %d.%d\n", (int)strcspn(Py_GetVersion(), " "), Py_GetVersion(), PY_VERSION,
		PY_MAJOR_VERSION, PY_MINOR_VERSION);
	return 0;
}

/* This library and the pyroce it calls must be of the same sources: a library kept from an
 * older pyroce (an exported LD_LIBRARY_PATH) would call functions that changed. */
static int handshake(void)
{
	PyObject *result = PyObject_CallMethod(calls, "handshake", "s", PYROCE_SOURCES_DIGEST);

	if (result) {
		Py_DECREF(result);
		return 1;
	}
	PyObject *type, *value, *traceback;
	PyErr_Fetch(&type, &value, &traceback);
	PyObject *text = value ? PyObject_Str(value) : NULL;
	fprintf(stderr, "pyroce: %s\n", text ? PyUnicode_AsUTF8(text) : "the C driver and pyroce do not match");
	Py_XDECREF(text);
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(traceback);
	PyErr_Clear();
	return 0;
}

static void start(void)
{
	static struct sigaction program_actions[NSIG];
	int owned = 0;

	/* Python's signal module installs its SIGINT handler when imported, whatever
	 * install_signal_handlers says: the program's own dispositions are put back after. */
	for (int signum = 1; signum < NSIG; signum++)
		sigaction(signum, NULL, &program_actions[signum]);

	if (!Py_IsInitialized()) {
		PyPreConfig preconfig;
		PyConfig config;
		PyStatus status;

		PyPreConfig_InitPythonConfig(&preconfig);
		preconfig.configure_locale = 0; /* the program's locale stays the program's */
		preconfig.coerce_c_locale = 0;
		preconfig.utf8_mode = 1;
		status = Py_PreInitialize(&preconfig);
		if (PyStatus_Exception(status)) {
			fprintf(stderr, "pyroce: cannot start Python: %s\n", status.err_msg ? status.err_msg : "?");
			start_error = ENOSYS;
			return;
		}
		PyConfig_InitPythonConfig(&config);
		config.install_signal_handlers = 0;
		config.parse_argv = 0;
		if (!getenv("PYTHONHOME"))
			PyConfig_SetBytesString(&config, &config.home, PYROCE_PYTHON_HOME);
		status = Py_InitializeFromConfig(&config);
		PyConfig_Clear(&config);
		if (PyStatus_Exception(status)) {
			fprintf(stderr, "pyroce: cannot start Python (%s): %s\n", PYROCE_PYTHON_HOME,
				status.err_msg ? status.err_msg : "unknown error");
			start_error = ENOSYS;
			return;
		}
		owned = 1;
	}
	hosted = !owned;
	started_in = getpid();
	if (hosted && !same_python()) {
		start_error = ENOSYS;
		return;
	}
	PyGILState_STATE state = PyGILState_Ensure();
	add_search_path(owned);
	calls = PyImport_ImportModule("pyroce.driver.program");
	if (!calls) {
		fprintf(stderr, "pyroce: cannot start pyroce's driver (is PYROCE_PYTHONPATH set? `pyroce run` sets it):\n");
		PyErr_Print();
		start_error = ENOSYS;
	} else if (!handshake()) {
		start_error = ENOSYS;
	} else {
		PyObject *safe = PyObject_GetAttrString(calls, "FORK_SAFE");
		fork_safe = safe && PyObject_IsTrue(safe) == 1;
		Py_XDECREF(safe);
		PyErr_Clear();
		if (fork_safe && owned)
			pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
		else if (fork_safe)
			pthread_atfork(NULL, NULL, child_of_hosted_fork);
	}
	PyGILState_Release(state);
	if (owned) {
		for (int signum = 1; signum < NSIG; signum++)
			if (signum != SIGKILL && signum != SIGSTOP)
				sigaction(signum, &program_actions[signum], NULL);
		PyEval_SaveThread(); /* the engine thread needs the GIL while the program runs */
	}
}

int pr_enter(PyGILState_STATE *state)
{
	pthread_once(&started, start);
	if (start_error) {
		errno = start_error;
		return -1;
	}
	if (getpid() != started_in) {
		/* A child of fork() with the NIC embedded in the parent: the engine threads stayed
		 * there, and the GIL may be held by one of them for ever here. Refuse rather than hang. */
		static int told;
		if (!told++)
			fprintf(stderr, "pyroce: a child of fork() cannot use the NIC embedded in its parent "
				"(PYROCE_NIC=embedded): exec a new program, or use the shared NIC\n");
		errno = EIO;
		return -1;
	}
	*state = PyGILState_Ensure();
	return 0;
}

void pr_leave(PyGILState_STATE state)
{
	PyGILState_Release(state);
}

/* An empty poll from a Python program (pyverbs' poll_cq holds the GIL): the engine thread
 * needs the GIL to make the completion being waited for, and would otherwise get it only when
 * the interpreter switches threads (every 5 ms). Let go of it for a nap (as a C poller naps
 * after its spins; docs/architecture.md has the measurements). 0 if the caller holds no GIL
 * (a C program, or a Python thread that released it): then nothing was done. */
int pr_nap_without_gil(void)
{
	if (!hosted || !PyGILState_Check())
		return 0;
	PyThreadState *thread = PyEval_SaveThread();
	struct timespec nap = {0, 1};
	nanosleep(&nap, NULL);
	PyEval_RestoreThread(thread);
	return 1;
}

/* Let go of the GIL for a wait with no Python to run (an event wait of a Python program, which
 * calls verbs holding it): the thread state for PyEval_RestoreThread, or NULL if the caller
 * holds no GIL (a C program). */
PyThreadState *pr_release_gil(void)
{
	return hosted && PyGILState_Check() ? PyEval_SaveThread() : NULL;
}

/* The errno of the exception being raised (and it cleared): a PyverbsError's error_code
 * (EINVAL for a PyverbsUserError, which has none), an OSError's errno; anything else is a
 * bug in pyroce, printed with its traceback, and EIO. */
static int errno_of_exception(const char *verb)
{
	PyObject *type, *value, *traceback;
	int code = EIO;

	PyErr_Fetch(&type, &value, &traceback);
	PyErr_NormalizeException(&type, &value, &traceback);
	PyObject *error_code = value ? PyObject_GetAttrString(value, "error_code") : NULL;
	if (!error_code)
		PyErr_Clear();
	if (error_code || (value && PyErr_GivenExceptionMatches(type, PyExc_OSError))) {
		PyObject *number = error_code ? error_code : PyObject_GetAttrString(value, "errno");
		long found = number && PyLong_Check(number) ? PyLong_AsLong(number) : -1;
		code = found > 0 ? (int)found : EINVAL;
		Py_XDECREF(number);
		PyErr_Clear();
		const char *verbose = getenv("PYROCE_VERBOSE");
		if (verbose && *verbose && strcmp(verbose, "0")) {
			PyObject *text = PyObject_Str(value);
			fprintf(stderr, "pyroce: %s: %s\n", verb, text ? PyUnicode_AsUTF8(text) : "?");
			Py_XDECREF(text);
			PyErr_Clear();
		}
		Py_XDECREF(type);
		Py_XDECREF(value);
		Py_XDECREF(traceback);
		return code;
	}
	fprintf(stderr, "pyroce: %s: internal error:\n", verb);
	PyErr_Restore(type, value, traceback);
	PyErr_Print();
	return code;
}

/* calls.<function>(*Py_BuildValue(format, ...)); NULL with errno set if it raised. The
 * caller holds the GIL. */
PyObject *pr_call(const char *verb, const char *function, const char *format, ...)
{
	va_list args;
	PyObject *arguments, *callable, *result = NULL;

	va_start(args, format);
	arguments = Py_VaBuildValue(format, args);
	va_end(args);
	callable = PyObject_GetAttrString(calls, function);
	if (arguments && callable)
		result = PyObject_CallObject(callable, PyTuple_Check(arguments) ? arguments : NULL);
	Py_XDECREF(arguments);
	Py_XDECREF(callable);
	if (!result)
		errno = errno_of_exception(verb);
	return result;
}

/* An integer attribute of a Python object, as 64 bits (0 if it has none: a field pyroce
 * does not report). */
long long pr_long(PyObject *obj, const char *name)
{
	PyObject *value = PyObject_GetAttrString(obj, name);
	long long result = 0;

	if (value && PyLong_Check(value))
		result = (long long)PyLong_AsUnsignedLongLongMask(value);
	Py_XDECREF(value);
	PyErr_Clear();
	return result;
}

int pr_destroy(const char *verb, const char *function, PyObject *obj)
{
	PyGILState_STATE state;
	PyObject *result;

	if (pr_enter(&state))
		return errno;
	result = pr_call(verb, function, "(O)", obj);
	if (result) {
		Py_DECREF(result);
		Py_DECREF(obj);
	}
	pr_leave(state);
	return result ? 0 : errno;
}

void *pr_alloc_for(size_t size, const char *verb, const char *undo, PyObject *obj)
{
	void *self = calloc(1, size);
	PyObject *gone;

	if (self) {
		Py_INCREF(obj);
		return self;
	}
	gone = pr_call(verb, undo, "(O)", obj);
	Py_XDECREF(gone);
	errno = ENOMEM;
	return NULL;
}

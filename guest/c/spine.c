/*
 * The Spine Guest: CPython 3.11 as a WASI reactor.
 *
 * This file is the whole C side of the Guest. It registers the builtin module
 * _spine, whose call/prepare/resolve/peek reach the Host imports of the same names
 * in module "spine" (compile_program and compile_last compile a program without
 * a Python AST), and exports the Guest ABI (docs/abi.md): abi_version, init,
 * alloc, release, execute, prefix_begin, prefix_feed, interrupt, wake.
 *
 * _spine returns NULL (with a Python exception set) only when its own argument
 * parsing, its buffer checks or a bytes allocation fail. Everything else, tool
 * errors included, comes back as a response envelope that bootstrap.decode reads.
 */
/* For the compiler's internal API used by compile_program, at the end of this file. */
#define Py_BUILD_CORE_BUILTIN 1
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPINE_ABI_VERSION 1

/* maxMessage: requests and responses are capped at 1 MiB. */
#define SPINE_MAX_MESSAGE (1u << 20)

/* The most characters of an error's message, and of its traceback, in an execute response. */
#define SPINE_MAX_ERROR_TEXT (64u << 10)

/* What call and resolve return when the Host could not write a response. */
#define SPINE_FAILED 0xFFFFFFFFu

/* The working directory a program starts in. */
#define SPINE_WORKDIR "/work"

__attribute__((import_module("spine"), import_name("call"))) uint32_t
spine_call(uint32_t ptr, uint32_t size, uint32_t out, uint32_t capacity);

__attribute__((import_module("spine"), import_name("prepare"))) uint32_t
spine_prepare(uint32_t ptr, uint32_t size);

__attribute__((import_module("spine"), import_name("resolve"))) uint32_t
spine_resolve(uint32_t id, uint32_t ptr, uint32_t size, uint32_t out, uint32_t capacity);

__attribute__((import_module("spine"), import_name("peek"))) uint32_t
spine_peek(uint32_t id, uint32_t out, uint32_t capacity);

/* What peek answers besides a response's length (docs/abi.md). */
#define SPINE_PEEK_RUNNING 0xFFFFFFFEu
#define SPINE_PEEK_NONE 0xFFFFFFFDu

/*
 * window is true while the Guest's own chain step runs and no code of the
 * program can: in the pending call wake schedules, and while prefix mode reads
 * a chunk. Only then does _spine.peek hand back a read's value; at any other
 * time it only asks the Host to wake the Guest when the read finishes.
 */
static int window;

/*
 * One response buffer for the life of the instance. The Host writes a response
 * into it and python_call copies it into a bytes object before any Python code
 * runs again, so calls never overlap. It lives in .bss: pages the Host never
 * writes stay untouched.
 */
static char response_buffer[SPINE_MAX_MESSAGE];

static uint32_t
guest_offset(const void *p)
{
	return (uint32_t)(uintptr_t)p;
}

static PyObject *
response_bytes(uint32_t n)
{
	if (n == SPINE_FAILED || n > SPINE_MAX_MESSAGE) {
		PyErr_SetString(PyExc_RuntimeError,
		                "tool response was not delivered: it is larger than the 1 MiB message limit");
		return NULL;
	}
	return PyBytes_FromStringAndSize(response_buffer, (Py_ssize_t)n);
}

static int
request_buffer(Py_buffer *request)
{
	if ((size_t)request->len > UINT32_MAX) {
		PyBuffer_Release(request);
		PyErr_SetString(PyExc_ValueError, "tool request is too large");
		return -1;
	}
	return 0;
}

/* _spine.call(request: bytes) -> bytes */
static PyObject *
python_call(PyObject *self, PyObject *args)
{
	Py_buffer request;
	if (!PyArg_ParseTuple(args, "y*:call", &request)) {
		return NULL;
	}
	if (request_buffer(&request) < 0) {
		return NULL;
	}
	uint32_t n = spine_call(guest_offset(request.buf), (uint32_t)request.len,
	                        guest_offset(response_buffer), SPINE_MAX_MESSAGE);
	PyBuffer_Release(&request);
	return response_bytes(n);
}

/* _spine.prepare(request: bytes) -> int; 0 means "not prepared". */
static PyObject *
python_prepare(PyObject *self, PyObject *args)
{
	Py_buffer request;
	if (!PyArg_ParseTuple(args, "y*:prepare", &request)) {
		return NULL;
	}
	if (request_buffer(&request) < 0) {
		return NULL;
	}
	uint32_t id = spine_prepare(guest_offset(request.buf), (uint32_t)request.len);
	PyBuffer_Release(&request);
	return PyLong_FromUnsignedLong(id);
}

/* _spine.resolve(id: int, request: bytes) -> bytes; id 0 is a normal call. */
static PyObject *
python_resolve(PyObject *self, PyObject *args)
{
	unsigned int id;
	Py_buffer request;
	if (!PyArg_ParseTuple(args, "Iy*:resolve", &id, &request)) {
		return NULL;
	}
	if (request_buffer(&request) < 0) {
		return NULL;
	}
	uint32_t n = spine_resolve((uint32_t)id, guest_offset(request.buf), (uint32_t)request.len,
	                           guest_offset(response_buffer), SPINE_MAX_MESSAGE);
	PyBuffer_Release(&request);
	return response_bytes(n);
}

/*
 * _spine.peek(id: int) -> bytes | None | False: the response of the finished
 * early read id without claiming it, None while it runs, False when there is
 * no such read (claimed, cancelled, unknown). Either way the Host wakes the
 * Guest (wake, below) once a running read it was asked about finishes. Outside
 * a window it answers None and only asks for that wake: a program that imports
 * _spine learns nothing from it.
 */
static PyObject *
python_peek(PyObject *self, PyObject *args)
{
	unsigned int id;
	if (!PyArg_ParseTuple(args, "I:peek", &id)) {
		return NULL;
	}
	if (!window) {
		(void)spine_peek((uint32_t)id, 0, 0);
		Py_RETURN_NONE;
	}
	uint32_t n = spine_peek((uint32_t)id, guest_offset(response_buffer), SPINE_MAX_MESSAGE);
	if (n == SPINE_PEEK_RUNNING) {
		Py_RETURN_NONE;
	}
	if (n == SPINE_PEEK_NONE) {
		Py_RETURN_FALSE;
	}
	return response_bytes(n);
}

/* compile_program and compile_last, defined at the end of this file. */
static PyObject *python_compile_program(PyObject *self, PyObject *args);
static PyObject *python_compile_last(PyObject *self, PyObject *pending);
#define SPINE_COMPILE_METHODS \
	{"compile_program", python_compile_program, METH_VARARGS, \
	 "compile_program(source: str, filename: str) -> (code, pending) | None\n\n" \
	 "Compile a program as bootstrap._run does, without a Python AST; None: take that path."}, \
	{"compile_last", python_compile_last, METH_O, \
	 "compile_last(pending) -> code | ast.Expression\n\n" \
	 "Compile the last top-level expression compile_program set aside (the tree: audit hooks are on)."},

static PyMethodDef spine_methods[] = {
	{"call", python_call, METH_VARARGS,
	 "call(request: bytes) -> bytes\n\nSend one JSON tool request to the Host; return the response envelope."},
	{"prepare", python_prepare, METH_VARARGS,
	 "prepare(request: bytes) -> int\n\nAsk the Host to start an early read; 0 means not prepared."},
	{"resolve", python_resolve, METH_VARARGS,
	 "resolve(id: int, request: bytes) -> bytes\n\nClaim a prepared read (or call normally when it does not match)."},
	{"peek", python_peek, METH_VARARGS,
	 "peek(id: int) -> bytes | None | False\n\nA finished early read's response, unclaimed (only in the Guest's own windows)."},
	SPINE_COMPILE_METHODS
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef spine_module = {
	PyModuleDef_HEAD_INIT, "_spine", "The Guest side of the Spine tool bridge.", -1, spine_methods,
};

static PyObject *
PyInit__spine(void)
{
	PyObject *m = PyModule_Create(&spine_module);
	if (m == NULL) {
		return NULL;
	}
	if (PyModule_AddIntConstant(m, "MAX_MESSAGE", SPINE_MAX_MESSAGE) < 0 ||
	    PyModule_AddIntConstant(m, "MAX_ERROR_TEXT", SPINE_MAX_ERROR_TEXT) < 0 ||
	    PyModule_AddIntConstant(m, "ABI_VERSION", SPINE_ABI_VERSION) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}

/* bootstrap.execute, prefix_begin, prefix_feed and chain_step, looked up once by init. */
static PyObject *execute_entry;
static PyObject *prefix_begin_entry;
static PyObject *prefix_feed_entry;
static PyObject *chain_step_entry;

__attribute__((export_name("abi_version"))) int32_t
spine_abi_version(void)
{
	return SPINE_ABI_VERSION;
}

/*
 * spine_extra_inittab adds the inittab entries of the extension modules linked
 * into a Guest with compiled packages (the data Guest's numpy, under their
 * dotted names); a generated object linked beside spine.o defines the strong
 * one. This weak one, of the default Guest, adds none.
 */
__attribute__((weak)) int
spine_extra_inittab(void)
{
	return 0;
}

/*
 * init starts CPython and imports bootstrap. 0 is success; anything else names
 * the step that failed (the Python error, if any, went to stderr).
 */
__attribute__((export_name("init"))) int32_t
spine_init(void)
{
	if (execute_entry != NULL) {
		return 0;
	}
	PyStatus status;
	PyPreConfig preconfig;
	PyPreConfig_InitIsolatedConfig(&preconfig);
	preconfig.utf8_mode = 1;
	status = Py_PreInitialize(&preconfig);
	if (PyStatus_Exception(status)) {
		return 1;
	}
	if (PyImport_AppendInittab("_spine", PyInit__spine) < 0) {
		return 2;
	}
	if (spine_extra_inittab() < 0) {
		return 2;
	}

	PyConfig config;
	PyConfig_InitIsolatedConfig(&config);
	config.site_import = 0;
	config.write_bytecode = 0;
	config.buffered_stdio = 0;
	config.install_signal_handlers = 0;
	config.pathconfig_warnings = 0;
	config.user_site_directory = 0;
	config.parse_argv = 0;
	config.safe_path = 1;
	/*
	 * The standard library comes from python311.zip, frozen modules included, so
	 * that each carries __file__ as one imported from a zip does. Only the import
	 * system itself (importlib._bootstrap, its external half and zipimport) stays
	 * frozen: CPython needs it to read the zip.
	 */
	config.use_frozen_modules = 0;
	status = PyConfig_SetString(&config, &config.home, L"/usr/local");
	if (!PyStatus_Exception(status)) {
		status = PyConfig_SetString(&config, &config.program_name, L"spine");
	}
	if (!PyStatus_Exception(status)) {
		config.module_search_paths_set = 1;
		status = PyWideStringList_Append(&config.module_search_paths,
		                                 L"/usr/local/lib/python311.zip");
	}
	if (!PyStatus_Exception(status)) {
		status = Py_InitializeFromConfig(&config);
	}
	PyConfig_Clear(&config);
	if (PyStatus_Exception(status)) {
		if (status.err_msg != NULL) {
			fprintf(stderr, "spine: CPython did not start: %s\n", status.err_msg);
		}
		return 3;
	}

	PyObject *bootstrap = PyImport_ImportModule("bootstrap");
	if (bootstrap == NULL) {
		PyErr_Print();
		return 4;
	}
	PyObject *execute = PyObject_GetAttrString(bootstrap, "execute");
	if (execute == NULL) {
		Py_DECREF(bootstrap);
		PyErr_Print();
		return 5;
	}
	prefix_begin_entry = PyObject_GetAttrString(bootstrap, "prefix_begin");
	prefix_feed_entry = prefix_begin_entry == NULL ? NULL : PyObject_GetAttrString(bootstrap, "prefix_feed");
	chain_step_entry = prefix_feed_entry == NULL ? NULL : PyObject_GetAttrString(bootstrap, "chain_step");
	Py_DECREF(bootstrap);
	if (chain_step_entry == NULL) {
		Py_CLEAR(prefix_begin_entry);
		Py_CLEAR(prefix_feed_entry);
		Py_DECREF(execute);
		PyErr_Print();
		return 6;
	}
	/* The program's working directory: the Host mounts a scratch tree at "/"
	 * holding it (docs/abi.md). wasi-libc keeps the directory in linear memory,
	 * so every run starts in it again. Without that mount the Guest stays at "/". */
	(void)chdir(SPINE_WORKDIR);
	execute_entry = execute; /* last: it marks init as done */
	return 0;
}

__attribute__((export_name("alloc"))) uint32_t
spine_alloc(uint32_t n)
{
	return guest_offset(malloc(n ? n : 1));
}

__attribute__((export_name("release"))) void
spine_release(uint32_t ptr)
{
	free((void *)(uintptr_t)ptr);
}

/*
 * execute runs one program: the request JSON at ptr goes to bootstrap.execute,
 * whose response JSON is copied into a buffer the Host frees with release.
 * It returns len << 32 | ptr, or 0 when this bridge itself failed.
 */
/*
 * drop_interrupt forgets an interrupt (see interrupt, below) that came too late
 * for the run it was meant for — after its program ended, in the Guest's own
 * work — so that no run starts with a KeyboardInterrupt that is not its own.
 * A SIGINT handler an earlier program of a session installed runs now.
 */
static void
drop_interrupt(void)
{
	if (PyErr_CheckSignals() < 0) {
		PyErr_Clear();
	}
}

__attribute__((export_name("execute"))) uint64_t
spine_execute(uint32_t ptr, uint32_t len)
{
	if (execute_entry == NULL) {
		return 0;
	}
	drop_interrupt();
	PyObject *request = PyBytes_FromStringAndSize((const char *)(uintptr_t)ptr, (Py_ssize_t)len);
	if (request == NULL) {
		PyErr_Clear();
		return 0;
	}
	PyObject *response = PyObject_CallOneArg(execute_entry, request);
	Py_DECREF(request);
	if (response == NULL || !PyBytes_Check(response)) {
		/*
		 * Not PyErr_Print: it would exit the process on SystemExit. A
		 * KeyboardInterrupt here is the Host's interrupt landing in the
		 * bootstrap's own work: the Host knows, the program's stderr need not.
		 */
		if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
			PyErr_Clear();
		} else if (PyErr_Occurred()) {
			PyErr_WriteUnraisable(execute_entry);
		}
		Py_XDECREF(response);
		return 0;
	}
	Py_ssize_t n = PyBytes_GET_SIZE(response);
	char *copy = malloc(n ? (size_t)n : 1);
	if (copy == NULL) {
		Py_DECREF(response);
		return 0;
	}
	memcpy(copy, PyBytes_AS_STRING(response), (size_t)n);
	Py_DECREF(response);
	return ((uint64_t)(uint32_t)n << 32) | guest_offset(copy);
}

/*
 * call_int calls a bootstrap entry that takes bytes and answers an int. The
 * entries never raise; should one fail anyway, the error is dropped without a
 * word on stderr (which belongs to the program's output) and -1 returned.
 */
static int32_t
call_int(PyObject *entry, uint32_t ptr, uint32_t len)
{
	if (entry == NULL) {
		return -1;
	}
	PyObject *arg = PyBytes_FromStringAndSize((const char *)(uintptr_t)ptr, (Py_ssize_t)len);
	if (arg == NULL) {
		PyErr_Clear();
		return -1;
	}
	PyObject *answer = PyObject_CallOneArg(entry, arg);
	Py_DECREF(arg);
	if (answer == NULL) {
		PyErr_Clear();
		return -1;
	}
	long long n = PyLong_Check(answer) ? PyLong_AsLongLong(answer) : -1;
	Py_DECREF(answer);
	if (n == -1 && PyErr_Occurred()) {
		PyErr_Clear();
	}
	if (n > INT32_MAX) {
		n = INT32_MAX;
	} else if (n < INT32_MIN) {
		n = -1;
	}
	return (int32_t)n;
}

/*
 * prefix_begin starts prefix mode: the JSON at ptr is {"inputs", "tools",
 * "early_reads"}. 0 is success, negative an internal failure.
 */
__attribute__((export_name("prefix_begin"))) int32_t
spine_prefix_begin(uint32_t ptr, uint32_t len)
{
	drop_interrupt();
	return call_int(prefix_begin_entry, ptr, len);
}

/*
 * prefix_feed hands the Guest the next chunk of the program's bytes (a UTF-8
 * character may be split across chunks). It answers how many early reads
 * prefix mode has prepared so far, or a negative number on an internal failure.
 * The Host owns the chunk's memory; the Guest copies it before it returns.
 */
__attribute__((export_name("prefix_feed"))) int32_t
spine_prefix_feed(uint32_t ptr, uint32_t len)
{
	window = 1;
	int32_t n = call_int(prefix_feed_entry, ptr, len);
	window = 0;
	return n;
}

/*
 * interrupt asks the running program to stop as Ctrl-C does natively: the
 * interpreter raises KeyboardInterrupt at its next check (every backward jump
 * and call). The Host calls it from its tick, in the middle of execute, when a
 * session's run is out of time, and again at every tick after, should the
 * program have swallowed the last one; like a signal handler it only sets
 * flags, so any point of the Guest's work is a safe one. A program in an
 * except or finally block that a KeyboardInterrupt entered is handling it, and
 * is left to finish: a second one would cut its clean-up short. 2 is SIGINT.
 */
static int stepping;           /* the chain step runs (chain_pending, below) */
static int interrupt_deferred; /* an interrupt that came meanwhile */

__attribute__((export_name("interrupt"))) int32_t
spine_interrupt(void)
{
	if (stepping) {
		interrupt_deferred = 1;
		return 0;
	}
	if (Py_IsInitialized()) {
		PyObject *handled = PyErr_GetHandledException();
		int handling = handled != NULL && PyErr_GivenExceptionMatches(handled, PyExc_KeyboardInterrupt);
		Py_XDECREF(handled);
		if (handling) {
			return 0;
		}
	}
	return PyErr_SetInterruptEx(2);
}

/*
 * chain_pending is the pending call wake schedules: it runs bootstrap.chain_step
 * (plm.chain) between two bytecodes of the program, in a window the program
 * cannot see: tracing and profiling suspended, the cyclic collector off (so no
 * __del__ or gc callback of the program runs), an interrupt arriving meanwhile
 * deferred to the program's next bytecode, the exception state as it was, and
 * whatever the step raises dropped. The step runs no code of the program.
 */
static int wake_scheduled;

static int
chain_pending(void *arg)
{
	(void)arg;
	wake_scheduled = 0;
	if (chain_step_entry == NULL || window) {
		return 0;
	}
	PyThreadState *tstate = PyThreadState_Get();
	PyObject *type, *value, *traceback;
	PyErr_Fetch(&type, &value, &traceback);
	PyThreadState_EnterTracing(tstate);
	int collecting = PyGC_Disable();
	if (PyOS_InterruptOccurred()) {
		interrupt_deferred = 1;
	}
	window = stepping = 1;
	PyObject *answer = PyObject_CallNoArgs(chain_step_entry);
	window = stepping = 0;
	if (answer == NULL) {
		PyErr_Clear();
	}
	Py_XDECREF(answer);
	if (collecting) {
		PyGC_Enable();
	}
	PyThreadState_LeaveTracing(tstate);
	PyErr_Restore(type, value, traceback);
	if (interrupt_deferred) {
		interrupt_deferred = 0;
		PyErr_SetInterruptEx(2);
	}
	return 0;
}

/*
 * wake asks the Guest to run its chain step at the program's next bytecode: an
 * early read that a chained read waits for has finished (docs/early-reads.md).
 * The Host calls it from its tick, in the middle of execute; like interrupt it
 * only sets flags (Py_AddPendingCall is safe wherever the Guest stopped), and
 * one wake scheduled is enough however often it comes. Optional: without it,
 * whole programs do not chain early reads.
 */
__attribute__((export_name("wake"))) int32_t
spine_wake(void)
{
	if (wake_scheduled || execute_entry == NULL) {
		return 0;
	}
	if (Py_AddPendingCall(chain_pending, NULL) < 0) {
		return -1;
	}
	wake_scheduled = 1;
	return 0;
}

/*
 * compile_program: the program's code without a Python AST.
 *
 * bootstrap._run parses the program to an ast.Module, takes a last top-level
 * expression statement off it, compiles the rest for exec and that expression
 * for eval (just before it is evaluated, after the rest has run). The round
 * trip through Python objects (ast2obj, obj2ast, validation) is most of what
 * compiling a small program costs. compile_program does the same steps on the
 * parser's own tree, in C: the same parser, compiler, flags and filename, so
 * syntax errors, warnings, line numbers and future features come out as they
 * do there. It answers None, before parsing, when it cannot promise that:
 *
 *  - an audit hook is installed: compile() raises audit events the hook must
 *    see, three of them on that path;
 *  - the tree might be deeper than that path's conversion of it to and from
 *    Python objects allows (it raises RecursionError at about the recursion
 *    limit). A program shorter than the recursion headroom cannot be: no byte
 *    adds more than one level. For a longer one, depth_bound bounds the depth
 *    from each statement's own length; past the headroom, compile_program
 *    answers the tree as ast.Module (raising what compile(..., PyCF_ONLY_AST)
 *    raises), and the caller goes on with it on the Python path.
 *
 * The answer is (code, pending): pending is None, or holds the last expression
 * for compile_last, which compiles it as compile(ast.Expression(...)) would. If
 * the program installed an audit hook by then, compile_last answers that
 * ast.Expression instead, for the caller to compile().
 */
#include "internal/pycore_ast.h"
#include "internal/pycore_compile.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_parser.h"
#include "internal/pycore_pyarena.h"
#include "internal/pycore_pystate.h"
#include "internal/pycore_runtime.h"

/* Levels of nesting kept free beyond the source's length: the tree's own
 * (Module, statement, expression) and the frames of the compile() call. */
#define SPINE_COMPILE_SLACK 64

#define SPINE_PENDING "spine.pending_expression"

/*
 * A last expression set aside: its tree lives in the arena the program was
 * parsed into. bound is an upper bound on the tree's depth, checked again when
 * it is compiled (the program may have lowered the recursion limit). The
 * capsule is reachable from the program (the caller's frame), and compiling
 * folds the tree in place: so it is compiled at most once (code keeps the
 * answer) and never while it is being read (busy).
 */
typedef struct {
	PyArena *arena;
	mod_ty expression;
	PyObject *filename;
	PyCompilerFlags flags;
	Py_ssize_t bound;
	PyObject *code;
	int busy;
} pending_expression;

static void
pending_free(PyObject *capsule)
{
	pending_expression *p = PyCapsule_GetPointer(capsule, SPINE_PENDING);
	if (p == NULL) {
		PyErr_Clear();
		return;
	}
	_PyArena_Free(p->arena);
	Py_DECREF(p->filename);
	Py_XDECREF(p->code);
	PyMem_Free(p);
}

/* What compile(..., flags=0, dont_inherit=False) starts from in the calling frame. */
static PyCompilerFlags
compile_flags(void)
{
	PyCompilerFlags cf = _PyCompilerFlags_INIT;
	cf.cf_flags = PyCF_SOURCE_IS_UTF8;
	PyEval_MergeCompilerFlags(&cf);
	return cf;
}

/* Where each line of the program starts in its UTF-8 text, lines counted as the
 * tokenizer counts them ("\r\n", "\r" and "\n" each end one). */
typedef struct {
	Py_ssize_t size;
	Py_ssize_t *starts;
	Py_ssize_t lines;
} source_lines;

static int
lines_index(source_lines *l, const char *text, Py_ssize_t size)
{
	Py_ssize_t n = 1;
	for (Py_ssize_t i = 0; i < size; i++) {
		if (text[i] == '\n' || (text[i] == '\r' && (i + 1 == size || text[i + 1] != '\n'))) {
			n++;
		}
	}
	l->starts = PyMem_Malloc((size_t)n * sizeof *l->starts);
	if (l->starts == NULL) {
		return -1;
	}
	l->size = size;
	l->lines = n;
	l->starts[0] = 0;
	n = 1;
	for (Py_ssize_t i = 0; i < size; i++) {
		if (text[i] == '\n' || (text[i] == '\r' && (i + 1 == size || text[i + 1] != '\n'))) {
			l->starts[n++] = i + 1;
		}
	}
	return 0;
}

/* The byte offset of (lineno, col_offset); past the end for anything unexpected. */
static Py_ssize_t
lines_offset(source_lines *l, int lineno, int col)
{
	if (lineno < 1 || lineno > l->lines || col < 0) {
		return l->size;
	}
	Py_ssize_t at = l->starts[lineno - 1] + col;
	return at > l->size ? l->size : at;
}

/* The bytes from one position to another; the whole program when they are out of order. */
static Py_ssize_t
lines_span(source_lines *l, int line0, int col0, int line1, int col1)
{
	if (line0 >= 1 && (line0 > l->lines || col0 < 0)) {
		return l->size; /* a start it cannot place: the whole program */
	}
	Py_ssize_t from = line0 < 1 ? 0 : lines_offset(l, line0, col0), to = lines_offset(l, line1, col1);
	return to >= from ? to - from : l->size;
}

/*
 * depth_bound: an upper bound on the depth of the statements' trees, nested at
 * level. A statement's expressions lie in its own text (a compound statement's
 * in its header: from its first decorator or its start to its first body
 * statement), and each level of an expression takes at least one byte of it;
 * nodes that take none (arguments, keyword, withitem, comprehension) sit
 * between ones that do, hence twice the bytes, and a margin.
 */
static Py_ssize_t depth_bound(source_lines *l, asdl_stmt_seq *body, Py_ssize_t level);

static Py_ssize_t
header_bound(source_lines *l, int line, int col, asdl_stmt_seq *body, Py_ssize_t level)
{
	if (asdl_seq_LEN(body) == 0) {
		return level + 2 * l->size + 8;
	}
	stmt_ty first = asdl_seq_GET(body, 0);
	return level + 2 * lines_span(l, line, col, first->lineno, first->col_offset) + 8;
}

static Py_ssize_t
max_bound(Py_ssize_t a, Py_ssize_t b)
{
	return a > b ? a : b;
}

static Py_ssize_t
depth_bound(source_lines *l, asdl_stmt_seq *body, Py_ssize_t level)
{
	Py_ssize_t deepest = level;
	for (Py_ssize_t i = 0; i < asdl_seq_LEN(body); i++) {
		stmt_ty s = asdl_seq_GET(body, i);
		int line = s->lineno, col = s->col_offset;
		asdl_expr_seq *decorators = NULL;
		asdl_stmt_seq *inner = NULL, *orelse = NULL, *final = NULL;
		switch (s->kind) {
		case FunctionDef_kind:
			decorators = s->v.FunctionDef.decorator_list;
			inner = s->v.FunctionDef.body;
			break;
		case AsyncFunctionDef_kind:
			decorators = s->v.AsyncFunctionDef.decorator_list;
			inner = s->v.AsyncFunctionDef.body;
			break;
		case ClassDef_kind:
			decorators = s->v.ClassDef.decorator_list;
			inner = s->v.ClassDef.body;
			break;
		case For_kind:
			inner = s->v.For.body, orelse = s->v.For.orelse;
			break;
		case AsyncFor_kind:
			inner = s->v.AsyncFor.body, orelse = s->v.AsyncFor.orelse;
			break;
		case While_kind:
			inner = s->v.While.body, orelse = s->v.While.orelse;
			break;
		case If_kind:
			inner = s->v.If.body, orelse = s->v.If.orelse;
			break;
		case With_kind:
			inner = s->v.With.body;
			break;
		case AsyncWith_kind:
			inner = s->v.AsyncWith.body;
			break;
		case Try_kind:
		case TryStar_kind: {
			asdl_excepthandler_seq *handlers =
			    s->kind == Try_kind ? s->v.Try.handlers : s->v.TryStar.handlers;
			inner = s->kind == Try_kind ? s->v.Try.body : s->v.TryStar.body;
			orelse = s->kind == Try_kind ? s->v.Try.orelse : s->v.TryStar.orelse;
			final = s->kind == Try_kind ? s->v.Try.finalbody : s->v.TryStar.finalbody;
			for (Py_ssize_t j = 0; j < asdl_seq_LEN(handlers); j++) {
				excepthandler_ty h = asdl_seq_GET(handlers, j);
				asdl_stmt_seq *hb = h->v.ExceptHandler.body;
				deepest = max_bound(deepest, header_bound(l, h->lineno, h->col_offset, hb, level + 3));
				deepest = max_bound(deepest, depth_bound(l, hb, level + 4));
			}
			break;
		}
		case Match_kind: {
			asdl_match_case_seq *cases = s->v.Match.cases;
			if (asdl_seq_LEN(cases) == 0) {
				return level + 2 * l->size + 8;
			}
			match_case_ty c0 = asdl_seq_GET(cases, 0);
			Py_ssize_t head = lines_span(l, line, col, c0->pattern->lineno, c0->pattern->col_offset);
			deepest = max_bound(deepest, level + 2 * head + 8);
			for (Py_ssize_t j = 0; j < asdl_seq_LEN(cases); j++) {
				match_case_ty c = asdl_seq_GET(cases, j);
				deepest = max_bound(deepest, header_bound(l, c->pattern->lineno, c->pattern->col_offset,
				                                          c->body, level + 3));
				deepest = max_bound(deepest, depth_bound(l, c->body, level + 4));
			}
			continue;
		}
		default: /* a simple statement: its whole text */
			deepest = max_bound(deepest, level + 2 * lines_span(l, line, col, s->end_lineno, s->end_col_offset) + 8);
			continue;
		}
		for (Py_ssize_t j = 0; decorators != NULL && j < asdl_seq_LEN(decorators); j++) {
			expr_ty d = asdl_seq_GET(decorators, j);
			if (d->lineno < line || (d->lineno == line && d->col_offset < col)) {
				line = d->lineno, col = d->col_offset;
			}
		}
		deepest = max_bound(deepest, header_bound(l, line, col, inner, level + 1));
		deepest = max_bound(deepest, depth_bound(l, inner, level + 2));
		if (orelse != NULL) {
			deepest = max_bound(deepest, depth_bound(l, orelse, level + 2));
		}
		if (final != NULL) {
			deepest = max_bound(deepest, depth_bound(l, final, level + 2));
		}
	}
	return deepest;
}

static PyObject *
python_compile_program(PyObject *self, PyObject *args)
{
	PyObject *source, *filename;
	if (!PyArg_ParseTuple(args, "UO&:compile_program", &source, PyUnicode_FSDecoder, &filename)) {
		return NULL;
	}
	PyThreadState *tstate = _PyThreadState_GET();
	PyInterpreterState *interp = tstate->interp;
	Py_ssize_t size;
	if (interp->runtime->audit_hook_head != NULL || interp->audit_hooks != NULL ||
	    PyUnicode_AsUTF8AndSize(source, &size) == NULL) {
		PyErr_Clear();
		Py_DECREF(filename);
		Py_RETURN_NONE;
	}
	Py_ssize_t headroom = (Py_ssize_t)tstate->recursion_remaining - SPINE_COMPILE_SLACK;

	PyCompilerFlags base = compile_flags();
	PyCompilerFlags cf = base;
	cf.cf_flags |= PyCF_ONLY_AST;
	PyObject *source_copy = NULL;
	PyArena *arena = NULL;
	PyObject *code = NULL, *answer = NULL;
	pending_expression *pending = NULL;

	const char *text = _Py_SourceAsString(source, "compile", "string, bytes or AST", &cf, &source_copy);
	if (text == NULL) {
		goto done;
	}
	arena = _PyArena_New();
	if (arena == NULL) {
		goto done;
	}
	mod_ty mod = _PyParser_ASTFromString(text, filename, Py_file_input, &cf, arena);
	if (mod == NULL) {
		goto done;
	}
	asdl_stmt_seq *body = mod->v.Module.body;
	Py_ssize_t bound = size; /* no byte adds more than one level */
	if (size >= headroom) {
		source_lines lines;
		if (lines_index(&lines, text, (Py_ssize_t)strlen(text)) < 0) {
			PyErr_NoMemory();
			goto done;
		}
		Py_ssize_t deepest = depth_bound(&lines, body, 2);
		PyMem_Free(lines.starts);
		bound = deepest;
		if (deepest >= headroom) {
			answer = PyAST_mod2obj(mod); /* the Python path from here */
			goto done;
		}
	}
	Py_ssize_t n = asdl_seq_LEN(body);
	if (n > 0 && asdl_seq_GET(body, n - 1)->kind == Expr_kind) {
		pending = PyMem_Calloc(1, sizeof *pending);
		if (pending == NULL) {
			PyErr_NoMemory();
			goto done;
		}
		pending->expression = _PyAST_Expression(asdl_seq_GET(body, n - 1)->v.Expr.value, arena);
		if (pending->expression == NULL) {
			goto done;
		}
		body->size = n - 1;
	}
	cf = base;
	code = (PyObject *)_PyAST_Compile(mod, filename, &cf, -1, arena);
	if (code == NULL) {
		goto done;
	}
	PyObject *rest = Py_None;
	if (pending != NULL) {
		pending->arena = arena;
		pending->filename = filename;
		pending->flags = base;
		pending->bound = bound;
		rest = PyCapsule_New(pending, SPINE_PENDING, pending_free);
		if (rest == NULL) {
			pending->arena = NULL;
			pending->filename = NULL;
			goto done;
		}
		/* The capsule owns them now. */
		arena = NULL;
		filename = NULL;
		pending = NULL;
		answer = PyTuple_Pack(2, code, rest);
		Py_DECREF(rest);
	} else {
		answer = PyTuple_Pack(2, code, Py_None);
	}

done:
	Py_XDECREF(code);
	PyMem_Free(pending);
	if (arena != NULL) {
		_PyArena_Free(arena);
	}
	Py_XDECREF(filename);
	Py_XDECREF(source_copy);
	return answer;
}

static PyObject *
python_compile_last(PyObject *self, PyObject *capsule)
{
	pending_expression *p = PyCapsule_GetPointer(capsule, SPINE_PENDING);
	if (p == NULL) {
		return NULL;
	}
	if (p->code != NULL) {
		return Py_NewRef(p->code);
	}
	if (p->busy) {
		PyErr_SetString(PyExc_RuntimeError, "compile_last: already compiling this expression");
		return NULL;
	}
	PyThreadState *tstate = _PyThreadState_GET();
	PyInterpreterState *interp = tstate->interp;
	PyObject *answer;
	p->busy = 1;
	if (interp->runtime->audit_hook_head != NULL || interp->audit_hooks != NULL ||
	    p->bound >= (Py_ssize_t)tstate->recursion_remaining - SPINE_COMPILE_SLACK) {
		/* The program installed an audit hook, or lowered the recursion
		 * limit below what the tree may need: the caller compiles this
		 * ast.Expression, raising the events a hook must see and the
		 * RecursionError the Python path would. */
		answer = PyAST_mod2obj(p->expression);
	} else {
		PyCompilerFlags cf = p->flags;
		answer = (PyObject *)_PyAST_Compile(p->expression, p->filename, &cf, -1, p->arena);
		if (answer != NULL) {
			p->code = Py_NewRef(answer);
		}
	}
	p->busy = 0;
	return answer;
}

/* libhbfsim: the C ABI of hbfsim.h over runtime_cuda's session, through an embedded interpreter.
 *
 * Every entry point: check its C arguments, take the interpreter lock (PyGILState_Ensure), call
 * runtime_cuda.capi.call(name, args) -- which never raises: it returns (code, message, value) -- convert
 * the value, release the lock. The interpreter is started once, by the first call that needs it, with
 * the Python CMake found when it built this library (HBFSIM_PYTHON_EXECUTABLE: its venv and
 * site-packages are the ones that hold the hbfsim package), without signal handlers (the host program
 * keeps its own), and its lock is released at once so any thread may call. It is never finalized:
 * extension modules (grpc, numpy) cannot be unloaded safely, so it lives until the process ends.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbfsim.h"

#ifndef HBFSIM_PYTHON_EXECUTABLE
#define HBFSIM_PYTHON_EXECUTABLE ""
#endif
#ifndef HBFSIM_PACKAGE_VERSION
#define HBFSIM_PACKAGE_VERSION "unknown"
#endif

/* hbfsim_counters_get fills every field after the header as one run of uint64_t, in the bridge's order */
_Static_assert(offsetof(hbfsim_counters, generation) == 8 &&
                   sizeof(hbfsim_counters) == 8 + 8 * (1 + 7 * HBFSIM_N_OPS + 21),
               "hbfsim_counters: a header, then uint64_t fields only (runtime_cuda/capi SCALARS, OP_FIELDS)");

struct hbfsim_session {
    PyObject* py; /* runtime_cuda.session.Session */
};

static __thread int t_code;
static __thread char t_msg[2048];

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init_state;  /* 0 not tried, 1 ready, -1 failed (g_init_msg says why) */
static char g_init_msg[1024];
static PyObject* g_bridge; /* runtime_cuda.capi; owned, lives with the interpreter */

static int set_error(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_msg, sizeof t_msg, fmt, ap);
    va_end(ap);
    t_code = code;
    return code;
}

static int ok(void) {
    t_code = HBFSIM_OK;
    t_msg[0] = '\0';
    return HBFSIM_OK;
}

const char* hbfsim_last_error(void) { return t_msg; }
int hbfsim_last_error_code(void) { return t_code; }
int hbfsim_abi_version(void) { return HBFSIM_ABI_VERSION; }

const char* hbfsim_version(void) {
    static char v[128];
    if (!v[0]) snprintf(v, sizeof v, "hbfsim %s (C API ABI %d)", HBFSIM_PACKAGE_VERSION, HBFSIM_ABI_VERSION);
    return v;
}

/* The pending Python exception as text (type: message), cleared; never printed. */
static void fetch_exception(char* buf, size_t n) {
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    const char* tname = type ? ((PyTypeObject*)type)->tp_name : "error";
    PyObject* s = value ? PyObject_Str(value) : NULL;
    const char* text = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!text) PyErr_Clear();
    snprintf(buf, n, "%s: %s", tname, text ? text : "(no message)");
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Start the interpreter (when the host has none) and import the bridge. Under g_init_lock. */
static void init_python_locked(void) {
    int started_here = 0;
    if (!Py_IsInitialized()) {
        PyConfig cfg;
        PyConfig_InitPythonConfig(&cfg);
        cfg.install_signal_handlers = 0;
        cfg.parse_argv = 0;
        cfg.configure_c_stdio = 0;
        PyStatus st = PyStatus_Ok();
        if (HBFSIM_PYTHON_EXECUTABLE[0])
            st = PyConfig_SetBytesString(&cfg, &cfg.program_name, HBFSIM_PYTHON_EXECUTABLE);
        if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&cfg);
        PyConfig_Clear(&cfg);
        if (PyStatus_Exception(st)) {
            snprintf(g_init_msg, sizeof g_init_msg, "the embedded Python (%s) did not start: %s%s%s",
                     HBFSIM_PYTHON_EXECUTABLE[0] ? HBFSIM_PYTHON_EXECUTABLE : "default",
                     st.func ? st.func : "", st.func ? ": " : "", st.err_msg ? st.err_msg : "unknown error");
            g_init_state = -1;
            return;
        }
        started_here = 1;
    }
    PyGILState_STATE gs = PyGILState_Ensure();
    g_bridge = PyImport_ImportModule("runtime_cuda.capi");
    if (!g_bridge) {
        char why[768];
        fetch_exception(why, sizeof why);
        snprintf(g_init_msg, sizeof g_init_msg,
                 "the embedded Python (%s) cannot import runtime_cuda.capi (is hbfsim installed for it? build "
                 "with -DPython3_EXECUTABLE=<that python>): %s",
                 HBFSIM_PYTHON_EXECUTABLE[0] ? HBFSIM_PYTHON_EXECUTABLE : "default", why);
        g_init_state = -1;
    } else {
        PyObject* r = PyObject_CallMethod(g_bridge, "setup_logging", NULL);
        if (!r) PyErr_Clear();
        Py_XDECREF(r);
        g_init_state = 1;
    }
    PyGILState_Release(gs);
    if (started_here) PyEval_SaveThread(); /* the main thread no longer holds the lock: any thread may call */
}

static int ensure_python(void) {
    pthread_mutex_lock(&g_init_lock);
    if (g_init_state == 0) init_python_locked();
    int state = g_init_state;
    pthread_mutex_unlock(&g_init_lock);
    if (state < 0) return set_error(HBFSIM_E_PYTHON, "%s", g_init_msg);
    return HBFSIM_OK;
}

/* Call runtime_cuda.capi.call(name, args) with the lock held; `args` is stolen. Returns 0 and the value
 * (a new reference) in *value, or the error code with the thread's message set (*value: the error's
 * extra, maybe NULL). */
static int bridge(const char* name, PyObject* args, PyObject** value) {
    *value = NULL;
    if (!args) {
        char why[512];
        fetch_exception(why, sizeof why);
        return set_error(HBFSIM_E_INVALID_ARGUMENT, "%s: bad argument: %s", name, why);
    }
    PyObject* r = PyObject_CallMethod(g_bridge, "call", "sO", name, args);
    Py_DECREF(args);
    if (!r) {
        char why[768];
        fetch_exception(why, sizeof why);
        return set_error(HBFSIM_E_INTERNAL, "%s: %s", name, why);
    }
    long code = 0;
    const char* msg = NULL;
    PyObject* v = NULL;
    if (!PyArg_ParseTuple(r, "lsO", &code, &msg, &v)) {
        char why[512];
        fetch_exception(why, sizeof why);
        Py_DECREF(r);
        return set_error(HBFSIM_E_INTERNAL, "%s: bad bridge reply: %s", name, why);
    }
    Py_INCREF(v);
    *value = v;
    int c = (int)code;
    if (c != 0) set_error(c, "%s", msg);
    else ok();
    Py_DECREF(r);
    return c;
}

#define ENTER(s_required, s)                                                              \
    do {                                                                                  \
        if ((s_required) && !(s))                                                         \
            return set_error(HBFSIM_E_INVALID_ARGUMENT, "%s: session is NULL", __func__); \
        int rc_ = ensure_python();                                                        \
        if (rc_) return rc_;                                                              \
    } while (0)

int hbfsim_attach(const char* socket, unsigned flags, hbfsim_session** out) {
    if (!out) return set_error(HBFSIM_E_INVALID_ARGUMENT, "hbfsim_attach: out is NULL");
    *out = NULL;
    ENTER(0, NULL);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* sock = socket ? PyUnicode_FromString(socket) : (Py_INCREF(Py_None), Py_None);
    PyObject* v = NULL;
    int rc = sock ? bridge("attach", Py_BuildValue("(NI)", sock, flags), &v)
                  : bridge("attach", NULL, &v);
    if (rc == 0) {
        hbfsim_session* s = (hbfsim_session*)calloc(1, sizeof *s);
        if (!s) {
            PyObject* r = PyObject_CallMethod(g_bridge, "call", "s(O)", "detach", v);
            if (!r) PyErr_Clear();
            Py_XDECREF(r);
            Py_DECREF(v);
            rc = set_error(HBFSIM_E_INTERNAL, "hbfsim_attach: out of memory");
        } else {
            s->py = v; /* keeps the reference */
            v = NULL;
            *out = s;
        }
    }
    Py_XDECREF(v);
    PyGILState_Release(gs);
    return rc;
}

int hbfsim_register_timing_range(hbfsim_session* s, const void* ptr, size_t bytes, unsigned perms,
                                 const char* label, hbfsim_range_id* out) {
    if (!out) return set_error(HBFSIM_E_INVALID_ARGUMENT, "hbfsim_register_timing_range: out is NULL");
    ENTER(1, s);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* v = NULL;
    int rc = bridge("register_timing_range",
                    Py_BuildValue("(OKKIs)", s->py, (unsigned long long)(uintptr_t)ptr, (unsigned long long)bytes,
                                  perms, label ? label : ""),
                    &v);
    if (rc == 0) {
        unsigned long long id = 0, media = 0;
        if (!PyArg_ParseTuple(v, "KK", &id, &media)) {
            PyErr_Clear();
            rc = set_error(HBFSIM_E_INTERNAL, "hbfsim_register_timing_range: bad bridge value");
        } else {
            *out = (hbfsim_range_id)id;
        }
    }
    Py_XDECREF(v);
    PyGILState_Release(gs);
    return rc;
}

int hbfsim_unregister_range(hbfsim_session* s, hbfsim_range_id id) {
    ENTER(1, s);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* v = NULL;
    int rc = bridge("unregister", Py_BuildValue("(OK)", s->py, (unsigned long long)id), &v);
    Py_XDECREF(v);
    PyGILState_Release(gs);
    return rc;
}

int hbfsim_bind_all_with(hbfsim_session* s, const char* artifacts, hbfsim_get_func_fn get_func_by_symbol,
                         hbfsim_bind_report* report) {
    ENTER(1, s);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* arts = artifacts ? PyUnicode_FromString(artifacts) : (Py_INCREF(Py_None), Py_None);
    PyObject* v = NULL;
    int rc = arts ? bridge("bind_all", Py_BuildValue("(ONK)", s->py, arts,
                                                     (unsigned long long)(uintptr_t)get_func_by_symbol), &v)
                  : bridge("bind_all", NULL, &v);
    if (rc == 0 && report) {
        unsigned int m = 0, k = 0, a = 0, n = 0;
        if (!PyArg_ParseTuple(v, "IIII", &m, &k, &a, &n)) {
            PyErr_Clear();
            rc = set_error(HBFSIM_E_INTERNAL, "hbfsim_bind_all: bad bridge value");
        } else {
            report->modules = m;
            report->kernels = k;
            report->admitted = a;
            report->not_admitted = n;
        }
    }
    Py_XDECREF(v);
    PyGILState_Release(gs);
    return rc;
}

int hbfsim_counters_get(hbfsim_session* s, hbfsim_counters* out) {
    if (!out) return set_error(HBFSIM_E_INVALID_ARGUMENT, "hbfsim_counters_get: out is NULL");
    if (out->struct_size < offsetof(hbfsim_counters, generation))
        return set_error(HBFSIM_E_INVALID_ARGUMENT,
                         "hbfsim_counters_get: set struct_size to sizeof(hbfsim_counters) (got %u)",
                         (unsigned)out->struct_size);
    ENTER(1, s);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* v = NULL;
    int rc = bridge("counters", Py_BuildValue("(O)", s->py), &v);
    if (rc == 0) {
        hbfsim_counters c;
        memset(&c, 0, sizeof c);
        c.struct_size = sizeof c;
        c.version = HBFSIM_COUNTERS_VERSION;
        uint64_t* dst = &c.generation; /* every field after the header is a uint64_t, in the bridge's order */
        size_t n = (sizeof c - offsetof(hbfsim_counters, generation)) / sizeof(uint64_t);
        if (!PyTuple_Check(v) || (size_t)PyTuple_GET_SIZE(v) != n) {
            rc = set_error(HBFSIM_E_ABI_MISMATCH, "hbfsim_counters_get: the Python side returned %zd counters, "
                           "this library has %zu (rebuild libhbfsim against the installed hbfsim)",
                           PyTuple_Check(v) ? PyTuple_GET_SIZE(v) : (Py_ssize_t)-1, n);
        } else {
            for (size_t i = 0; i < n; i++) dst[i] = (uint64_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(v, i));
            if (PyErr_Occurred()) {
                PyErr_Clear();
                rc = set_error(HBFSIM_E_INTERNAL, "hbfsim_counters_get: a counter is not an unsigned integer");
            } else {
                uint32_t size = out->struct_size < sizeof c ? out->struct_size : (uint32_t)sizeof c;
                memcpy(out, &c, size);
                out->struct_size = size;
            }
        }
    }
    Py_XDECREF(v);
    PyGILState_Release(gs);
    return rc;
}

int hbfsim_synchronize(hbfsim_session* s, hbfsim_failure* failure) {
    if (failure) memset(failure, 0, sizeof *failure);
    ENTER(1, s);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* v = NULL;
    int rc = bridge("synchronize", Py_BuildValue("(O)", s->py), &v);
    if (rc != 0 && failure && v && PyTuple_Check(v)) {
        unsigned int status = 0, site = 0;
        const char* name = NULL;
        if (PyArg_ParseTuple(v, "IIs", &status, &site, &name)) {
            failure->status = status;
            failure->site = site;
            failure->kernel_index = site >> 16;
            failure->site_index = site & 0xFFFFu;
            snprintf(failure->status_name, sizeof failure->status_name, "%s", name);
        } else {
            PyErr_Clear();
        }
    }
    Py_XDECREF(v);
    PyGILState_Release(gs);
    return rc;
}

int hbfsim_write_summary(hbfsim_session* s, const char* path) {
    if (!path) return set_error(HBFSIM_E_INVALID_ARGUMENT, "hbfsim_write_summary: path is NULL");
    ENTER(1, s);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* v = NULL;
    int rc = bridge("write_summary", Py_BuildValue("(Os)", s->py, path), &v);
    Py_XDECREF(v);
    PyGILState_Release(gs);
    return rc;
}

int hbfsim_detach(hbfsim_session* s) {
    if (!s) return ok();
    ENTER(1, s);
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject* v = NULL;
    int rc = bridge("detach", Py_BuildValue("(O)", s->py), &v);
    Py_XDECREF(v);
    Py_DECREF(s->py);
    PyGILState_Release(gs);
    free(s);
    return rc;
}

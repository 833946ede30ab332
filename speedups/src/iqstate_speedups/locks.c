/*
 * A mutual-exclusion lock whose uncontended acquire and release cost a C call each.
 *
 * `Lock` behaves as `threading.Lock` does: `acquire(blocking=True, timeout=-1)`,
 * `release()`, `locked()` and the context manager, not reentrant, released by any thread.
 * On CPython 3.11 `threading.Lock().acquire()` parses its arguments with
 * `PyArg_ParseTupleAndKeywords` on every call, and an acquire and release cost about four
 * times two plain C calls; every query and every batch of a partition takes its lock, and
 * an LMDB key read the reused read transaction's. Here a call without arguments goes
 * straight to a non-blocking attempt.
 *
 * A blocking acquire that must wait releases the GIL and waits interruptibly: a signal
 * runs its Python handler, whose exception ends the wait (as Ctrl-C does for
 * `threading.Lock`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stddef.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    char locked;
    PyObject *weakrefs;
} Lock;

static PyTypeObject LockType;

/* Whether the lock was taken within `timeout` seconds (negative: no limit; zero: one
 * attempt); -1 with an exception when a signal handler raised while waiting. */
static int
acquire_timed(Lock *self, double timeout)
{
    if (PyThread_acquire_lock_timed(self->lock, 0, 0) == PY_LOCK_ACQUIRED) {
        return 1;
    }
    if (timeout == 0) {
        return 0;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double deadline = now.tv_sec + now.tv_nsec * 1e-9 + timeout;
    for (;;) {
        PY_TIMEOUT_T microseconds = -1;
        if (timeout > 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            double left = deadline - (now.tv_sec + now.tv_nsec * 1e-9);
            if (left <= 0) {
                return 0;
            }
            microseconds = (PY_TIMEOUT_T)(left * 1e6);
        }
        PyLockStatus status;
        Py_BEGIN_ALLOW_THREADS
        status = PyThread_acquire_lock_timed(self->lock, microseconds, 1);
        Py_END_ALLOW_THREADS
        if (status == PY_LOCK_ACQUIRED) {
            return 1;
        }
        if (status == PY_LOCK_FAILURE) {
            return 0;
        }
        /* PY_LOCK_INTR: a signal arrived; its handler may raise. */
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
    }
}

/* `timeout` and `blocking` as `threading.Lock.acquire` takes them, as a number of seconds
 * to wait (negative: no limit); -2 with an exception when they are refused. */
static double
wait_of(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *blocking = NULL, *timeout = NULL;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "acquire takes at most 2 arguments (%zd given)", nargs);
        return -2;
    }
    if (nargs > 0) {
        blocking = args[0];
    }
    if (nargs > 1) {
        timeout = args[1];
    }
    Py_ssize_t keywords = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < keywords; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        PyObject **into;
        if (PyUnicode_CompareWithASCIIString(name, "blocking") == 0) {
            into = &blocking;
        }
        else if (PyUnicode_CompareWithASCIIString(name, "timeout") == 0) {
            into = &timeout;
        }
        else {
            PyErr_Format(PyExc_TypeError, "acquire got an unexpected keyword argument %R", name);
            return -2;
        }
        if (*into != NULL) {
            PyErr_Format(PyExc_TypeError, "acquire got multiple values for argument %R", name);
            return -2;
        }
        *into = args[nargs + i];
    }
    int blocks = 1;
    if (blocking != NULL && (blocks = PyObject_IsTrue(blocking)) < 0) {
        return -2;
    }
    double seconds = -1;
    if (timeout != NULL) {
        seconds = PyFloat_AsDouble(timeout);
        if (seconds == -1 && PyErr_Occurred()) {
            return -2;
        }
    }
    if (!blocks && seconds != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return -2;
    }
    if (seconds < 0 && seconds != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return -2;
    }
    if (seconds > (double)PY_TIMEOUT_MAX / 1e6) {
        PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
        return -2;
    }
    return blocks ? seconds : 0;
}

static PyObject *
lock_acquire(Lock *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    double timeout = -1;
    if (nargs != 0 || kwnames != NULL) {
        timeout = wait_of(args, nargs, kwnames);
        if (timeout == -2) {
            return NULL;
        }
    }
    int taken = acquire_timed(self, timeout);
    if (taken < 0) {
        return NULL;
    }
    if (taken) {
        self->locked = 1;
    }
    return PyBool_FromLong(taken);
}

static PyObject *
lock_enter(Lock *self, PyObject *unused)
{
    (void)unused;
    int taken = acquire_timed(self, -1);
    if (taken < 0) {
        return NULL;
    }
    self->locked = 1;
    Py_RETURN_TRUE;
}

static PyObject *
lock_release(Lock *self, PyObject *unused)
{
    (void)unused;
    if (!self->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    self->locked = 0;
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *
lock_exit(Lock *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    return lock_release(self, NULL);
}

static PyObject *
lock_locked(Lock *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(self->locked);
}

static PyObject *
lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Lock takes no arguments");
        return NULL;
    }
    Lock *self = (Lock *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void
lock_dealloc(Lock *self)
{
    if (self->weakrefs != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    if (self->lock != NULL) {
        if (self->locked) {
            PyThread_release_lock(self->lock); /* freeing a held lock is undefined */
        }
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
lock_repr(Lock *self)
{
    return PyUnicode_FromFormat("<%s %s object at %p>", self->locked ? "locked" : "unlocked",
                                Py_TYPE(self)->tp_name, self);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> whether the lock was taken."},
    {"release", (PyCFunction)lock_release, METH_NOARGS,
     "Release the lock (any thread may); RuntimeError when it is not held."},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, "Whether the lock is held."},
    {"__enter__", (PyCFunction)lock_enter, METH_NOARGS, "Acquire the lock, waiting for it."},
    {"__exit__", (PyCFunction)(void (*)(void))lock_exit, METH_FASTCALL, "Release the lock."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "iqstate_speedups.locks.Lock",
    .tp_basicsize = sizeof(Lock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = lock_new,
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_repr = (reprfunc)lock_repr,
    .tp_methods = lock_methods,
    .tp_weaklistoffset = offsetof(Lock, weakrefs),
    .tp_doc = "A mutual-exclusion lock with threading.Lock's interface and cheaper calls.",
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "iqstate_speedups.locks",
    .m_doc = "A lock whose uncontended acquire and release cost a C call each.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit_locks(void)
{
    if (PyType_Ready(&LockType) < 0) {
        return NULL;
    }
    PyObject *made = PyModule_Create(&module);
    if (made == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(made, "Lock", (PyObject *)&LockType) < 0) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}

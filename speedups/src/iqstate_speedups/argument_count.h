/* The check of a METH_FASTCALL function's argument count (shared by the extensions of
 * iqstate-speedups). */
#ifndef IQSTATE_ARGUMENT_COUNT_H
#define IQSTATE_ARGUMENT_COUNT_H

#include <Python.h>

/* 0 when `nargs` is `expected`; otherwise -1 with a TypeError naming `name`. */
static inline int
check_count(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, expected,
                     nargs);
        return -1;
    }
    return 0;
}

#endif

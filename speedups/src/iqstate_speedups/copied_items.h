/* A list's items held in memory the garbage collector does not track (shared by the
 * extensions of iqstate-speedups). */
#ifndef IQSTATE_COPIED_ITEMS_H
#define IQSTATE_COPIED_ITEMS_H

#include <Python.h>

/* The items of `list`, each with a new reference, in memory the garbage collector does
 * not track: allocating it cannot start a collection, whose finalizers could change the
 * list while it is copied (PyList_GetSlice allocates a list first, so it can). Release
 * with release_items. */
static inline PyObject **
copy_items(PyObject *list, Py_ssize_t *count)
{
    Py_ssize_t size = PyList_GET_SIZE(list);
    PyObject **items = PyMem_New(PyObject *, size ? size : 1);
    if (items == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        items[i] = Py_NewRef(PyList_GET_ITEM(list, i));
    }
    *count = size;
    return items;
}

static inline void
release_items(PyObject **items, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_DECREF(items[i]);
    }
    PyMem_Free(items);
}

#endif

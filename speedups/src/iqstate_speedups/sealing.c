/*
 * iqstate.sealing's checksums, one C call for a record or a whole scan.
 *
 * A sealed value is the value followed by the CRC-32 of key and value (4 bytes,
 * little-endian); the CRC-32 of key, value and tag together is then SEAL_RESIDUE. These do
 * exactly what iqstate.sealing's Python functions do, with zlib's CRC-32 (crc32.c: the
 * CPU's carry-less multiply where it has one, zlib's crc32 otherwise), without a Python
 * call, a joined copy or a slice per record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "argument_count.h"
#include "byte_order.h"
#include "copied_items.h"
#include "crc32.h"
#include "seal.h"

/* The bytes of a bytes-like object: bytes (subclasses too) read in place, anything else
 * through the buffer protocol, as zlib.crc32 and bytes concatenation take them. */
typedef struct {
    const char *data;
    Py_ssize_t size;
    Py_buffer buffer;
    int buffered;
} View;

static int
view_of(PyObject *object, const char *what, View *view)
{
    view->buffered = 0;
    if (PyBytes_Check(object)) {
        view->data = PyBytes_AS_STRING(object);
        view->size = PyBytes_GET_SIZE(object);
        return 0;
    }
    if (!PyObject_CheckBuffer(object) ||
        PyObject_GetBuffer(object, &view->buffer, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be bytes-like, not %.100s", what,
                     Py_TYPE(object)->tp_name);
        return -1;
    }
    view->buffered = 1;
    view->data = view->buffer.buf;
    view->size = view->buffer.len;
    return 0;
}

static void
release_view(View *view)
{
    if (view->buffered) {
        PyBuffer_Release(&view->buffer);
        view->buffered = 0;
    }
}

/* Both views, or an error naming the one that is not bytes-like. */
static int
views_of(PyObject *key, PyObject *second, const char *what, View *key_view, View *view)
{
    if (view_of(key, "key", key_view) < 0) {
        return -1;
    }
    if (view_of(second, what, view) < 0) {
        release_view(key_view);
        return -1;
    }
    return 0;
}

static int
intact(const char *key, Py_ssize_t key_size, const char *stored, Py_ssize_t stored_size)
{
    return seal_intact(key, (size_t)key_size, stored, (size_t)stored_size);
}

/* Whether `pair` is a record as a scan reads it: a `(key, stored)` tuple of bytes. */
static int
is_record(PyObject *pair)
{
    return PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2 &&
           PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) && PyBytes_Check(PyTuple_GET_ITEM(pair, 1));
}

/* Whether the record `pair` (see is_record) passes its checksum. */
static int
record_intact(PyObject *pair)
{
    PyObject *key = PyTuple_GET_ITEM(pair, 0), *stored = PyTuple_GET_ITEM(pair, 1);
    return intact(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), PyBytes_AS_STRING(stored),
                  PyBytes_GET_SIZE(stored));
}

/* A new `(key, value)` tuple for the intact record `pair`: its value without the tag. */
static PyObject *
unsealed_copy(PyObject *pair)
{
    PyObject *key = PyTuple_GET_ITEM(pair, 0), *stored = PyTuple_GET_ITEM(pair, 1);
    PyObject *value =
        PyBytes_FromStringAndSize(PyBytes_AS_STRING(stored), PyBytes_GET_SIZE(stored) - SEAL_TAG);
    PyObject *entry = value == NULL ? NULL : PyTuple_Pack(2, key, value);
    Py_XDECREF(value);
    return entry;
}

/* `key`'s and `value`'s views: the value followed by their CRC-32, little-endian. */
static PyObject *
seal_views(const View *key, const View *value)
{
    PyObject *sealed = PyBytes_FromStringAndSize(NULL, value->size + SEAL_TAG);
    if (sealed == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(sealed);
    memcpy(out, value->data, (size_t)value->size);
    unsigned long crc = seal_crc(key->data, (size_t)key->size, out, (size_t)value->size);
    for (int i = 0; i < SEAL_TAG; i++) {
        out[value->size + i] = (char)((crc >> (8 * i)) & 0xff);
    }
    return sealed;
}

static PyObject *
seal_value(PyObject *key, PyObject *value)
{
    View key_view, value_view;
    if (views_of(key, value, "value", &key_view, &value_view) < 0) {
        return NULL;
    }
    PyObject *sealed = seal_views(&key_view, &value_view);
    release_view(&value_view);
    release_view(&key_view);
    return sealed;
}

PyDoc_STRVAR(seal_doc,
"seal(key, value, /)\n--\n\n"
"`value` as stored: followed by the CRC-32 of `key` and `value`, little-endian.");

static PyObject *
seal(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_count("seal", nargs, 2) < 0) {
        return NULL;
    }
    return seal_value(args[0], args[1]);
}

PyDoc_STRVAR(seal_pairs_doc,
"seal_pairs(pairs, /)\n--\n\n"
"`(key, seal(key, value))` for each `(key, value)` of an iterable, a `None` value\n"
"(a delete) left as it is.");

static PyObject *
seal_pairs(PyObject *module, PyObject *pairs)
{
    PyObject *iterator = PyObject_GetIter(pairs);
    if (iterator == NULL) {
        return NULL;
    }
    PyObject *sealed = PyList_New(0);
    PyObject *pair;
    while (sealed != NULL && (pair = PyIter_Next(iterator)) != NULL) {
        PyObject *entry = NULL;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "seal_pairs takes (key, value) tuples");
        }
        else {
            PyObject *key = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
            if (value == Py_None) {
                entry = Py_NewRef(pair); /* a delete: the key is the caller's to check */
            }
            else {
                PyObject *stored = seal_value(key, value);
                if (stored != NULL) {
                    entry = PyTuple_Pack(2, key, stored);
                    Py_DECREF(stored);
                }
            }
        }
        Py_DECREF(pair);
        if (entry == NULL || PyList_Append(sealed, entry) < 0) {
            Py_XDECREF(entry);
            Py_CLEAR(sealed);
            break;
        }
        Py_DECREF(entry);
    }
    Py_DECREF(iterator);
    if (sealed != NULL && PyErr_Occurred()) {
        Py_CLEAR(sealed);
    }
    return sealed;
}

PyDoc_STRVAR(unseal_doc,
"unseal(key, stored, /)\n--\n\n"
"The value sealed in `stored` under `key`, or None when the checksum does not match.");

static PyObject *
unseal(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    View key, stored;
    if (check_count("unseal", nargs, 2) < 0 || views_of(args[0], args[1], "stored", &key, &stored) < 0) {
        return NULL;
    }
    PyObject *value = intact(key.data, key.size, stored.data, stored.size)
                          ? PyBytes_FromStringAndSize(stored.data, stored.size - SEAL_TAG)
                          : Py_NewRef(Py_None);
    release_view(&stored);
    release_view(&key);
    return value;
}

PyDoc_STRVAR(unseal_all_doc,
"unseal_all(pairs, /)\n--\n\n"
"`(key, value)` for each `(key, stored)` of a list, or None when any record's checksum\n"
"does not match (then check them one by one to name it).");

static PyObject *
unseal_all(PyObject *module, PyObject *pairs)
{
    if (!PyList_CheckExact(pairs)) {
        PyErr_Format(PyExc_TypeError, "unseal_all takes a list, not %.100s",
                     Py_TYPE(pairs)->tp_name);
        return NULL;
    }
    /* Every pair held in a copy: building the result allocates objects the garbage
     * collector tracks, and a collection runs finalizers, which could change the caller's
     * list. The pairs themselves are tuples of bytes and cannot change. */
    Py_ssize_t count;
    PyObject **items = copy_items(pairs, &count);
    if (items == NULL) {
        return NULL;
    }
    PyObject *values = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!is_record(items[i])) {
            PyErr_SetString(PyExc_TypeError, "unseal_all takes (key, stored) tuples of bytes");
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!record_intact(items[i])) {
            values = Py_NewRef(Py_None);
            goto done;
        }
    }
    values = PyList_New(count);
    for (Py_ssize_t i = 0; values != NULL && i < count; i++) {
        PyObject *entry = unsealed_copy(items[i]);
        if (entry == NULL) {
            Py_CLEAR(values);
            break;
        }
        PyList_SET_ITEM(values, i, entry);
    }
done:
    release_items(items, count);
    return values;
}

/* `key` against `bound`, as bytes compare: negative, zero or positive. */
static int
compare_keys(PyObject *key, const View *bound)
{
    return byte_order(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), bound->data, bound->size);
}

/* The record `pair` (a reference the caller gives up) unsealed, as a new reference:
 * `(key, value)`; NULL with `*damaged` set when its checksum fails, or with an exception.
 * A record nobody else holds (as an engine's iterator yields it) is reused: its value is
 * shortened in place, no new tuple or bytes made. */
static PyObject *
unseal_record(PyObject *pair, int *damaged)
{
    if (!record_intact(pair)) {
        *damaged = 1;
        Py_DECREF(pair);
        return NULL;
    }
    PyObject *stored = PyTuple_GET_ITEM(pair, 1);
    if (Py_REFCNT(pair) == 1 && Py_REFCNT(stored) == 1 && PyBytes_CheckExact(stored)) {
        PyTuple_SET_ITEM(pair, 1, NULL); /* the tuple's reference is now this one */
        if (_PyBytes_Resize(&stored, PyBytes_GET_SIZE(stored) - SEAL_TAG) < 0) {
            Py_DECREF(pair); /* _PyBytes_Resize freed the value */
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 1, stored);
        return pair;
    }
    PyObject *entry = unsealed_copy(pair);
    Py_DECREF(pair);
    return entry;
}

/* The records of `records`, unsealed, while their keys are on the near side of `bound`
 * (every record when it is None): below it when ascending, above it when descending, or
 * equal when `inclusive`. None when a record's checksum fails. */
static PyObject *
unseal_while(PyObject *records, PyObject *bound, int inclusive, int descending)
{
    View bound_view = {0};
    int bounded = bound != Py_None;
    if (bounded && view_of(bound, "bound", &bound_view) < 0) {
        return NULL;
    }
    PyObject *iterator = PyObject_GetIter(records);
    PyObject *values = iterator == NULL ? NULL : PyList_New(0);
    PyObject *pair;
    while (values != NULL && (pair = PyIter_Next(iterator)) != NULL) {
        if (!is_record(pair)) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_TypeError, "records must be (key, stored) tuples of bytes");
            Py_CLEAR(values);
            break;
        }
        if (bounded) {
            int order = compare_keys(PyTuple_GET_ITEM(pair, 0), &bound_view);
            int beyond = descending ? order < 0 : order > 0;
            if (beyond || (order == 0 && !inclusive)) {
                Py_DECREF(pair);
                break;
            }
        }
        int damaged = 0;
        PyObject *entry = unseal_record(pair, &damaged);
        if (entry == NULL) {
            Py_SETREF(values, damaged ? Py_NewRef(Py_None) : NULL);
            break;
        }
        int appended = PyList_Append(values, entry);
        Py_DECREF(entry);
        if (appended < 0) {
            Py_CLEAR(values);
        }
    }
    if (values != NULL && values != Py_None && PyErr_Occurred()) {
        Py_CLEAR(values); /* the iterator raised */
    }
    Py_XDECREF(iterator);
    release_view(&bound_view);
    return values;
}

PyDoc_STRVAR(unseal_below_doc,
"unseal_below(records, upper, inclusive, /)\n--\n\n"
"`(key, value)` for each `(key, stored)` of the ascending iterable `records` up to\n"
"`upper` (to the end when None), or None when a record's checksum does not match.");

static PyObject *
unseal_below(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_count("unseal_below", nargs, 3) < 0) {
        return NULL;
    }
    int inclusive = PyObject_IsTrue(args[2]);
    return inclusive < 0 ? NULL : unseal_while(args[0], args[1], inclusive, 0);
}

PyDoc_STRVAR(unseal_at_least_doc,
"unseal_at_least(records, lower, /)\n--\n\n"
"`(key, value)` for each `(key, stored)` of the descending iterable `records` down to\n"
"`lower`, inclusive (to the end when None), or None when a record's checksum does not\n"
"match.");

static PyObject *
unseal_at_least(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_count("unseal_at_least", nargs, 2) < 0) {
        return NULL;
    }
    return unseal_while(args[0], args[1], 1, 1);
}

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0, /)\n--\n\n"
"zlib.crc32(data, value), computed as the seals compute it (with the CPU's carry-less\n"
"multiply where `IMPLEMENTATION` is \"pclmul\" or \"vpclmul\").");

static PyObject *
crc32_of_data(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned long value = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "crc32 takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (nargs == 2) {
        value = PyLong_AsUnsignedLongMask(args[1]);
        if (value == (unsigned long)-1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    View data;
    if (view_of(args[0], "data", &data) < 0) {
        return NULL;
    }
    unsigned long crc =
        crc32_update(value & 0xffffffffUL, (const unsigned char *)data.data, (size_t)data.size);
    release_view(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL, seal_doc},
    {"seal_pairs", seal_pairs, METH_O, seal_pairs_doc},
    {"unseal", (PyCFunction)(void (*)(void))unseal, METH_FASTCALL, unseal_doc},
    {"unseal_all", unseal_all, METH_O, unseal_all_doc},
    {"unseal_below", (PyCFunction)(void (*)(void))unseal_below, METH_FASTCALL, unseal_below_doc},
    {"unseal_at_least", (PyCFunction)(void (*)(void))unseal_at_least, METH_FASTCALL,
     unseal_at_least_doc},
    {"crc32", (PyCFunction)(void (*)(void))crc32_of_data, METH_FASTCALL, crc32_doc},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    crc32_choose();
    return PyModule_AddStringConstant(module, "IMPLEMENTATION", crc32_implementation());
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "iqstate_speedups.sealing",
    .m_doc = "iqstate.sealing's checksums, one C call for a record or a whole scan.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit_sealing(void)
{
    return PyModuleDef_Init(&module);
}

/*
 * iqstate.layers.metered's decoding of a range's string pairs, one C call per range.
 *
 * decode_utf8_pairs(pairs) gives [(key.decode(), value.decode()) for key, value in pairs]:
 * the same strings, without a Python call, a tuple unpacking and a method lookup per pair.
 * Anything but a list of 2-tuples of bytes is a TypeError, bytes that are not UTF-8 a
 * UnicodeDecodeError: the caller then decodes pair by pair, which names the failing pair.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *
decoded(PyObject *item)
{
    if (!PyBytes_Check(item)) {
        PyErr_Format(PyExc_TypeError, "a pair holds bytes, not %.100s", Py_TYPE(item)->tp_name);
        return NULL;
    }
    return PyUnicode_DecodeUTF8(PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item), NULL);
}

static PyObject *
decoded_pair(PyObject *pair)
{
    if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_Format(PyExc_TypeError, "pairs must be 2-tuples, not %.100s",
                     Py_TYPE(pair)->tp_name);
        return NULL;
    }
    PyObject *key = decoded(PyTuple_GET_ITEM(pair, 0));
    if (key == NULL) {
        return NULL;
    }
    PyObject *value = decoded(PyTuple_GET_ITEM(pair, 1));
    if (value == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *out = PyTuple_New(2);
    if (out == NULL) {
        Py_DECREF(key);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, key);
    PyTuple_SET_ITEM(out, 1, value);
    return out;
}

static PyObject *
decode_utf8_pairs(PyObject *module, PyObject *pairs)
{
    (void)module;
    if (!PyList_CheckExact(pairs)) {
        PyErr_Format(PyExc_TypeError, "decode_utf8_pairs takes a list, not %.100s",
                     Py_TYPE(pairs)->tp_name);
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(pairs);
    PyObject *out = PyList_New(count);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        /* A collection during an allocation may run finalizers, which could empty the
         * list (an iterator closed): each pair is held while decoded, the size rechecked. */
        if (i >= PyList_GET_SIZE(pairs)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_RuntimeError, "the pairs changed while decoded");
            return NULL;
        }
        PyObject *item = PyList_GET_ITEM(pairs, i);
        Py_INCREF(item);
        PyObject *pair = decoded_pair(item);
        Py_DECREF(item);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"decode_utf8_pairs", decode_utf8_pairs, METH_O,
     "decode_utf8_pairs(pairs)\n--\n\n"
     "[(key.decode(), value.decode()) for key, value in pairs], for a list of pairs of bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "iqstate_speedups.pairs",
    .m_doc = "Decoding a range's string pairs in one C call.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit_pairs(void)
{
    return PyModuleDef_Init(&module);
}

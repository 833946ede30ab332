/*
 * The standard library's compact JSON, written in one pass.
 *
 * `encode(value)` returns the UTF-8 bytes `json.JSONEncoder(ensure_ascii=False,
 * separators=(",", ":"), allow_nan=False).encode(value)` gives, or None when the value
 * holds anything but exact dicts with str keys, lists, tuples, str, int, float, True,
 * False and None (or NaN, an infinity, a lone surrogate, nesting deeper than
 * MAX_DEPTH): the caller then asks the standard library, which gives its bytes or its
 * error. The bytes are the standard library's by construction: floats through
 * PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0), which is float.__repr__, ints
 * through their decimal digits (int.__repr__ beyond 64 bits), strings escaped exactly
 * as _json.c's escape_unicode does. No user code runs while a value is written: only
 * exact built-in types are read, and nothing is allocated that could start a garbage
 * collection (whose finalizers could change a container) except on the way out of a
 * declined value, after which that value is not touched again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "copied_items.h"

#define MAX_DEPTH 64
#define UNSUPPORTED 1 /* not written here: the standard library decides */

typedef struct {
    char *data;
    Py_ssize_t length;
    Py_ssize_t capacity;
} Buffer;

static int
buffer_reserve(Buffer *buffer, Py_ssize_t more)
{
    Py_ssize_t needed = buffer->length + more;
    if (needed <= buffer->capacity) {
        return 0;
    }
    Py_ssize_t capacity = buffer->capacity ? buffer->capacity : 256;
    while (capacity < needed) {
        capacity *= 2;
    }
    char *data = PyMem_Realloc(buffer->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    buffer->data = data;
    buffer->capacity = capacity;
    return 0;
}

static int
buffer_write(Buffer *buffer, const char *text, Py_ssize_t length)
{
    if (buffer_reserve(buffer, length) < 0) {
        return -1;
    }
    memcpy(buffer->data + buffer->length, text, (size_t)length);
    buffer->length += length;
    return 0;
}

static const char HEX[] = "0123456789abcdef";

/* A character below 0x20, '"' or '\\' as _json.c's escape_unicode escapes it. */
static char *
write_escaped(char *out, Py_UCS4 c)
{
    *out++ = '\\';
    switch (c) {
    case '"': *out++ = '"'; break;
    case '\\': *out++ = '\\'; break;
    case '\b': *out++ = 'b'; break;
    case '\f': *out++ = 'f'; break;
    case '\n': *out++ = 'n'; break;
    case '\r': *out++ = 'r'; break;
    case '\t': *out++ = 't'; break;
    default:
        *out++ = 'u';
        *out++ = '0';
        *out++ = '0';
        *out++ = HEX[(c >> 4) & 0xf];
        *out++ = HEX[c & 0xf];
    }
    return out;
}

#define NEEDS_ESCAPE(c) ((c) < 0x20 || (c) == '"' || (c) == '\\')

/* One code point of a non-ASCII string as UTF-8 (escaped below 0x80); NULL for a lone
 * surrogate. */
static inline char *
write_code_point(char *out, Py_UCS4 c)
{
    if (c < 0x80) {
        if (NEEDS_ESCAPE(c)) {
            return write_escaped(out, c);
        }
        *out++ = (char)c;
    }
    else if (c < 0x800) {
        *out++ = (char)(0xc0 | (c >> 6));
        *out++ = (char)(0x80 | (c & 0x3f));
    }
    else if (c < 0x10000) {
        if (c >= 0xd800 && c <= 0xdfff) {
            return NULL;
        }
        *out++ = (char)(0xe0 | (c >> 12));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *out++ = (char)(0x80 | (c & 0x3f));
    }
    else {
        *out++ = (char)(0xf0 | (c >> 18));
        *out++ = (char)(0x80 | ((c >> 12) & 0x3f));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *out++ = (char)(0x80 | (c & 0x3f));
    }
    return out;
}

#define WRITE_CODE_POINTS(TYPE)                                   \
    for (Py_ssize_t i = 0; i < length; i++) {                     \
        out = write_code_point(out, ((const TYPE *)data)[i]);     \
        if (out == NULL) {                                        \
            return UNSUPPORTED;                                   \
        }                                                         \
    }

/* The escapes of _json.c's escape_unicode (ensure_ascii=False), then UTF-8, as
 * `.encode("utf-8")` gives it. Written from the code points: asking the str for its UTF-8
 * would cache a copy inside every non-ASCII string for its lifetime. A lone surrogate is
 * declined (the standard library's UTF-8 encoding raises), without raising here. */
static int
write_string(Buffer *buffer, PyObject *text)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) {
        return -1;
    }
#endif
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    const void *data = PyUnicode_DATA(text);
    if (buffer_reserve(buffer, length * 6 + 2) < 0) {
        return -1;
    }
    char *out = buffer->data + buffer->length;
    *out++ = '"';
    if (PyUnicode_IS_ASCII(text)) {
        const unsigned char *ascii = data;
        for (Py_ssize_t i = 0; i < length; i++) {
            unsigned char c = ascii[i];
            if (NEEDS_ESCAPE(c)) {
                out = write_escaped(out, c);
            }
            else {
                *out++ = (char)c;
            }
        }
    }
    else {
        switch (PyUnicode_KIND(text)) {
        case PyUnicode_1BYTE_KIND: WRITE_CODE_POINTS(Py_UCS1) break;
        case PyUnicode_2BYTE_KIND: WRITE_CODE_POINTS(Py_UCS2) break;
        default: WRITE_CODE_POINTS(Py_UCS4) break;
        }
    }
    *out++ = '"';
    buffer->length = out - buffer->data;
    return 0;
}

static int
write_int(Buffer *buffer, PyObject *number)
{
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        /* int.__repr__, as the standard library writes it (its digit limit included) */
        PyObject *digits = PyLong_Type.tp_repr(number);
        if (digits == NULL) {
            PyErr_Clear();
            return UNSUPPORTED;
        }
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(digits, &size);
        int result = text == NULL ? -1 : buffer_write(buffer, text, size);
        Py_DECREF(digits);
        return result;
    }
    char digits[24];
    char *end = digits + sizeof(digits);
    char *start = end;
    unsigned long long magnitude =
        value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        *--start = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (value < 0) {
        *--start = '-';
    }
    return buffer_write(buffer, start, end - start);
}

static int
write_float(Buffer *buffer, PyObject *number)
{
    double value = PyFloat_AS_DOUBLE(number);
    if (!isfinite(value)) {
        return UNSUPPORTED; /* allow_nan=False: the standard library raises */
    }
    char *text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL) {
        return -1;
    }
    int result = buffer_write(buffer, text, (Py_ssize_t)strlen(text));
    PyMem_Free(text);
    return result;
}

static int write_value(Buffer *buffer, PyObject *value, int depth);

static int
write_array(Buffer *buffer, PyObject *const *items, Py_ssize_t count, int depth)
{
    if (buffer_write(buffer, "[", 1) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i && buffer_write(buffer, ",", 1) < 0) {
            return -1;
        }
        int result = write_value(buffer, items[i], depth + 1);
        if (result) {
            return result;
        }
    }
    return buffer_write(buffer, "]", 1);
}

static int
write_object(Buffer *buffer, PyObject *mapping, int depth)
{
    if (buffer_write(buffer, "{", 1) < 0) {
        return -1;
    }
    Py_ssize_t position = 0;
    PyObject *key, *item;
    int first = 1;
    while (PyDict_Next(mapping, &position, &key, &item)) {
        if (!PyUnicode_CheckExact(key)) {
            return UNSUPPORTED; /* the standard library converts or refuses other keys */
        }
        if (!first && buffer_write(buffer, ",", 1) < 0) {
            return -1;
        }
        first = 0;
        int result = write_string(buffer, key);
        if (result) {
            return result;
        }
        if (buffer_write(buffer, ":", 1) < 0) {
            return -1;
        }
        result = write_value(buffer, item, depth + 1);
        if (result) {
            return result;
        }
    }
    return buffer_write(buffer, "}", 1);
}

static int
write_value(Buffer *buffer, PyObject *value, int depth)
{
    if (depth > MAX_DEPTH) {
        return UNSUPPORTED; /* deep nesting or a cycle: the standard library's answer */
    }
    if (value == Py_None) {
        return buffer_write(buffer, "null", 4);
    }
    if (value == Py_True) {
        return buffer_write(buffer, "true", 4);
    }
    if (value == Py_False) {
        return buffer_write(buffer, "false", 5);
    }
    if (PyUnicode_CheckExact(value)) {
        return write_string(buffer, value);
    }
    if (PyLong_CheckExact(value)) {
        return write_int(buffer, value);
    }
    if (PyFloat_CheckExact(value)) {
        return write_float(buffer, value);
    }
    if (PyDict_CheckExact(value)) {
        return write_object(buffer, value, depth);
    }
    if (PyList_CheckExact(value)) {
        /* No user code runs while the list is written, so it cannot change meanwhile. */
        return write_array(buffer, PySequence_Fast_ITEMS(value), PyList_GET_SIZE(value), depth);
    }
    if (PyTuple_CheckExact(value)) {
        return write_array(buffer, PySequence_Fast_ITEMS(value), PyTuple_GET_SIZE(value), depth);
    }
    return UNSUPPORTED;
}

/* One value's bytes, a new reference to None when it is not written here, NULL on error. */
static PyObject *
encode_into(Buffer *buffer, PyObject *value)
{
    buffer->length = 0;
    int result = write_value(buffer, value, 0);
    if (result < 0) {
        return NULL;
    }
    if (result == UNSUPPORTED) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize(buffer->data, buffer->length);
}

PyDoc_STRVAR(encode_doc,
"encode(value, /)\n--\n\n"
"The standard library's compact JSON of `value` as UTF-8 bytes, or None when the\n"
"standard library must decide (a type other than dict, list, tuple, str, int, float,\n"
"bool and None; NaN or an infinity; a lone surrogate; a non-str key; deep nesting).");

static PyObject *
encode(PyObject *module, PyObject *value)
{
    Buffer buffer = {NULL, 0, 0};
    PyObject *result = encode_into(&buffer, value);
    PyMem_Free(buffer.data);
    return result;
}

PyDoc_STRVAR(encode_many_doc,
"encode_many(values, /)\n--\n\n"
"`encode` of each value of a list, in a list of the same length.");

static PyObject *
encode_many(PyObject *module, PyObject *values)
{
    if (!PyList_CheckExact(values)) {
        PyErr_Format(PyExc_TypeError, "encode_many takes a list, not %.100s",
                     Py_TYPE(values)->tp_name);
        return NULL;
    }
    /* Every value held in a copy: declining a value can raise inside CPython, and the
     * collection that may start then runs finalizers, which could change the caller's
     * list between two values. */
    Py_ssize_t count;
    PyObject **items = copy_items(values, &count);
    if (items == NULL) {
        return NULL;
    }
    PyObject *encoded = PyList_New(count);
    Buffer buffer = {NULL, 0, 0};
    for (Py_ssize_t i = 0; encoded != NULL && i < count; i++) {
        PyObject *bytes = encode_into(&buffer, items[i]);
        if (bytes == NULL) {
            Py_CLEAR(encoded);
            break;
        }
        PyList_SET_ITEM(encoded, i, bytes);
    }
    PyMem_Free(buffer.data);
    release_items(items, count);
    return encoded;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_O, encode_doc},
    {"encode_many", encode_many, METH_O, encode_many_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "iqstate_speedups.json_writer",
    .m_doc = "The standard library's compact JSON bytes, written in one pass.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit_json_writer(void)
{
    return PyModuleDef_Init(&module);
}

/*
 * iqstate_kafka.reader's loop over a changelog's messages, one C call for a run of them.
 *
 * hold_known(messages, start, partitions, known_ids, header, marker, max_held) takes the
 * messages from messages[start] on that the reader's Python loop would take without
 * decoding: no error, a partition assigned in `partitions` (a dict of (topic, partition) to
 * the reader's per-partition state), a key other than `marker`, exactly one header, named
 * `header`, whose bytes are a key of `known_ids` (batch-id bytes decoded before), and room
 * under `max_held` (0: unbounded). For each it does what that loop does: notes a hole when
 * the offset is not the state's `next_offset`, sets `next_offset` past it, and appends
 * (key, value), the batch id and the offset to the state's `pairs`, `batch_ids` and
 * `offsets`. It returns the index of the first message it did not take (len(messages) when
 * it took them all): the caller's Python loop takes that one, then calls again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "argument_count.h"

typedef struct {
    PyObject *state;    /* the partition's state, or NULL */
    PyObject *topic;    /* the state's topic and partition, to recognise the next message's */
    long partition;
    long long next_offset;
    int holes;
    PyObject *pairs, *batch_ids, *offsets;
} Current;

static PyObject *name_next_offset, *name_holes, *name_pairs, *name_batch_ids, *name_offsets;
static PyObject *name_error, *name_partition, *name_topic, *name_offset, *name_key,
    *name_value, *name_headers;

static void
forget(Current *current)
{
    Py_CLEAR(current->state);
    Py_CLEAR(current->topic);
    Py_CLEAR(current->pairs);
    Py_CLEAR(current->batch_ids);
    Py_CLEAR(current->offsets);
}

/* Writes next_offset and holes back to the state; -1 on error. */
static int
write_back(Current *current)
{
    if (current->state == NULL) {
        return 0;
    }
    PyObject *next = PyLong_FromLongLong(current->next_offset);
    if (next == NULL) {
        return -1;
    }
    int failed = PyObject_SetAttr(current->state, name_next_offset, next) < 0 ||
                 PyObject_SetAttr(current->state, name_holes,
                                  current->holes ? Py_True : Py_False) < 0;
    Py_DECREF(next);
    return failed ? -1 : 0;
}

static PyObject *
list_attribute(PyObject *state, PyObject *name)
{
    PyObject *list = PyObject_GetAttr(state, name);
    if (list != NULL && !PyList_CheckExact(list)) {
        PyErr_Format(PyExc_TypeError, "the partition state's %U must be a list", name);
        Py_CLEAR(list);
    }
    return list;
}

/* Makes `state` (of `topic`, `partition`) the current one; -1 on error. */
static int
take_up(Current *current, PyObject *state, PyObject *topic, long partition)
{
    PyObject *next = PyObject_GetAttr(state, name_next_offset);
    if (next == NULL) {
        return -1;
    }
    long long next_offset = PyLong_AsLongLong(next);
    Py_DECREF(next);
    if (next_offset == -1 && PyErr_Occurred()) {
        return -1;
    }
    PyObject *holes = PyObject_GetAttr(state, name_holes);
    if (holes == NULL) {
        return -1;
    }
    int has_holes = PyObject_IsTrue(holes);
    Py_DECREF(holes);
    if (has_holes < 0) {
        return -1;
    }
    PyObject *pairs = list_attribute(state, name_pairs);
    PyObject *batch_ids = pairs == NULL ? NULL : list_attribute(state, name_batch_ids);
    PyObject *offsets = batch_ids == NULL ? NULL : list_attribute(state, name_offsets);
    if (offsets == NULL) {
        Py_XDECREF(pairs);
        Py_XDECREF(batch_ids);
        return -1;
    }
    Py_INCREF(state);
    Py_INCREF(topic);
    current->state = state;
    current->topic = topic;
    current->partition = partition;
    current->next_offset = next_offset;
    current->holes = has_holes;
    current->pairs = pairs;
    current->batch_ids = batch_ids;
    current->offsets = offsets;
    return 0;
}

static PyObject *
call(PyObject *message, PyObject *name)
{
    return PyObject_CallMethodNoArgs(message, name);
}

/* The batch id of a message with `key` and `headers` taken as is, borrowed; NULL (no
 * error set) when the Python loop must look at it. */
static PyObject *
known_batch_id(PyObject *key, PyObject *headers, PyObject *known_ids, PyObject *header,
               PyObject *marker)
{
    if (!PyBytes_Check(key) || !PyList_CheckExact(headers) || PyList_GET_SIZE(headers) != 1) {
        return NULL;
    }
    if (PyBytes_GET_SIZE(key) == PyBytes_GET_SIZE(marker) &&
        memcmp(PyBytes_AS_STRING(key), PyBytes_AS_STRING(marker), PyBytes_GET_SIZE(key)) == 0) {
        return NULL;
    }
    PyObject *only = PyList_GET_ITEM(headers, 0);
    if (!PyTuple_CheckExact(only) || PyTuple_GET_SIZE(only) != 2) {
        return NULL;
    }
    PyObject *name = PyTuple_GET_ITEM(only, 0), *found = PyTuple_GET_ITEM(only, 1);
    if (!PyUnicode_CheckExact(name) || !PyBytes_CheckExact(found) ||
        PyUnicode_Compare(name, header) != 0) {
        return NULL;
    }
    return PyDict_GetItemWithError(known_ids, found);
}

/* Takes messages[index] if it is one to take as is: 1 taken, 0 not (the Python loop
 * must), -1 error. */
static int
take(Current *current, PyObject *message, PyObject *partitions, PyObject *known_ids,
     PyObject *header, PyObject *marker, Py_ssize_t max_held)
{
    PyObject *error = call(message, name_error);
    if (error == NULL) {
        return -1;
    }
    int has_error = error != Py_None;
    Py_DECREF(error);
    if (has_error) {
        return 0;
    }
    PyObject *number = call(message, name_partition);
    if (number == NULL) {
        return -1;
    }
    long partition = PyLong_Check(number) ? PyLong_AsLong(number) : -1;
    if (partition == -1 && PyErr_Occurred()) {
        Py_DECREF(number);
        return -1;
    }
    PyObject *topic = call(message, name_topic);
    if (topic == NULL) {
        Py_DECREF(number);
        return -1;
    }
    int same = current->state != NULL && partition == current->partition &&
               PyUnicode_Check(topic) && PyUnicode_Compare(topic, current->topic) == 0;
    if (!same) {
        PyObject *where = PyUnicode_Check(topic) && partition >= 0
                              ? PyTuple_Pack(2, topic, number)
                              : NULL;
        PyObject *state = where == NULL ? NULL : PyDict_GetItemWithError(partitions, where);
        Py_XDECREF(where);
        if (state == NULL || write_back(current) < 0) {
            Py_DECREF(number);
            Py_DECREF(topic);
            return PyErr_Occurred() ? -1 : 0;
        }
        forget(current);
        if (take_up(current, state, topic, partition) < 0) {
            Py_DECREF(number);
            Py_DECREF(topic);
            return -1;
        }
    }
    Py_DECREF(number);
    Py_DECREF(topic);
    if (max_held > 0 && PyList_GET_SIZE(current->pairs) + 1 >= max_held) {
        return 0; /* the Python loop hands out the unit this one completes */
    }
    PyObject *offset_object = call(message, name_offset);
    PyObject *key = offset_object == NULL ? NULL : call(message, name_key);
    PyObject *headers = key == NULL ? NULL : call(message, name_headers);
    if (headers == NULL) {
        Py_XDECREF(offset_object);
        Py_XDECREF(key);
        return -1;
    }
    int result = -1;
    PyObject *value = NULL, *pair = NULL, *batch_id = NULL;
    long long offset = PyLong_Check(offset_object) ? PyLong_AsLongLong(offset_object) : -1;
    if (offset == -1 && PyErr_Occurred()) {
        goto done;
    }
    batch_id = offset < 0 ? NULL : known_batch_id(key, headers, known_ids, header, marker);
    if (batch_id == NULL) {
        result = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    Py_INCREF(batch_id); /* borrowed from a dict that a finalizer could clear meanwhile */
    value = call(message, name_value);
    if (value == NULL || (value != Py_None && !PyBytes_Check(value))) {
        result = value == NULL ? -1 : 0;
        goto done;
    }
    pair = PyTuple_Pack(2, key, value);
    if (pair == NULL || PyList_Append(current->pairs, pair) < 0 ||
        PyList_Append(current->batch_ids, batch_id) < 0 ||
        PyList_Append(current->offsets, offset_object) < 0) {
        goto done;
    }
    if (offset != current->next_offset) {
        current->holes = 1;
    }
    current->next_offset = offset + 1;
    result = 1;
done:
    Py_XDECREF(batch_id);
    Py_XDECREF(pair);
    Py_XDECREF(value);
    Py_DECREF(headers);
    Py_DECREF(key);
    Py_DECREF(offset_object);
    return result;
}

static PyObject *
hold_known(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (check_count("hold_known", nargs, 7) < 0) {
        return NULL;
    }
    PyObject *messages = args[0], *partitions = args[2], *known_ids = args[3];
    PyObject *header = args[4], *marker = args[5];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_held = PyLong_AsSsize_t(args[6]);
    if ((start == -1 || max_held == -1) && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyList_CheckExact(messages) || !PyDict_CheckExact(partitions) ||
        !PyDict_CheckExact(known_ids) || !PyUnicode_CheckExact(header) ||
        !PyBytes_CheckExact(marker) || start < 0 || max_held < 0) {
        PyErr_SetString(PyExc_TypeError,
                        "hold_known(list, int >= 0, dict, dict, str, bytes, int >= 0)");
        return NULL;
    }
    Current current = {0};
    Py_ssize_t index = start;
    /* Only the caller holds `messages`; its size is read again at every step. */
    for (; index < PyList_GET_SIZE(messages); index++) {
        int taken = take(&current, PyList_GET_ITEM(messages, index), partitions, known_ids,
                         header, marker, max_held);
        if (taken < 0) {
            /* What was taken before stays taken: the state learns how far it got. */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            if (write_back(&current) < 0) {
                PyErr_Clear();
            }
            PyErr_Restore(type, value, traceback);
            forget(&current);
            return NULL;
        }
        if (taken == 0) {
            break;
        }
    }
    int failed = write_back(&current);
    forget(&current);
    return failed ? NULL : PyLong_FromSsize_t(index);
}

static PyMethodDef methods[] = {
    {"hold_known", (PyCFunction)(void (*)(void))hold_known, METH_FASTCALL,
     "hold_known(messages, start, partitions, known_ids, header, marker, max_held)\n--\n\n"
     "Take the messages from `start` on that need no decoding; the index of the first not "
     "taken."},
    {NULL, NULL, 0, NULL},
};

static int
intern_names(PyObject *module)
{
    (void)module;
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&name_next_offset, "next_offset"}, {&name_holes, "holes"},
        {&name_pairs, "pairs"},             {&name_batch_ids, "batch_ids"},
        {&name_offsets, "offsets"},         {&name_error, "error"},
        {&name_partition, "partition"},     {&name_topic, "topic"},
        {&name_offset, "offset"},           {&name_key, "key"},
        {&name_value, "value"},             {&name_headers, "headers"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].slot == NULL) {
            *names[i].slot = PyUnicode_InternFromString(names[i].text);
            if (*names[i].slot == NULL) {
                return -1;
            }
        }
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, intern_names},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "iqstate_speedups.changelog",
    .m_doc = "The changelog reader's loop over messages that need no decoding, in C.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit_changelog(void)
{
    return PyModuleDef_Init(&module);
}

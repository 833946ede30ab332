/*
 * iqstate.version_selection's inner loop: the version each timeline of a scanned chunk
 * holds at a time, in one C call per chunk.
 *
 * A timeline (iqstate.version_history) is the current version, `timestamp` (int64), a
 * flag (1: a value, 0: a tombstone), the value's length (uint32) and the value, then the
 * older versions if any: `n` (uint32), `n` timestamps (int64, ascending), `n` ends of the
 * values in the values area (uint32), `n` flags, the values. Every number is big-endian.
 * This does exactly what select_found_in_python does, and refuses a timeline whose
 * lengths do not fit in it (the Python loop would fail on it too, less precisely).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include <structmember.h>

#include "argument_count.h"
#include "byte_order.h"
#include "copied_items.h"
#include "crc32.h"
#include "seal.h"

#define HEAD_SIZE 13

static uint64_t
u64_at(const unsigned char *p)
{
    uint64_t value = 0;
    for (int i = 0; i < 8; i++) {
        value = (value << 8) | p[i];
    }
    return value;
}

static uint32_t
u32_at(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int64_t
i64_at(const unsigned char *p)
{
    return (int64_t)u64_at(p);
}

static int
corrupt(const unsigned char *key, Py_ssize_t key_size)
{
    if (key == NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "a damaged versioned value: its lengths do not fit in it");
    }
    else {
        PyObject *named = PyBytes_FromStringAndSize((const char *)key, key_size);
        if (named != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "the versions of key %R are damaged: their lengths do not fit in "
                         "the stored value", named);
            Py_DECREF(named);
        }
    }
    return -1;
}

/* The version of `timeline` valid at `as_of` (`has_as_of` 0: the current one): 1 and its
 * place in `*found` when there is one, 0 when not, -1 on an error (naming `key`). */
typedef struct {
    const unsigned char *value;
    Py_ssize_t size;
    int64_t timestamp;
    int has_valid_to;
    int64_t valid_to;
} Found;

static int
find_in(const unsigned char *key, Py_ssize_t key_size, const unsigned char *data,
        Py_ssize_t size, int has_as_of, int64_t as_of, int64_t boundary, Found *found)
{
    if (size < HEAD_SIZE) {
        return corrupt(key, key_size);
    }
    int64_t timestamp = i64_at(data);
    Py_ssize_t length = (Py_ssize_t)u32_at(data + 9);
    if (length > size - HEAD_SIZE) {
        return corrupt(key, key_size);
    }
    if (!has_as_of || as_of >= timestamp) {
        if (!data[8]) {
            return 0;
        }
        *found = (Found){data + HEAD_SIZE, length, timestamp, 0, 0};
        return 1;
    }
    Py_ssize_t at = HEAD_SIZE + length;
    if (as_of < boundary || at == size) {
        return 0;
    }
    if (size - at < 4) {
        return corrupt(key, key_size);
    }
    Py_ssize_t count = (Py_ssize_t)u32_at(data + at);
    Py_ssize_t stamps_at = at + 4;
    if (count > (size - stamps_at) / 13) {
        return corrupt(key, key_size);
    }
    Py_ssize_t ends_at = stamps_at + 8 * count;
    Py_ssize_t flags_at = ends_at + 4 * count;
    Py_ssize_t values_at = flags_at + count;
    /* bisect_right over the timestamps, minus one: the newest at or before as_of */
    Py_ssize_t low = 0, high = count;
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        if (as_of < i64_at(data + stamps_at + 8 * middle)) {
            high = middle;
        }
        else {
            low = middle + 1;
        }
    }
    Py_ssize_t index = low - 1;
    if (index < 0 || !data[flags_at + index]) {
        return 0;
    }
    Py_ssize_t start = index ? (Py_ssize_t)u32_at(data + ends_at + 4 * (index - 1)) : 0;
    Py_ssize_t end = (Py_ssize_t)u32_at(data + ends_at + 4 * index);
    if (start > end || end > size - values_at) {
        return corrupt(key, key_size);
    }
    int64_t valid_to = index + 1 < count ? i64_at(data + stamps_at + 8 * (index + 1)) : timestamp;
    *found = (Found){data + values_at + start, end - start, i64_at(data + stamps_at + 8 * index),
                     1, valid_to};
    return 1;
}

/* find_in over the bytes `timeline` of `key` (bytes, or NULL: no key to name). */
static int
find(PyObject *key, PyObject *timeline, int has_as_of, int64_t as_of, int64_t boundary,
     Found *found)
{
    if (!PyBytes_Check(timeline)) {
        PyErr_SetString(PyExc_TypeError, "a timeline must be bytes");
        return -1;
    }
    const unsigned char *key_data = NULL;
    Py_ssize_t key_size = 0;
    if (key != NULL) {
        key_data = (const unsigned char *)PyBytes_AS_STRING(key);
        key_size = PyBytes_GET_SIZE(key);
    }
    return find_in(key_data, key_size, (const unsigned char *)PyBytes_AS_STRING(timeline),
                   PyBytes_GET_SIZE(timeline), has_as_of, as_of, boundary, found);
}

/* The int objects of a scan's timestamps and ends of validity: the versions a range
 * selects often share their times (written by one batch), so the last one made for each
 * is given again when it recurs instead of a new int each row. Cleared by clear_times. */
typedef struct {
    PyObject *object;
    int64_t value;
} TimeCache;

static PyObject *
time_object(TimeCache *cache, int64_t value)
{
    if (cache->object == NULL || cache->value != value) {
        PyObject *made = PyLong_FromLongLong(value);
        if (made == NULL) {
            return NULL;
        }
        Py_XSETREF(cache->object, made);
        cache->value = value;
    }
    return Py_NewRef(cache->object);
}

static void
clear_times(TimeCache *times)
{
    Py_CLEAR(times[0].object);
    Py_CLEAR(times[1].object);
}

/* Append the key and the version found to the four lists (`times`: the two caches of
 * time_object); -1 on an error. */
static int
append_found(PyObject **lists, TimeCache *times, const unsigned char *key, Py_ssize_t key_size,
             const unsigned char *value, Py_ssize_t size, int64_t timestamp, int has_valid_to,
             int64_t valid_to)
{
    PyObject *items[4] = {NULL, NULL, NULL, NULL};
    int status = -1;
    items[0] = PyBytes_FromStringAndSize((const char *)key + 1, key_size - 1);
    items[1] = PyBytes_FromStringAndSize((const char *)value, size);
    items[2] = time_object(&times[0], timestamp);
    items[3] = has_valid_to ? time_object(&times[1], valid_to) : Py_NewRef(Py_None);
    if (items[0] && items[1] && items[2] && items[3]) {
        status = 0;
        for (int i = 0; i < 4 && status == 0; i++) {
            status = PyList_Append(lists[i], items[i]);
        }
    }
    for (int i = 0; i < 4; i++) {
        Py_XDECREF(items[i]);
    }
    return status;
}

/* The version of one timeline at `as_of` appended to `lists` (nothing when there is
 * none): 1 when one was, 0 when not, -1 on an error. */
static int
select_one(PyObject *key, PyObject *timeline, int has_as_of, int64_t as_of, int64_t boundary,
           PyObject **lists, TimeCache *times)
{
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) < 1 || !PyBytes_Check(timeline)) {
        PyErr_SetString(PyExc_TypeError, "rows must be (key, timeline) pairs of bytes");
        return -1;
    }
    Found found;
    int status = find(key, timeline, has_as_of, as_of, boundary, &found);
    if (status <= 0) {
        return status;
    }
    return append_found(lists, times, (const unsigned char *)PyBytes_AS_STRING(key),
                        PyBytes_GET_SIZE(key), found.value, found.size, found.timestamp,
                        found.has_valid_to, found.valid_to) < 0
               ? -1
               : 1;
}

static int
int64_of(PyObject *object, const char *what, int64_t *value)
{
    long long converted = PyLong_AsLongLong(object);
    if (converted == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                         Py_TYPE(object)->tp_name);
        }
        return -1;
    }
    *value = (int64_t)converted;
    return 0;
}

/* `as_of` (None: the current version) and `boundary`, converted; -1 on an error. */
static int
times_of(PyObject *as_of_arg, PyObject *boundary_arg, int *has_as_of, int64_t *as_of,
         int64_t *boundary)
{
    *has_as_of = as_of_arg != Py_None;
    *as_of = 0;
    if (*has_as_of && int64_of(as_of_arg, "as_of", as_of) < 0) {
        return -1;
    }
    return int64_of(boundary_arg, "boundary", boundary);
}

/* The four lists of the tuple `found`; -1 with a TypeError when it is not one. */
static int
lists_of(PyObject *found, PyObject **lists)
{
    if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 4) {
        PyErr_SetString(PyExc_TypeError, "found must be a tuple of four lists");
        return -1;
    }
    for (int i = 0; i < 4; i++) {
        lists[i] = PyTuple_GET_ITEM(found, i);
        if (!PyList_Check(lists[i])) {
            PyErr_SetString(PyExc_TypeError, "found must be a tuple of four lists");
            return -1;
        }
    }
    return 0;
}

/* `wanted` as a count (-1: None, no limit); -1 on an error. */
static int
wanted_of(PyObject *wanted, Py_ssize_t *left)
{
    *left = -1;
    if (wanted == Py_None) {
        return 0;
    }
    *left = PyLong_AsSsize_t(wanted);
    if (*left == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*left < 0) {
        PyErr_SetString(PyExc_ValueError, "wanted must be None or >= 0");
        return -1;
    }
    return 0;
}

/* A scan's timelines lie wherever their engine put them (the memory engine's are spread
 * over the heap), so each row's first read of its timeline would wait for memory: the
 * head, the current value and the older versions' timestamps of a row a few ahead are
 * asked for early, while this one is read. */
#define PREFETCH_AHEAD 4
#define PREFETCH_LINES 5

static void
prefetch_timeline(PyObject *row)
{
#if defined(__GNUC__) || defined(__clang__)
    if (PyTuple_Check(row) && PyTuple_GET_SIZE(row) == 2) {
        const char *object = (const char *)PyTuple_GET_ITEM(row, 1);
        for (int line = 0; line < PREFETCH_LINES; line++) {
            __builtin_prefetch(object + 64 * line);
        }
    }
#else
    (void)row;
#endif
}

PyDoc_STRVAR(select_found_doc,
"select_found(rows, as_of, boundary, wanted, found, /)\n--\n\n"
"Append to the four lists of `found` (keys, values, timestamps, ends of validity) each\n"
"row's key, less its one-byte prefix, and the version its timeline holds at `as_of`\n"
"(None: the current one), skipping rows with none; at most `wanted` (None: no limit).");

static PyObject *
select_found(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_count("select_found", nargs, 5) < 0) {
        return NULL;
    }
    PyObject *rows = args[0], *found = args[4];
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "rows must be a list");
        return NULL;
    }
    PyObject *lists[4];
    int has_as_of;
    int64_t as_of, boundary;
    Py_ssize_t left;
    if (lists_of(found, lists) < 0 ||
        times_of(args[1], args[2], &has_as_of, &as_of, &boundary) < 0 ||
        wanted_of(args[3], &left) < 0) {
        return NULL;
    }
    Py_ssize_t count;
    PyObject **items = copy_items(rows, &count);
    if (items == NULL) {
        return NULL;
    }
    int status = 0;
    TimeCache times[2] = {{NULL, 0}, {NULL, 0}};
    for (Py_ssize_t i = 0; i < count && left != 0; i++) {
        PyObject *row = items[i];
        if (i + PREFETCH_AHEAD < count) {
            prefetch_timeline(items[i + PREFETCH_AHEAD]);
        }
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 2) {
            PyErr_SetString(PyExc_TypeError, "rows must be (key, timeline) pairs of bytes");
            status = -1;
            break;
        }
        status = select_one(PyTuple_GET_ITEM(row, 0), PyTuple_GET_ITEM(row, 1), has_as_of, as_of,
                            boundary, lists, times);
        if (status < 0) {
            break;
        }
        if (status == 1 && left > 0) {
            left--;
        }
    }
    release_items(items, count);
    clear_times(times);
    if (status < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A record of a scan of sealed timelines, held while the records a few ahead of it are
 * read: its key and stored value (bytes, or a memoryview into an engine's map). */
typedef struct {
    PyObject *pair;
    Py_buffer key;
    Py_buffer stored;
} Held;

static void
release_held(Held *held)
{
    if (held->pair != NULL) {
        PyBuffer_Release(&held->key);
        PyBuffer_Release(&held->stored);
        Py_CLEAR(held->pair);
    }
}

/* The bytes of `object` into `buffer` without a buffer request for the common cases: bytes,
 * and a memoryview of bytes (an LMDB cursor's) that is not released. buffer->obj stays
 * NULL then, so PyBuffer_Release does nothing; 0, or -1 when a request is needed. */
static int
direct_span(PyObject *object, Py_buffer *buffer)
{
    if (PyBytes_CheckExact(object)) {
        buffer->buf = PyBytes_AS_STRING(object);
        buffer->len = PyBytes_GET_SIZE(object);
    }
    else if (PyMemoryView_Check(object) &&
             !(((PyMemoryViewObject *)object)->flags & _Py_MEMORYVIEW_RELEASED) &&
             PyMemoryView_GET_BUFFER(object)->itemsize == 1 &&
             PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(object), 'C')) {
        buffer->buf = PyMemoryView_GET_BUFFER(object)->buf;
        buffer->len = PyMemoryView_GET_BUFFER(object)->len;
    }
    else {
        return -1;
    }
    buffer->obj = NULL;
    return 0;
}

/* The bytes of one item of a record, the pair holding the item alive meanwhile. */
static int
span_of(PyObject *object, Py_buffer *buffer)
{
    return direct_span(object, buffer) == 0 ? 0
                                            : PyObject_GetBuffer(object, buffer, PyBUF_SIMPLE);
}

/* Hold the record `pair` (its reference taken over); -1 with a TypeError when it is not a
 * `(key, stored)` pair of bytes-like objects. */
static int
hold(PyObject *pair, Held *held)
{
    if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 &&
        span_of(PyTuple_GET_ITEM(pair, 0), &held->key) == 0) {
        if (span_of(PyTuple_GET_ITEM(pair, 1), &held->stored) == 0) {
            held->pair = pair;
            return 0;
        }
        PyBuffer_Release(&held->key);
    }
    Py_DECREF(pair);
    PyErr_Clear();
    PyErr_SetString(PyExc_TypeError, "records must be (key, stored) pairs of bytes-like");
    return -1;
}

/* Whether `key` sorts after `upper`. */
static int
beyond(const Py_buffer *key, const Py_buffer *upper)
{
    return byte_order(key->buf, key->len, upper->buf, upper->len) > 0;
}

/* Ask for a record's memory a few records before it is read: the page it lies on, once a
 * page (an LMDB leaf holds a few timelines; the cursor walks the others next), and its
 * stored value (the checksum reads all of it), which may lie on pages of its own. Only a
 * hint: a prefetch never faults, whatever the address. */
#define SEALED_AHEAD 4
#define SEALED_PAGE 4096
#define SEALED_PREFETCH_LINES 32

static void
prefetch_record(const Py_buffer *stored, uintptr_t *last_page)
{
#if defined(__GNUC__) || defined(__clang__)
    uintptr_t page = (uintptr_t)stored->buf & ~(uintptr_t)(SEALED_PAGE - 1);
    if (page != *last_page) {
        *last_page = page;
        for (int at = 0; at < SEALED_PAGE; at += 64) {
            __builtin_prefetch((const char *)page + at);
        }
    }
    const char *data = (const char *)stored->buf;
    Py_ssize_t end = stored->len < 64 * SEALED_PREFETCH_LINES ? stored->len
                                                              : 64 * SEALED_PREFETCH_LINES;
    for (Py_ssize_t at = 0; at < end; at += 64) {
        __builtin_prefetch(data + at);
    }
#else
    (void)stored;
    (void)last_page;
#endif
}

PyDoc_STRVAR(select_sealed_doc,
"select_sealed(records, upper, limit, as_of, boundary, wanted, found, /)\n--\n\n"
"select_found over the ascending iterable `records` of `(key, stored)` pairs (bytes or\n"
"memoryviews into an engine's map), each stored timeline sealed as iqstate.sealing seals\n"
"values: at most `limit` records, up to `upper` inclusive (None: no bound), each\n"
"checksum checked, no timeline copied. `(records read, the last one's key)`, or None when\n"
"a record's checksum does not match (what was appended to `found` before it stays).");

static PyObject *
select_sealed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_count("select_sealed", nargs, 7) < 0) {
        return NULL;
    }
    PyObject *lists[4];
    int has_as_of;
    int64_t as_of, boundary;
    Py_ssize_t left;
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if ((limit == -1 && PyErr_Occurred()) || lists_of(args[6], lists) < 0 ||
        times_of(args[3], args[4], &has_as_of, &as_of, &boundary) < 0 ||
        wanted_of(args[5], &left) < 0) {
        return NULL;
    }
    Py_buffer upper = {0};
    int bounded = args[1] != Py_None;
    if (bounded && PyObject_GetBuffer(args[1], &upper, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *iterator = PyObject_GetIter(args[0]);
    if (iterator == NULL) {
        if (bounded) {
            PyBuffer_Release(&upper);
        }
        return NULL;
    }
    /* ring[first .. first + held) are read ahead; `last` is the newest record selected
     * from, kept for its key. */
    Held ring[SEALED_AHEAD] = {{0}};
    Held last = {0};
    TimeCache times[2] = {{NULL, 0}, {NULL, 0}};
    int first = 0, held = 0, exhausted = 0, damaged = 0, failed = 0;
    Py_ssize_t pulled = 0, read = 0;
    uintptr_t last_page = 0;
    while (!failed && !damaged && left != 0) {
        while (!exhausted && held < SEALED_AHEAD && pulled < limit) {
            PyObject *pair = PyIter_Next(iterator);
            if (pair == NULL) {
                exhausted = 1;
                failed = PyErr_Occurred() != NULL;
                break;
            }
            Held *slot = &ring[(first + held) % SEALED_AHEAD];
            if (hold(pair, slot) < 0) {
                failed = 1;
                break;
            }
            if (bounded && beyond(&slot->key, &upper)) {
                release_held(slot);
                exhausted = 1;
                break;
            }
            prefetch_record(&slot->stored, &last_page);
            held++;
            pulled++;
        }
        if (failed || held == 0) {
            break;
        }
        Held *record = &ring[first];
        first = (first + 1) % SEALED_AHEAD;
        held--;
        release_held(&last);
        last = *record;
        *record = (Held){0};
        read++;
        if (!seal_intact(last.key.buf, (size_t)last.key.len, last.stored.buf,
                         (size_t)last.stored.len)) {
            damaged = 1;
            break;
        }
        const unsigned char *key = (const unsigned char *)last.key.buf;
        if (last.key.len < 1) {
            PyErr_SetString(PyExc_ValueError, "a timeline's key needs its key-space prefix");
            failed = 1;
            break;
        }
        Found version;
        int status = find_in(key, last.key.len, (const unsigned char *)last.stored.buf,
                             last.stored.len - SEAL_TAG, has_as_of, as_of, boundary, &version);
        if (status == 1) {
            status = append_found(lists, times, key, last.key.len, version.value, version.size,
                                  version.timestamp, version.has_valid_to, version.valid_to);
            left -= left > 0;
        }
        failed = status < 0;
    }
    PyObject *result = NULL;
    if (damaged) {
        result = Py_NewRef(Py_None);
    }
    else if (!failed) {
        PyObject *last_key = last.pair == NULL
                                 ? Py_NewRef(Py_None)
                                 : PyBytes_FromStringAndSize((const char *)last.key.buf,
                                                             last.key.len);
        result = last_key == NULL ? NULL : Py_BuildValue("(nN)", read, last_key);
    }
    for (int i = 0; i < held; i++) {
        release_held(&ring[(first + i) % SEALED_AHEAD]);
    }
    release_held(&last);
    clear_times(times);
    Py_DECREF(iterator);
    if (bounded) {
        PyBuffer_Release(&upper);
    }
    return result;
}

PyDoc_STRVAR(found_at_doc,
"found_at(timeline, as_of, boundary, /)\n--\n\n"
"The version of `timeline` valid at `as_of` (None: the current one) as `(value,\n"
"timestamp, valid_to)`, or None, as iqstate.version_history.found_at answers.");

static PyObject *
found_at(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int has_as_of;
    int64_t as_of, boundary;
    if (check_count("found_at", nargs, 3) < 0 ||
        times_of(args[1], args[2], &has_as_of, &as_of, &boundary) < 0) {
        return NULL;
    }
    Found found;
    int status = find(NULL, args[0], has_as_of, as_of, boundary, &found);
    if (status < 0) {
        return NULL;
    }
    if (status == 0) {
        Py_RETURN_NONE;
    }
    if (found.has_valid_to) {
        return Py_BuildValue("(y#LL)", (const char *)found.value, found.size,
                             (long long)found.timestamp, (long long)found.valid_to);
    }
    return Py_BuildValue("(y#LO)", (const char *)found.value, found.size,
                         (long long)found.timestamp, Py_None);
}

/* The record type bound by bind_record_type: a class whose instances keep `value`,
 * `timestamp` and `valid_to` in slots, made here without calling its __init__. */
static PyTypeObject *record_type = NULL;
static Py_ssize_t record_offsets[3];
static const char *const record_fields[3] = {"value", "timestamp", "valid_to"};

PyDoc_STRVAR(bind_record_type_doc,
"bind_record_type(cls, /)\n--\n\n"
"Make `record` and `rows` build instances of `cls`, a class whose only state is the\n"
"slots `value`, `timestamp` and `valid_to` (TypeError otherwise).");

static PyObject *
bind_record_type(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind_record_type needs a class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_dictoffset != 0 || type->tp_basicsize != (Py_ssize_t)(sizeof(PyObject) +
                                                                        3 * sizeof(PyObject *))) {
        PyErr_Format(PyExc_TypeError, "%.100s must keep exactly three slots and no __dict__",
                     type->tp_name);
        return NULL;
    }
    Py_ssize_t offsets[3];
    for (int i = 0; i < 3; i++) {
        PyObject *descriptor = PyDict_GetItemString(type->tp_dict, record_fields[i]);
        if (descriptor == NULL || !Py_IS_TYPE(descriptor, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descriptor)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%.100s has no slot %s", type->tp_name,
                         record_fields[i]);
            return NULL;
        }
        offsets[i] = ((PyMemberDescrObject *)descriptor)->d_member->offset;
    }
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(cls));
    memcpy(record_offsets, offsets, sizeof(offsets));
    Py_RETURN_NONE;
}

static PyObject *
new_record(PyObject *value, PyObject *timestamp, PyObject *valid_to)
{
    PyObject *record = record_type->tp_alloc(record_type, 0);
    if (record == NULL) {
        return NULL;
    }
    PyObject *fields[3] = {value, timestamp, valid_to};
    for (int i = 0; i < 3; i++) {
        *(PyObject **)((char *)record + record_offsets[i]) = Py_NewRef(fields[i]);
    }
    return record;
}

static int
check_bound(void)
{
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no record type bound (bind_record_type)");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(record_doc,
"record(value, timestamp, valid_to, /)\n--\n\n"
"An instance of the bound record type holding these, without a call to its __init__.");

static PyObject *
record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_count("record", nargs, 3) < 0) {
        return NULL;
    }
    return check_bound() < 0 ? NULL : new_record(args[0], args[1], args[2]);
}

PyDoc_STRVAR(rows_doc,
"rows(keys, values, timestamps, valid_tos, /)\n--\n\n"
"`[(key, record(value, timestamp, valid_to)), ...]` of four lists of one length.");

static PyObject *
rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_count("rows", nargs, 4) < 0) {
        return NULL;
    }
    if (check_bound() < 0) {
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (!PyList_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "rows takes four lists");
            return NULL;
        }
    }
    Py_ssize_t count = PyList_GET_SIZE(args[0]);
    for (int i = 1; i < 4; i++) {
        if (PyList_GET_SIZE(args[i]) != count) {
            PyErr_SetString(PyExc_ValueError, "rows takes four lists of one length");
            return NULL;
        }
    }
    PyObject *result = PyList_New(count);
    if (result == NULL) {
        return NULL;
    }
    /* Allocating may collect garbage, whose finalizers could change the lists: each
     * row's items are held before anything is allocated for it. */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyList_GET_SIZE(args[0]) != count || PyList_GET_SIZE(args[1]) != count ||
            PyList_GET_SIZE(args[2]) != count || PyList_GET_SIZE(args[3]) != count) {
            PyErr_SetString(PyExc_RuntimeError, "a list changed while rows read it");
            Py_DECREF(result);
            return NULL;
        }
        PyObject *items[4];
        for (int j = 0; j < 4; j++) {
            items[j] = Py_NewRef(PyList_GET_ITEM(args[j], i));
        }
        PyObject *made = new_record(items[1], items[2], items[3]);
        PyObject *pair = made == NULL ? NULL : PyTuple_Pack(2, items[0], made);
        Py_XDECREF(made);
        for (int j = 0; j < 4; j++) {
            Py_DECREF(items[j]);
        }
        if (pair == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, i, pair);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"select_found", (PyCFunction)(void (*)(void))select_found, METH_FASTCALL, select_found_doc},
    {"select_sealed", (PyCFunction)(void (*)(void))select_sealed, METH_FASTCALL,
     select_sealed_doc},
    {"found_at", (PyCFunction)(void (*)(void))found_at, METH_FASTCALL, found_at_doc},
    {"bind_record_type", bind_record_type, METH_O, bind_record_type_doc},
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL, record_doc},
    {"rows", (PyCFunction)(void (*)(void))rows, METH_FASTCALL, rows_doc},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    crc32_choose();
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "iqstate_speedups.versions",
    .m_doc = "iqstate.version_selection's inner loop, one C call per scanned chunk.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit_versions(void)
{
    return PyModuleDef_Init(&module);
}

/*
 * Constructors of iqstate's slotted value objects without a Python frame.
 *
 * constructor(cls, names, fixed) gives a callable that builds an instance of `cls` from one
 * positional value per slot in `names`, every slot of the dict `fixed` set to its value
 * there, as `object.__new__(cls)` followed by the slots' own setters would: no `__init__`
 * runs. A query builds four such objects (the query, the
 * request twice, the partition's result and the request's result); through `__init__`
 * each costs a Python frame and a setter call per field.
 *
 * Only plain classes qualify: `object`'s own `__new__`, not abstract, no `__dict__`, and
 * every name an exact `str` naming a writable object slot of `cls` or a base, once.
 * Anything else is refused when the constructor is made, so a call has nothing left to
 * check but the number of values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_VAR_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t count;   /* values a call takes */
    PyObject *fixed;    /* a tuple: the values of the slots after them */
    Py_ssize_t offsets[1]; /* the positional slots', then the fixed ones' */
} Constructor;

static PyObject *
construct(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Constructor *self = (Constructor *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_Format(PyExc_TypeError, "the constructor of %.100s takes no keyword values",
                     self->cls->tp_name);
        return NULL;
    }
    if (nargs != self->count) {
        PyErr_Format(PyExc_TypeError,
                     "the constructor of %.100s takes %zd positional values (%zd given)",
                     self->cls->tp_name, self->count, nargs);
        return NULL;
    }
    PyObject *instance = self->cls->tp_alloc(self->cls, 0);
    if (instance == NULL) {
        return NULL;
    }
    /* The instance is new: every slot is NULL, and each is named once. */
    for (Py_ssize_t i = 0; i < nargs; i++) {
        *(PyObject **)((char *)instance + self->offsets[i]) = Py_NewRef(args[i]);
    }
    Py_ssize_t fixed = PyTuple_GET_SIZE(self->fixed);
    for (Py_ssize_t i = 0; i < fixed; i++) {
        *(PyObject **)((char *)instance + self->offsets[nargs + i]) =
            Py_NewRef(PyTuple_GET_ITEM(self->fixed, i));
    }
    return instance;
}

static int
constructor_traverse(Constructor *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cls);
    Py_VISIT(self->fixed);
    return 0;
}

static void
constructor_dealloc(Constructor *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->cls);
    Py_CLEAR(self->fixed);
    PyObject_GC_Del(self);
}

static PyObject *
constructor_repr(Constructor *self)
{
    return PyUnicode_FromFormat("<constructor of %s>", self->cls->tp_name);
}

static PyTypeObject ConstructorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "iqstate_speedups.slots.Constructor",
    .tp_basicsize = offsetof(Constructor, offsets),
    .tp_itemsize = sizeof(Py_ssize_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Constructor, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)constructor_traverse,
    .tp_dealloc = (destructor)constructor_dealloc,
    .tp_repr = (reprfunc)constructor_repr,
    .tp_doc = "Builds an instance of a slotted class from one value per named slot.",
};

/* 0 when `name` is an exact `str` (whose lookup in a type runs no Python code); -1 with a
 * TypeError otherwise. */
static int
check_name(PyObject *name)
{
    if (!PyUnicode_CheckExact(name)) {
        PyErr_Format(PyExc_TypeError, "slot names are str, not %.100s", Py_TYPE(name)->tp_name);
        return -1;
    }
    return 0;
}

/* The offset of `cls`'s writable object slot `name` (an exact str); -1 with an error
 * otherwise. */
static Py_ssize_t
slot_offset(PyTypeObject *cls, PyObject *name)
{
    PyObject *found = _PyType_Lookup(cls, name); /* borrowed */
    if (found == NULL || !Py_IS_TYPE(found, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_ValueError, "%.100s has no slot %R", cls->tp_name, name);
        return -1;
    }
    PyMemberDescrObject *descriptor = (PyMemberDescrObject *)found;
    PyMemberDef *member = descriptor->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY) ||
        !PyType_IsSubtype(cls, PyDescr_TYPE(descriptor))) {
        PyErr_Format(PyExc_ValueError, "%.100s's %R is not a writable object slot",
                     cls->tp_name, name);
        return -1;
    }
    return member->offset;
}

/* Records `name`'s offset at `index` of `made`; -1 with an error when it is not a slot of
 * `made`'s class or is already named. */
static int
add_slot(Constructor *made, Py_ssize_t index, PyObject *name)
{
    Py_ssize_t offset = slot_offset(made->cls, name);
    if (offset < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < index; i++) {
        if (made->offsets[i] == offset) {
            PyErr_Format(PyExc_ValueError, "slot %R is named twice", name);
            return -1;
        }
    }
    made->offsets[index] = offset;
    return 0;
}

static PyObject *
constructor(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "constructor takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyType_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "constructor needs a class, not %.100s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    if (cls->tp_new != PyBaseObject_Type.tp_new || (cls->tp_flags & Py_TPFLAGS_IS_ABSTRACT) ||
        cls->tp_dictoffset != 0 || cls->tp_alloc == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "%.100s is not a plain class (it has its own __new__, a __dict__ or is "
                     "abstract)",
                     cls->tp_name);
        return NULL;
    }
    if (!PyTuple_Check(args[1]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "constructor needs a tuple of slot names and a dict");
        return NULL;
    }
    PyObject *names = args[1];
    /* A list of (name, value) tuples owned here: checking the names cannot change it. */
    PyObject *fixed = PyDict_Items(args[2]);
    if (fixed == NULL) {
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(names), fixed_count = PyList_GET_SIZE(fixed);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (check_name(PyTuple_GET_ITEM(names, i)) < 0) {
            Py_DECREF(fixed);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < fixed_count; i++) {
        if (check_name(PyTuple_GET_ITEM(PyList_GET_ITEM(fixed, i), 0)) < 0) {
            Py_DECREF(fixed);
            return NULL;
        }
    }
    /* From here on no Python code runs: exact str names hash and compare in C. */
    Constructor *made = PyObject_GC_NewVar(Constructor, &ConstructorType, count + fixed_count);
    if (made == NULL) {
        Py_DECREF(fixed);
        return NULL;
    }
    made->vectorcall = construct;
    made->cls = (PyTypeObject *)Py_NewRef(cls);
    made->count = count;
    made->fixed = NULL;
    for (Py_ssize_t i = 0; i < count + fixed_count; i++) {
        PyObject *name = i < count ? PyTuple_GET_ITEM(names, i)
                                   : PyTuple_GET_ITEM(PyList_GET_ITEM(fixed, i - count), 0);
        if (add_slot(made, i, name) < 0) {
            Py_DECREF(fixed);
            Py_DECREF(made);
            return NULL;
        }
    }
    made->fixed = PyTuple_New(fixed_count);
    if (made->fixed == NULL) {
        Py_DECREF(fixed);
        Py_DECREF(made);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < fixed_count; i++) {
        PyTuple_SET_ITEM(made->fixed, i, Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(fixed, i), 1)));
    }
    Py_DECREF(fixed);
    PyObject_GC_Track(made);
    return (PyObject *)made;
}

static PyMethodDef methods[] = {
    {"constructor", (PyCFunction)(void (*)(void))constructor, METH_FASTCALL,
     "constructor(cls, names, fixed) -> a callable building cls from one value per slot "
     "name, with the slots of the dict fixed set to its values."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "iqstate_speedups.slots",
    .m_doc = "Constructors of slotted classes without a Python frame.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit_slots(void)
{
    if (PyType_Ready(&ConstructorType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module);
}

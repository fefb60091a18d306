/* interlock.session._history: one C call to make an instance of a slotted class
 * (a frozen ``slots=True`` dataclass: Step, SessionView) with every field given.
 *
 * ``maker(cls, names)`` returns a callable ``make(*values)`` that allocates ``cls``
 * (its ``tp_alloc``, as ``object.__new__`` does) and stores each value in the slot of
 * the same position in ``names`` — what the Python reference in history.py does with
 * one descriptor ``__set__`` per field, without ``__init__`` (a frozen dataclass's
 * costs an ``object.__setattr__`` per field). Every name must be an object slot
 * (``T_OBJECT_EX``) of ``cls`` itself, else ``maker`` raises TypeError; a call with
 * another number of values raises TypeError. The object is the same, field for field
 * (tests/session/test_history_speedups.py compares both paths).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    Py_ssize_t count;
    Py_ssize_t *offsets;
    vectorcallfunc vectorcall;
} Maker;

static void
maker_dealloc(Maker *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->cls);
    PyMem_Free(self->offsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
maker_traverse(Maker *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cls);
    return 0;
}

static PyObject *
maker_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Maker *self = (Maker *)callable;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_SetString(PyExc_TypeError, "maker takes positional values only");
        return NULL;
    }
    if (n != self->count) {
        PyErr_Format(PyExc_TypeError, "maker of %s takes %zd values (%zd given)",
                     self->cls->tp_name, self->count, n);
        return NULL;
    }
    PyTypeObject *cls = self->cls;
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL) {
        return NULL;
    }
    char *base = (char *)obj;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = args[i];
        Py_INCREF(value);
        *(PyObject **)(base + self->offsets[i]) = value; /* fresh object: slots are NULL */
    }
    return obj;
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interlock.session._history.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_traverse = (traverseproc)maker_traverse,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_doc = "make(*values): an instance of the class with each slot set (see maker)",
};

static PyObject *
maker(PyObject *module, PyObject *args)
{
    PyTypeObject *cls;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "O!O!:maker", &PyType_Type, &cls, &PyTuple_Type, &names)) {
        return NULL;
    }
    if (cls->tp_alloc == NULL || cls->tp_dictoffset != 0 || cls->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "%s is not a plain slotted class", cls->tp_name);
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    Py_ssize_t *offsets = PyMem_New(Py_ssize_t, count > 0 ? count : 1);
    if (offsets == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *dict = cls->tp_dict;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *descr = PyUnicode_Check(name) ? PyDict_GetItemWithError(dict, name) : NULL;
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type ||
            ((PyMemberDescrObject *)descr)->d_common.d_type != cls) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_TypeError, "%R is not a slot of %s", name, cls->tp_name);
            }
            PyMem_Free(offsets);
            return NULL;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "%R is not an object slot of %s", name, cls->tp_name);
            PyMem_Free(offsets);
            return NULL;
        }
        for (Py_ssize_t j = 0; j < i; j++) {
            if (offsets[j] == member->offset) {
                PyErr_Format(PyExc_TypeError, "%R is named twice", name);
                PyMem_Free(offsets);
                return NULL;
            }
        }
        offsets[i] = member->offset;
    }
    Maker *self = PyObject_GC_New(Maker, &MakerType);
    if (self == NULL) {
        PyMem_Free(offsets);
        return NULL;
    }
    Py_INCREF(cls);
    self->cls = cls;
    self->count = count;
    self->offsets = offsets;
    self->vectorcall = maker_vectorcall;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"maker", maker, METH_VARARGS,
     "maker(cls, names) -> make(*values): instances of the slotted class cls, each slot "
     "of names set to the value in its position"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_history", "One C call to make a slotted step or view.", -1, methods,
};

PyMODINIT_FUNC
PyInit__history(void)
{
    if (PyType_Ready(&MakerType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module);
}

/* interlock.core._redaction: the fast path of Redactor.redact_value in C.
 *
 * plain(value, clean, redact, is_secret_key, redacted, max_depth, max_nodes, clean_max)
 * computes exactly what Redactor._plain in redaction.py computes for the values it
 * accepts — exact dicts (str keys), lists and tuples, nested at most max_depth deep and
 * max_nodes items in all, of exact str, int, float, bool and None — and returns
 * NotImplemented where _plain raises _NotPlain (a subclass, bytes, any other object, a
 * cycle, too deep, too big, two keys that redact alike, a container changed while
 * it was read). Containers are copied, as _plain copies them.
 *
 * A str is redacted by calling redact(text) unless it is at most clean_max characters
 * long and in clean (the redactor's set of texts found to hold nothing: redact() itself
 * answers those with the text unchanged); a key for which is_secret_key(key) is true
 * has its value replaced by redacted whatever it is. Exceptions raised by redact or
 * is_secret_key propagate (redact_value then takes the full walk).
 *
 * The Python _plain is the reference: tests/core/test_redaction_accelerated.py holds
 * the two equal on random values; redaction.py falls back to it when this module is
 * not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Python ints wider than this are described, not kept (redaction._INT_MAX_BITS). */
#define INT_MAX_BITS 13000

typedef struct {
    PyObject *clean;         /* set[str] */
    PyObject *redact;        /* callable: str -> str */
    PyObject *is_secret_key; /* callable: str -> bool */
    PyObject *redacted;      /* the marker for a secret key's value */
    Py_ssize_t max_depth;
    Py_ssize_t budget; /* nodes left */
    Py_ssize_t clean_max;
} Walk;

/* Sentinel result: the value is not plain (NotImplemented, borrowed). */
#define NOT_PLAIN Py_NotImplemented

static PyObject *walk_value(Walk *w, PyObject *value, Py_ssize_t depth);

/* A new reference to the redacted text (the same object when clean), NULL on error. */
static PyObject *
redact_text(Walk *w, PyObject *text)
{
    if (PyUnicode_GET_LENGTH(text) <= w->clean_max) {
        int found = PySet_Contains(w->clean, text);
        if (found < 0) {
            return NULL;
        }
        if (found) {
            Py_INCREF(text);
            return text;
        }
    }
    PyObject *out = PyObject_CallOneArg(w->redact, text);
    if (out != NULL && !PyUnicode_CheckExact(out)) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_TypeError, "redact() returned something other than a str");
        return NULL;
    }
    return out;
}

static PyObject *
walk_dict(Walk *w, PyObject *dict, Py_ssize_t depth)
{
    Py_ssize_t size = PyDict_GET_SIZE(dict);
    w->budget -= size;
    if (w->budget < 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    while (PyDict_Next(dict, &pos, &key, &item)) {
        if (!PyUnicode_CheckExact(key)) {
            Py_DECREF(out);
            Py_RETURN_NOTIMPLEMENTED;
        }
        /* Held across the calls into Python below (another thread may change dict). */
        Py_INCREF(key);
        Py_INCREF(item);
        PyObject *out_key = redact_text(w, key);
        PyObject *out_value = NULL;
        int clash = 0;
        if (out_key != NULL) {
            clash = PyDict_Contains(out, out_key);
        }
        if (out_key != NULL && clash == 0) {
            PyObject *secret = PyObject_CallOneArg(w->is_secret_key, key);
            int is_secret = secret == NULL ? -1 : PyObject_IsTrue(secret);
            Py_XDECREF(secret);
            if (is_secret > 0) {
                out_value = Py_NewRef(w->redacted);
            }
            else if (is_secret == 0) {
                out_value = walk_value(w, item, depth + 1);
            }
        }
        Py_DECREF(key);
        Py_DECREF(item);
        if (out_key == NULL || clash < 0 || (clash == 0 && out_value == NULL)) {
            Py_XDECREF(out_key);
            Py_XDECREF(out_value);
            Py_DECREF(out);
            return NULL;
        }
        if (clash > 0 || out_value == NOT_PLAIN) { /* two keys redact alike: the walk */
            Py_DECREF(out_key);
            Py_XDECREF(out_value);
            Py_DECREF(out);
            Py_RETURN_NOTIMPLEMENTED;
        }
        int failed = PyDict_SetItem(out, out_key, out_value);
        Py_DECREF(out_key);
        Py_DECREF(out_value);
        if (failed < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    if (PyDict_GET_SIZE(dict) != size) { /* changed while read: the walk decides */
        Py_DECREF(out);
        Py_RETURN_NOTIMPLEMENTED;
    }
    return out;
}

static PyObject *
walk_list(Walk *w, PyObject *list, Py_ssize_t depth)
{
    Py_ssize_t size = PyList_GET_SIZE(list);
    w->budget -= size;
    if (w->budget < 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *out = PyList_New(size);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        if (PyList_GET_SIZE(list) != size) { /* changed while read: the walk decides */
            Py_DECREF(out);
            Py_RETURN_NOTIMPLEMENTED;
        }
        PyObject *item = Py_NewRef(PyList_GET_ITEM(list, i));
        PyObject *copied = walk_value(w, item, depth + 1);
        Py_DECREF(item);
        if (copied == NULL || copied == NOT_PLAIN) {
            Py_DECREF(out);
            return copied;
        }
        PyList_SET_ITEM(out, i, copied);
    }
    if (PyList_GET_SIZE(list) != size) {
        Py_DECREF(out);
        Py_RETURN_NOTIMPLEMENTED;
    }
    return out;
}

static PyObject *
walk_tuple(Walk *w, PyObject *tuple, Py_ssize_t depth)
{
    Py_ssize_t size = PyTuple_GET_SIZE(tuple);
    w->budget -= size;
    if (w->budget < 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *out = PyTuple_New(size);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *copied = walk_value(w, PyTuple_GET_ITEM(tuple, i), depth + 1);
        if (copied == NULL || copied == NOT_PLAIN) {
            Py_DECREF(out);
            return copied;
        }
        PyTuple_SET_ITEM(out, i, copied);
    }
    return out;
}

/* A new reference to the redacted copy, NOT_PLAIN (a new reference too), or NULL. */
static PyObject *
walk_value(Walk *w, PyObject *value, Py_ssize_t depth)
{
    PyTypeObject *kind = Py_TYPE(value);
    if (kind == &PyUnicode_Type) {
        return redact_text(w, value);
    }
    if (value == Py_None || kind == &PyBool_Type || kind == &PyFloat_Type) {
        return Py_NewRef(value);
    }
    if (kind == &PyLong_Type) {
        size_t bits = _PyLong_NumBits(value);
        if (bits == (size_t)-1 && PyErr_Occurred()) {
            return NULL;
        }
        if (bits > INT_MAX_BITS) { /* too wide to print: described (redaction._int) */
            return PyUnicode_FromFormat("<int bits=%zu>", bits);
        }
        return Py_NewRef(value);
    }
    if (depth >= w->max_depth) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (kind == &PyDict_Type) {
        return walk_dict(w, value, depth);
    }
    if (kind == &PyList_Type) {
        return walk_list(w, value, depth);
    }
    if (kind == &PyTuple_Type) {
        return walk_tuple(w, value, depth);
    }
    Py_RETURN_NOTIMPLEMENTED;
}

static PyObject *
plain(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "plain() takes exactly 8 arguments");
        return NULL;
    }
    Walk w;
    w.clean = args[1];
    w.redact = args[2];
    w.is_secret_key = args[3];
    w.redacted = args[4];
    if (!PySet_Check(w.clean)) {
        PyErr_SetString(PyExc_TypeError, "plain(): clean must be a set");
        return NULL;
    }
    w.max_depth = PyLong_AsSsize_t(args[5]);
    w.budget = PyLong_AsSsize_t(args[6]);
    w.clean_max = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return walk_value(&w, args[0], 0);
}

static PyMethodDef methods[] = {
    {"plain", (PyCFunction)(void (*)(void))plain, METH_FASTCALL,
     "plain(value, clean, redact, is_secret_key, redacted, max_depth, max_nodes, clean_max)"
     " -> Redactor._plain's result, or NotImplemented where it raises _NotPlain"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_redaction", "The fast path of Redactor.redact_value in C.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__redaction(void)
{
    return PyModule_Create(&module);
}

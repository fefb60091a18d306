/* interlock.store._chain: the bytes one audit link's hash covers, in C.
 *
 * material_or(reference) makes material(prev_hash, tenant, seq, ts_us, kind, decision_id,
 * agent, decision, body, key_id), which returns exactly what chain.link_material (the
 * reference) returns for the same arguments — each
 * field written as <length in characters>:<text>, a missing one (decision_id, agent,
 * decision; key_id left out entirely) as "~", numbers in decimal, the whole encoded as
 * UTF-8 with surrogates passed through — when every text is an exact str (or None where
 * it may be) and seq and ts_us are exact ints that fit in 64 bits; for anything else it
 * calls the reference.
 *
 * tests/store/test_chain_accelerated.py holds the two equal on random fields; chain.py
 * uses the reference alone when this module is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define FIELDS 10

/* The decimal text of n at end (written backwards, no terminator); its length. (Not
 * snprintf: its format machinery was a third of a record's material.) */
static Py_ssize_t
decimal(char *end, unsigned long long n)
{
    char *at = end;
    do {
        *--at = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    return end - at;
}

typedef struct {
    const char *data; /* its UTF-8 (borrowed from the str or from owned) */
    Py_ssize_t size;  /* bytes */
    Py_ssize_t chars; /* the length written before it */
    PyObject *owned;  /* the bytes of a non-ASCII text, else NULL */
    char digits[24];  /* a number's decimal text */
    int missing;      /* None: written as "~" (or not at all for key_id) */
} Field;

/* 0 on success, 1 when the argument is not one C writes (NotImplemented), -1 on error. */
static int
text_field(Field *f, PyObject *value, int may_be_missing)
{
    f->owned = NULL;
    f->missing = 0;
    if (value == Py_None && may_be_missing) {
        f->missing = 1;
        return 0;
    }
    if (!PyUnicode_CheckExact(value)) {
        return 1;
    }
    f->chars = PyUnicode_GET_LENGTH(value);
    if (PyUnicode_IS_ASCII(value)) {
        f->data = (const char *)PyUnicode_DATA(value);
        f->size = f->chars;
        return 0;
    }
    f->owned = PyUnicode_AsEncodedString(value, "utf-8", "surrogatepass");
    if (f->owned == NULL) {
        return -1;
    }
    f->data = PyBytes_AS_STRING(f->owned);
    f->size = PyBytes_GET_SIZE(f->owned);
    return 0;
}

static int
number_field(Field *f, PyObject *value)
{
    f->owned = NULL;
    f->missing = 0;
    if (!PyLong_CheckExact(value)) {
        return 1;
    }
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) {
        return 1;
    }
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    char *end = f->digits + sizeof f->digits;
    unsigned long long magnitude = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    Py_ssize_t written = decimal(end, magnitude);
    if (n < 0) {
        end[-++written] = '-';
    }
    f->data = end - written;
    f->size = f->chars = written;
    return 0;
}

/* self: the reference, called for what C does not write (and any other arity). */
static PyObject *
material(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != FIELDS) {
        return PyObject_Vectorcall(self, args, nargs, NULL);
    }
    Field fields[FIELDS];
    int made = 0, status = 0;
    for (; made < FIELDS && status == 0; made++) {
        Field *f = &fields[made];
        switch (made) {
        case 2: /* seq */
        case 3: /* ts_us */
            status = number_field(f, args[made]);
            break;
        case 5: /* decision_id */
        case 6: /* agent */
        case 7: /* decision */
        case 9: /* key_id */
            status = text_field(f, args[made], 1);
            break;
        default:
            status = text_field(f, args[made], 0);
        }
    }
    PyObject *out = NULL;
    if (status == 0) {
        Py_ssize_t total = 0;
        for (int i = 0; i < FIELDS; i++) {
            if (fields[i].missing) {
                total += i == 9 ? 0 : 1;
            }
            else {
                total += 21 + fields[i].size; /* at most 20 digits and ':' */
            }
        }
        out = PyBytes_FromStringAndSize(NULL, total);
        if (out != NULL) {
            char *at = PyBytes_AS_STRING(out);
            for (int i = 0; i < FIELDS; i++) {
                Field *f = &fields[i];
                if (f->missing) {
                    if (i != 9) {
                        *at++ = '~';
                    }
                    continue;
                }
                char digits[24];
                Py_ssize_t width = decimal(digits + sizeof digits, (unsigned long long)f->chars);
                memcpy(at, digits + sizeof digits - width, (size_t)width);
                at += width;
                *at++ = ':';
                memcpy(at, f->data, (size_t)f->size);
                at += f->size;
            }
            if (_PyBytes_Resize(&out, at - PyBytes_AS_STRING(out)) < 0) {
                out = NULL;
            }
        }
    }
    for (int i = 0; i < made; i++) {
        Py_XDECREF(fields[i].owned);
    }
    if (status > 0) {
        return PyObject_Vectorcall(self, args, nargs, NULL);
    }
    return out;
}

static PyMethodDef material_def = {
    "material", (PyCFunction)(void (*)(void))material, METH_FASTCALL,
    "material(prev_hash, tenant, seq, ts_us, kind, decision_id, agent, decision, body, "
    "key_id) -> the link's material, as the reference writes it",
};

static PyObject *
material_or(PyObject *Py_UNUSED(module), PyObject *reference)
{
    if (!PyCallable_Check(reference)) {
        PyErr_SetString(PyExc_TypeError, "material_or() takes the reference function");
        return NULL;
    }
    return PyCFunction_NewEx(&material_def, reference, NULL);
}

static PyMethodDef methods[] = {
    {"material_or", material_or, METH_O,
     "material_or(reference) -> material(...): the link's material in C, as reference "
     "writes it (reference called for what C leaves to it)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chain", "The audit link's material in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__chain(void)
{
    return PyModule_Create(&module);
}

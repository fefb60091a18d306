/* interlock.session._history: two small types the in-memory session history leans on.
 *
 * 1. ``maker(cls, names)``: one C call to make an instance of a slotted class (a frozen
 * ``slots=True`` dataclass: Step, SessionView) with every field given.
 *
 * ``maker(cls, names)`` returns a callable ``make(*values)`` that allocates ``cls``
 * (its ``tp_alloc``, as ``object.__new__`` does) and stores each value in the slot of
 * the same position in ``names`` — what the Python reference in history.py does with
 * one descriptor ``__set__`` per field, without ``__init__`` (a frozen dataclass's
 * costs an ``object.__setattr__`` per field). Every name must be an object slot
 * (``T_OBJECT_EX``) of ``cls`` itself, else ``maker`` raises TypeError; a call with
 * another number of values raises TypeError. The object is the same, field for field
 * (tests/session/test_history_speedups.py compares both paths).
 *
 * 2. ``PrintSet``: a session's fingerprint index (the union of the fingerprints of every
 * step that brought data in) as an exact set of uint64 packed in one open-addressing
 * table — see the comment above its code, further down.
 *
 * 3. ``FrozenPrints``: one step's fingerprints, an immutable sorted uint64 array that
 * equals and hashes as the frozenset of the same ints — see its comment further down.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

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

/* ---- PrintSet --------------------------------------------------------------------
 *
 * Why: the benign call's session test is one ``isdisjoint`` of its arguments' probe
 * (~50 fingerprints) against the session's index (thousands). As a ``set[int]`` the
 * index costs ~50 bytes a fingerprint (a 16-byte entry, the table at most 3/5 full, and
 * the int objects it keeps alive), and a lookup that hits reads an entry, then the int
 * it points to: in a session the cache has not seen lately (a server rotates over
 * many), a cache miss or two a lookup, one after the other. Packed, a fingerprint costs
 * one 8-byte slot (11 to 21 bytes at the loads kept), a lookup reads one cache line, and
 * the lookups of a probe are prefetched together, so their misses overlap.
 *
 * How: an open-addressing table of uint64 with linear probing; 0 marks an empty slot
 * (the value 0 itself is a flag beside the table). A slot is found from the value mixed
 * with a key drawn once a process: fingerprints are unkeyed hashes a result's author
 * can choose, and without the key they cannot aim many at one run of slots. The table
 * doubles (a rehash) before it is more than 3/4 full. Memory from PyMem_* (tracemalloc
 * counts it).
 *
 * Exact, not a filter: ``x in s`` is ``x in set(s)`` for every int x. Fingerprints are
 * in [0, 2**64); an int outside (Interlock makes none, but a caller may hand any int to
 * a history) is kept in a plain set beside the table ("wide"), so no int is refused or
 * changed. Adding anything but an int is a TypeError and adds nothing; looked up, it is
 * not in the set (where ``set`` would raise for an unhashable one).
 *
 * Threads: no method releases the GIL, nor runs Python code once it has begun to change
 * the set (an iterable that is not a set is read whole first), so a reader in another
 * thread sees the set before or after a change, as with ``set``.
 */

typedef struct {
    PyObject_HEAD
    uint64_t *slots;     /* capacity slots, 0 = empty; NULL while capacity is 0 */
    Py_ssize_t capacity; /* 0, or a power of two >= MIN_CAPACITY */
    Py_ssize_t used;     /* values in slots */
    int has_zero;        /* holds the value 0 (never in slots) */
    PyObject *wide;      /* a set of the ints outside [0, 2**64) held, or NULL */
    size_t version;      /* changed by every change: iterators tell they are stale */
} PrintSet;

typedef struct {
    PyObject_HEAD
    PrintSet *set;
    size_t version;
    Py_ssize_t pos; /* -1: the zero; 0..capacity-1: slots; then wide, from wide_pos */
    Py_ssize_t wide_pos;
} PrintSetIter;

static PyTypeObject PrintSetType;
static PyTypeObject PrintSetIterType;

/* FrozenPrints (further down): PrintSet reads one slot by slot. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t size;
    uint64_t *values; /* size values, ascending, distinct; NULL when size is 0 */
    Py_hash_t hash;   /* -1 until the first hash() */
} FrozenPrints;

typedef struct {
    PyObject_HEAD
    FrozenPrints *set;
    Py_ssize_t pos;
} FrozenPrintsIter;

static PyTypeObject FrozenPrintsType;
static PyTypeObject FrozenPrintsIterType;

#define IS_FROZEN(o) (Py_TYPE(o) == &FrozenPrintsType)

/* Whether a value is among n sorted ones: a binary search. */
static inline int
sorted_has(const uint64_t *v, Py_ssize_t n, uint64_t value)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < value) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo < n && v[lo] == value;
}

#define MIN_CAPACITY 8
#define BATCH 32 /* lookups prefetched together */

static uint64_t print_key; /* drawn at import (os.urandom) */

/* The slot of a value: the keyed value times an odd constant, its high half folded
 * into the low bits the mask keeps (one multiply: the lookup's own cost is a few
 * instructions, and the mix was a third of them). */
static inline uint64_t
mix(uint64_t x)
{
    x = (x ^ print_key) * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 32);
}

#define IS_SET(o) (PyAnySet_Check(o))
#define IS_PRINTSET(o) (Py_TYPE(o) == &PrintSetType)

/* An int as a fingerprint: 1 with *value set; 0 an int outside [0, 2**64); -1 not an
 * int. Never leaves an error set. On CPython 3.11 (30-bit digits) the digits are read
 * here: PyLong_AsUnsignedLongLong reads an int of 2 digits or more through
 * _PyLong_AsByteArray, and even the lighter calls cost more than the lookup itself. */
static inline int
as_print(PyObject *item, uint64_t *value)
{
    if (!PyLong_Check(item)) {
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    const digit *d = ((PyLongObject *)item)->ob_digit;
    switch (Py_SIZE(item)) { /* the number of digits, negative for a negative int */
    case 0:
        *value = 0;
        return 1;
    case 1:
        *value = d[0];
        return 1;
    case 2:
        *value = (uint64_t)d[0] | (uint64_t)d[1] << 30;
        return 1;
    case 3: /* 60 bits in the first two: 4 more at most */
        if (d[2] >> 4) {
            return 0;
        }
        *value = (uint64_t)d[0] | (uint64_t)d[1] << 30 | (uint64_t)d[2] << 60;
        return 1;
    default: /* negative, or wider than 90 bits */
        return 0;
    }
#else
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (overflow == 0) {
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear(); /* not reached for an int; never leave it set */
            return 0;
        }
        *value = (uint64_t)x;
        return x >= 0;
    }
    if (overflow < 0 || _PyLong_NumBits(item) > 64) {
        return 0;
    }
    *value = (uint64_t)PyLong_AsUnsignedLongLongMask(item); /* [2**63, 2**64) */
    return 1;
#endif
}

/* The next item of a set's table from *pos (borrowed), NULL past the last:
 * _PySet_NextEntry inlined (a call an item cost as much as the lookup). */
static inline PyObject *
set_next(PyObject *set, Py_ssize_t *pos)
{
    PySetObject *so = (PySetObject *)set;
    setentry *table = so->table;
    Py_ssize_t mask = so->mask;
    for (Py_ssize_t i = *pos; i <= mask; i++) {
        PyObject *key = table[i].key;
        if (key != NULL && key != _PySet_Dummy) {
            *pos = i + 1;
            return key;
        }
    }
    *pos = mask + 1;
    return NULL;
}

static inline Py_ssize_t
printset_len(PrintSet *self)
{
    return self->used + self->has_zero + (self->wide ? PySet_GET_SIZE(self->wide) : 0);
}

static inline int
table_has(PrintSet *self, uint64_t value)
{
    if (value == 0) {
        return self->has_zero;
    }
    if (self->used == 0) {
        return 0;
    }
    size_t mask = (size_t)self->capacity - 1;
    size_t i = (size_t)mix(value) & mask;
    for (;;) { /* the table is never full: an empty slot ends the run */
        uint64_t at = self->slots[i];
        if (at == value) {
            return 1;
        }
        if (at == 0) {
            return 0;
        }
        i = (i + 1) & mask;
    }
}

/* Put a nonzero value in a table with room; 1 if it was not there. */
static inline int
slots_put(uint64_t *slots, size_t mask, uint64_t value)
{
    size_t i = (size_t)mix(value) & mask;
    for (;;) {
        uint64_t at = slots[i];
        if (at == value) {
            return 0;
        }
        if (at == 0) {
            slots[i] = value;
            return 1;
        }
        i = (i + 1) & mask;
    }
}

/* Make room for `more` values: the table at most 3/4 full after them. */
static int
table_reserve(PrintSet *self, Py_ssize_t more)
{
    Py_ssize_t need = self->used + more;
    if (need * 4 <= self->capacity * 3) {
        return 0;
    }
    Py_ssize_t capacity = self->capacity ? self->capacity : MIN_CAPACITY;
    while (need * 4 > capacity * 3) {
        if (capacity > PY_SSIZE_T_MAX / 16) {
            PyErr_NoMemory();
            return -1;
        }
        capacity *= 2;
    }
    uint64_t *slots = PyMem_Calloc((size_t)capacity, sizeof(uint64_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t mask = (size_t)capacity - 1;
    for (Py_ssize_t i = 0; i < self->capacity; i++) {
        if (self->slots[i]) {
            slots_put(slots, mask, self->slots[i]);
        }
    }
    PyMem_Free(self->slots);
    self->slots = slots;
    self->capacity = capacity;
    return 0;
}

/* Add one fingerprint (room made as needed). */
static int
table_add(PrintSet *self, uint64_t value)
{
    if (value == 0) {
        self->has_zero = 1;
        return 0;
    }
    if (table_reserve(self, 1) < 0) {
        return -1;
    }
    self->used += slots_put(self->slots, (size_t)self->capacity - 1, value);
    return 0;
}

/* Add one item (an int: check_item said so; anything else is passed over). */
static inline int
add_item(PrintSet *self, PyObject *item)
{
    uint64_t value;
    int kind = as_print(item, &value);
    if (kind == 1) {
        return table_add(self, value);
    }
    return kind == 0 ? PySet_Add(self->wide, item) : 0;
}

/* Whether an item may be added: 1 an int in the range, 0 a wide int, -1 TypeError. */
static inline int
check_item(PyObject *item)
{
    uint64_t value;
    int kind = as_print(item, &value);
    if (kind < 0) {
        PyErr_Format(PyExc_TypeError, "a fingerprint is an int, not %.100s",
                     Py_TYPE(item)->tp_name);
    }
    return kind;
}

/* The wide set made before any change, when an item needs it. */
static inline int
ensure_wide(PrintSet *self)
{
    if (self->wide == NULL && (self->wide = PySet_New(NULL)) == NULL) {
        return -1;
    }
    return 0;
}

/* update from a set or frozenset: its table walked twice (check, then add), borrowed. */
static int
update_from_set(PrintSet *self, PyObject *other)
{
    Py_ssize_t pos = 0;
    PyObject *item;
    int wide = 0;
    while ((item = set_next(other, &pos)) != NULL) {
        int kind = check_item(item);
        if (kind < 0) {
            return -1;
        }
        wide |= kind == 0;
    }
    if (wide && ensure_wide(self) < 0) {
        return -1;
    }
    pos = 0;
    while ((item = set_next(other, &pos)) != NULL) {
        if (add_item(self, item) < 0) {
            return -1;
        }
    }
    return 0;
}

/* update from any other iterable: read whole first (it may run Python code). */
static int
update_from_iterable(PrintSet *self, PyObject *iterable)
{
    PyObject *seq = PySequence_Fast(iterable, "update() takes an iterable of ints");
    if (seq == NULL) {
        return -1;
    }
    PyObject *const *items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int wide = 0, done = 0;
    for (Py_ssize_t i = 0; i < n && done == 0; i++) {
        int kind = check_item(items[i]);
        done = kind < 0 ? -1 : 0;
        wide |= kind == 0;
    }
    if (done == 0 && wide) {
        done = ensure_wide(self);
    }
    for (Py_ssize_t i = 0; i < n && done == 0; i++) {
        done = add_item(self, items[i]);
    }
    Py_DECREF(seq);
    return done;
}

static int
update_from_printset(PrintSet *self, PrintSet *other)
{
    if (other == self) {
        return 0;
    }
    if (other->wide && PySet_GET_SIZE(other->wide)) {
        if (ensure_wide(self) < 0 || _PySet_Update(self->wide, other->wide) < 0) {
            return -1;
        }
    }
    self->has_zero |= other->has_zero;
    for (Py_ssize_t i = 0; i < other->capacity; i++) {
        if (other->slots[i] && table_add(self, other->slots[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* update(iterable): all of it or none of it (but for memory running out). */
static int
printset_update_one(PrintSet *self, PyObject *iterable)
{
    self->version++;
    if (IS_PRINTSET(iterable)) {
        return update_from_printset(self, (PrintSet *)iterable);
    }
    if (IS_FROZEN(iterable)) { /* its values read slot by slot: no int made */
        FrozenPrints *frozen = (FrozenPrints *)iterable;
        if (table_reserve(self, frozen->size) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < frozen->size; i++) {
            if (table_add(self, frozen->values[i]) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (IS_SET(iterable)) {
        return update_from_set(self, iterable);
    }
    return update_from_iterable(self, iterable);
}

/* ---- lookups */

/* Whether one of n fingerprints is in the table: their slots prefetched together, then
 * probed (a probe's misses overlap instead of following one another). */
static int
batch_meets(PrintSet *self, const uint64_t *values, Py_ssize_t n)
{
    size_t at[BATCH];
    if (self->used == 0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (values[i] == 0 && self->has_zero) {
                return 1;
            }
        }
        return 0;
    }
    size_t mask = (size_t)self->capacity - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        at[i] = (size_t)mix(values[i]) & mask;
        __builtin_prefetch(&self->slots[at[i]]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t value = values[i];
        if (value == 0) {
            if (self->has_zero) {
                return 1;
            }
            continue;
        }
        for (size_t j = at[i];; j = (j + 1) & mask) {
            uint64_t there = self->slots[j];
            if (there == value) {
                return 1;
            }
            if (there == 0) {
                break;
            }
        }
    }
    return 0;
}

/* Whether a wide int is held (never raises: it is an int, hashable). */
static inline int
wide_has(PrintSet *self, PyObject *item)
{
    return self->wide != NULL && PySet_Contains(self->wide, item) == 1;
}

/* Whether the two share a fingerprint: the smaller's slots looked up in the larger. */
static int
printsets_meet(PrintSet *a, PrintSet *b)
{
    if (printset_len(a) > printset_len(b)) {
        PrintSet *t = a;
        a = b;
        b = t;
    }
    if (a->has_zero && b->has_zero) {
        return 1;
    }
    if (a->wide != NULL && b->wide != NULL && PySet_GET_SIZE(a->wide) &&
        PySet_GET_SIZE(b->wide)) {
        PyObject *item;
        Py_ssize_t pos = 0;
        while ((item = set_next(a->wide, &pos)) != NULL) {
            if (wide_has(b, item)) {
                return 1;
            }
        }
    }
    uint64_t values[BATCH];
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < a->capacity; i++) {
        if (a->slots[i]) {
            values[n++] = a->slots[i];
            if (n == BATCH) {
                if (batch_meets(b, values, n)) {
                    return 1;
                }
                n = 0;
            }
        }
    }
    return batch_meets(b, values, n);
}

/* Whether an item (of any type) is in the set, for a lookup: a value batched for later,
 * or told now (wide ints; anything else is not in it). 1: met; 0: not; 2: batched. */
static inline int
look_at(PrintSet *self, PyObject *item, uint64_t *values, Py_ssize_t *n)
{
    uint64_t value;
    int kind = as_print(item, &value);
    if (kind == 1) {
        values[(*n)++] = value;
        return 2;
    }
    return kind == 0 && wide_has(self, item);
}

/* Whether one of the set's values is in `other` (a set): the values made ints. */
static int
values_in_set(PrintSet *self, PyObject *other)
{
    Py_ssize_t count = printset_len(self);
    PyObject *items = PySequence_List((PyObject *)self); /* self's iterator: no change */
    if (items == NULL) {
        return -1;
    }
    int found = 0;
    for (Py_ssize_t i = 0; i < count && found == 0; i++) {
        found = PySet_Contains(other, PyList_GET_ITEM(items, i));
    }
    Py_DECREF(items);
    return found;
}

/* A set (or frozenset) argument: its table walked, borrowed; no Python code runs. A
 * large one against a small PrintSet: the PrintSet's values looked up in it. */
static int
set_meets(PrintSet *self, PyObject *other)
{
    Py_ssize_t size = PySet_GET_SIZE(other);
    if (size == 0 || printset_len(self) == 0) {
        return 0;
    }
    if (size > 8 * printset_len(self)) {
        return values_in_set(self, other);
    }
    uint64_t values[BATCH];
    Py_ssize_t n = 0, pos = 0;
    PyObject *item;
    while ((item = set_next(other, &pos)) != NULL) {
        int found = look_at(self, item, values, &n);
        if (found == 1 || (n == BATCH && batch_meets(self, values, n))) {
            return 1;
        }
        if (n == BATCH) {
            n = 0;
        }
    }
    return batch_meets(self, values, n);
}

/* Any other iterable: read in batches (its iterator may run Python code, even change
 * this set: each batch is looked up in the table as it stands then). */
static int
iterable_meets(PrintSet *self, PyObject *iterable)
{
    PyObject *it = PyObject_GetIter(iterable);
    if (it == NULL) {
        return -1;
    }
    uint64_t values[BATCH];
    Py_ssize_t n = 0;
    int found = 0;
    PyObject *item;
    while (found == 0 && (item = PyIter_Next(it)) != NULL) {
        found = look_at(self, item, values, &n);
        Py_DECREF(item);
        if (found == 2) {
            found = n == BATCH ? batch_meets(self, values, n) : 0;
            n = n == BATCH ? 0 : n;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        return -1;
    }
    return found ? 1 : batch_meets(self, values, n);
}

/* Whether a FrozenPrints and a PrintSet share a fingerprint: the smaller side looked
 * up in the other — a small PrintSet's slots searched for in the sorted array, else the
 * array's values looked up in the table in batches (no int made either way; the
 * PrintSet's wide ints are never in a FrozenPrints). */
static int
frozen_meets_printset(const FrozenPrints *frozen, PrintSet *set)
{
    if (frozen->size == 0 || printset_len(set) == 0) {
        return 0;
    }
    if (set->capacity < frozen->size) {
        if (set->has_zero && frozen->values[0] == 0) {
            return 1;
        }
        for (Py_ssize_t i = 0; i < set->capacity; i++) {
            if (set->slots[i] && sorted_has(frozen->values, frozen->size, set->slots[i])) {
                return 1;
            }
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i < frozen->size; i += BATCH) {
        Py_ssize_t n = frozen->size - i < BATCH ? frozen->size - i : BATCH;
        if (batch_meets(set, frozen->values + i, n)) {
            return 1;
        }
    }
    return 0;
}

static PyObject *
printset_isdisjoint(PrintSet *self, PyObject *other)
{
    int meets;
    if (IS_PRINTSET(other)) {
        meets = printsets_meet(self, (PrintSet *)other);
    }
    else if (IS_FROZEN(other)) {
        meets = frozen_meets_printset((FrozenPrints *)other, self);
    }
    else if (IS_SET(other)) {
        meets = set_meets(self, other);
    }
    else {
        meets = iterable_meets(self, other);
    }
    if (meets < 0) {
        return NULL;
    }
    return PyBool_FromLong(!meets);
}

static int
printset_contains(PrintSet *self, PyObject *item)
{
    uint64_t value;
    int kind = as_print(item, &value);
    if (kind == 1) {
        return table_has(self, value);
    }
    return kind == 0 && wide_has(self, item);
}

/* ---- equality: the same ints (a set or frozenset of them compares equal) */

/* Whether every item of a set is held (the sizes equal: then the same set). */
static int
holds_all_of_set(PrintSet *self, PyObject *other)
{
    Py_ssize_t pos = 0;
    PyObject *item;
    while ((item = set_next(other, &pos)) != NULL) {
        if (!printset_contains(self, item)) {
            return 0;
        }
    }
    return 1;
}

/* Whether every value of `other` is held. */
static int
holds_all_of_printset(PrintSet *self, PrintSet *other)
{
    if (other->has_zero && !self->has_zero) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < other->capacity; i++) {
        if (other->slots[i] && !table_has(self, other->slots[i])) {
            return 0;
        }
    }
    return other->wide == NULL || PySet_GET_SIZE(other->wide) == 0 ||
           holds_all_of_set(self, other->wide);
}

/* Whether every value of the set is in `other` (a set, or a PrintSet). */
static int
all_held_by(PrintSet *self, PyObject *other)
{
    if (IS_PRINTSET(other)) {
        return holds_all_of_printset((PrintSet *)other, self);
    }
    PyObject *items = PySequence_List((PyObject *)self);
    if (items == NULL) {
        return -1;
    }
    int held = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items) && held == 1; i++) {
        held = PySet_Contains(other, PyList_GET_ITEM(items, i));
    }
    Py_DECREF(items);
    return held;
}

/* ==, != and the subset orders, as between sets: against a set, a frozenset or a
 * PrintSet (anything else: NotImplemented). */
static PyObject *
printset_richcompare(PrintSet *self, PyObject *other, int op)
{
    if (!(IS_PRINTSET(other) || IS_SET(other))) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t mine = printset_len(self);
    Py_ssize_t theirs = IS_SET(other) ? PySet_GET_SIZE(other) : printset_len((PrintSet *)other);
    int within; /* self <= other (op LE, LT) or self >= other (the rest) */
    if (op == Py_LE || op == Py_LT) {
        within = mine <= theirs && (op == Py_LE || mine < theirs) ? all_held_by(self, other) : 0;
    }
    else if (mine < theirs || (op == Py_GT && mine == theirs) ||
             ((op == Py_EQ || op == Py_NE) && mine != theirs)) {
        within = 0;
    }
    else {
        within = IS_SET(other) ? holds_all_of_set(self, other)
                               : holds_all_of_printset(self, (PrintSet *)other);
    }
    if (within < 0) {
        return NULL;
    }
    return PyBool_FromLong(op == Py_NE ? !within : within);
}

/* ---- changes */

static PyObject *
printset_update(PrintSet *self, PyObject *const *args, Py_ssize_t nargs)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (printset_update_one(self, args[i]) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
printset_ior(PyObject *self, PyObject *other)
{
    if (!IS_PRINTSET(self) || !(IS_PRINTSET(other) || IS_SET(other))) {
        Py_RETURN_NOTIMPLEMENTED; /* as set's |=: a set on the right only */
    }
    if (printset_update_one((PrintSet *)self, other) < 0) {
        return NULL;
    }
    Py_INCREF(self);
    return self;
}

static PyObject *
printset_add(PrintSet *self, PyObject *item)
{
    int kind = check_item(item);
    if (kind < 0 || (kind == 0 && ensure_wide(self) < 0)) {
        return NULL;
    }
    self->version++;
    if (add_item(self, item) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A new, empty PrintSet (its table made by the first value added); NULL on failure. */
static PrintSet *
printset_empty(void)
{
    PrintSet *self = PyObject_New(PrintSet, &PrintSetType);
    if (self != NULL) {
        self->slots = NULL;
        self->capacity = 0;
        self->used = 0;
        self->has_zero = 0;
        self->wide = NULL;
        self->version = 0;
    }
    return self;
}

static PyObject *
printset_clear(PrintSet *self, PyObject *unused)
{
    self->version++;
    PyMem_Free(self->slots);
    self->slots = NULL;
    self->capacity = 0;
    self->used = 0;
    self->has_zero = 0;
    Py_CLEAR(self->wide); /* a set of ints: freeing it runs no Python code */
    Py_RETURN_NONE;
}

static PyObject *
printset_copy(PrintSet *self, PyObject *unused)
{
    PrintSet *copy = printset_empty();
    if (copy == NULL) {
        return NULL;
    }
    copy->has_zero = self->has_zero;
    if (self->capacity) {
        copy->slots = PyMem_Malloc((size_t)self->capacity * sizeof(uint64_t));
        if (copy->slots == NULL) {
            Py_DECREF(copy);
            return PyErr_NoMemory();
        }
        memcpy(copy->slots, self->slots, (size_t)self->capacity * sizeof(uint64_t));
        copy->capacity = self->capacity;
        copy->used = self->used;
    }
    if (self->wide != NULL && (copy->wide = PySet_New(self->wide)) == NULL) {
        Py_DECREF(copy);
        return NULL;
    }
    return (PyObject *)copy;
}

/* ---- the type */

static PyObject *
printset_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *iterable = NULL;
    if (!_PyArg_NoKeywords("PrintSet", kwds) ||
        !PyArg_UnpackTuple(args, "PrintSet", 0, 1, &iterable)) {
        return NULL;
    }
    PrintSet *self = printset_empty(); /* (the type is final: type is PrintSetType) */
    if (self == NULL) {
        return NULL;
    }
    if (iterable != NULL && printset_update_one(self, iterable) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
printset_dealloc(PrintSet *self)
{
    PyMem_Free(self->slots);
    Py_XDECREF(self->wide);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t
printset_length(PrintSet *self)
{
    return printset_len(self);
}

static PyObject *
printset_iter(PrintSet *self)
{
    PrintSetIter *it = PyObject_New(PrintSetIter, &PrintSetIterType);
    if (it == NULL) {
        return NULL;
    }
    Py_INCREF(self);
    it->set = self;
    it->version = self->version;
    it->pos = -1;
    it->wide_pos = 0;
    return (PyObject *)it;
}

/* __reduce__ of both packed types: their type called with the list of their ints. */
static PyObject *
reduce_as_list(PyObject *self, PyObject *unused)
{
    PyObject *items = PySequence_List(self);
    if (items == NULL) {
        return NULL;
    }
    return Py_BuildValue("(O(N))", Py_TYPE(self), items);
}

static PyObject *
printset_sizeof(PrintSet *self, PyObject *unused)
{
    return PyLong_FromSsize_t((Py_ssize_t)sizeof(PrintSet) +
                              self->capacity * (Py_ssize_t)sizeof(uint64_t));
}

static PyObject *
printset_repr(PrintSet *self)
{
    PyObject *items = PySequence_List((PyObject *)self);
    if (items == NULL || PyList_Sort(items) < 0) {
        Py_XDECREF(items);
        return NULL;
    }
    PyObject *text = PyUnicode_FromFormat("PrintSet(%R)", items);
    Py_DECREF(items);
    return text;
}

static PyMethodDef printset_methods[] = {
    {"add", (PyCFunction)printset_add, METH_O, "add(fingerprint): as set.add (an int)"},
    {"update", (PyCFunction)(void (*)(void))printset_update, METH_FASTCALL,
     "update(*iterables): as set.update (ints; all of an iterable or none of it)"},
    {"isdisjoint", (PyCFunction)printset_isdisjoint, METH_O,
     "isdisjoint(iterable): as set.isdisjoint (its items looked up here)"},
    {"clear", (PyCFunction)printset_clear, METH_NOARGS, "clear(): as set.clear"},
    {"copy", (PyCFunction)printset_copy, METH_NOARGS, "copy(): a PrintSet of the same ints"},
    {"__reduce__", reduce_as_list, METH_NOARGS, NULL},
    {"__sizeof__", (PyCFunction)printset_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods printset_as_sequence = {
    .sq_length = (lenfunc)printset_length,
    .sq_contains = (objobjproc)printset_contains,
};

static PyNumberMethods printset_as_number = {
    .nb_inplace_or = printset_ior,
};

static PyTypeObject PrintSetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interlock.session._history.PrintSet",
    .tp_basicsize = sizeof(PrintSet),
    .tp_dealloc = (destructor)printset_dealloc,
    .tp_repr = (reprfunc)printset_repr,
    .tp_as_number = &printset_as_number,
    .tp_as_sequence = &printset_as_sequence,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PrintSet([iterable]): an exact set of fingerprints (ints), packed as uint64",
    .tp_richcompare = (richcmpfunc)printset_richcompare,
    .tp_iter = (getiterfunc)printset_iter,
    .tp_methods = printset_methods,
    .tp_new = printset_new,
};

/* ---- its iterator: the zero, the slots, the wide ints; a change under it raises */

static void
printsetiter_dealloc(PrintSetIter *it)
{
    Py_DECREF(it->set);
    PyObject_Free(it);
}

static PyObject *
printsetiter_next(PrintSetIter *it)
{
    PrintSet *set = it->set;
    if (it->version != set->version) {
        PyErr_SetString(PyExc_RuntimeError, "PrintSet changed during iteration");
        return NULL;
    }
    if (it->pos < 0) {
        it->pos = 0;
        if (set->has_zero) {
            return PyLong_FromLong(0);
        }
    }
    while (it->pos < set->capacity) {
        uint64_t value = set->slots[it->pos++];
        if (value) {
            return PyLong_FromUnsignedLongLong(value);
        }
    }
    PyObject *item;
    if (set->wide != NULL && (item = set_next(set->wide, &it->wide_pos)) != NULL) {
        Py_INCREF(item);
        return item;
    }
    return NULL;
}

static PyTypeObject PrintSetIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interlock.session._history.PrintSetIterator",
    .tp_basicsize = sizeof(PrintSetIter),
    .tp_dealloc = (destructor)printsetiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)printsetiter_next,
};

/* ---- FrozenPrints ----------------------------------------------------------------
 *
 * Why: a step's fingerprints (up to 4096 uint64 values, kept for every step of every
 * session held) as a frozenset of ints cost ~72 bytes a fingerprint — the steps' sets,
 * not the index, are the bulk of a history's memory. Packed: 8 bytes a fingerprint,
 * one allocation, and no object the garbage collector walks.
 *
 * How: a sorted array of distinct uint64 (one PyMem allocation), immutable once made.
 * It is exactly a frozenset of the same ints for what Interlock does with step
 * fingerprints: len, in, iteration (ascending), ==/!= and the subset orders against a
 * set, frozenset, PrintSet or FrozenPrints, hash (equal to the frozenset's: the
 * frozenset is made once, on the first hash(), and its hash kept), isdisjoint, &, |, -
 * (their results are frozensets), pickling. It holds only ints in [0, 2**64): made
 * from anything else it raises (TypeError for a non-int, ValueError for an int out of
 * range) and the caller keeps the frozenset. A non-int is never in it (where a
 * frozenset would find 1.0 equal to 1, or raise for an unhashable item) — Interlock
 * looks up only ints.
 */


static int
u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static inline void
insertion_sort(uint64_t *values, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++) {
        uint64_t x = values[i];
        Py_ssize_t j = i;
        for (; j > 0 && values[j - 1] > x; j--) {
            values[j] = values[j - 1];
        }
        values[j] = x;
    }
}

#define FEW 32 /* a bucket this small is insertion-sorted; a larger one by qsort */

/* Sort n values ascending. A step's fingerprints are hashes (~400 of a 2 KB result),
 * spread over the 64 bits: one counting pass on the top byte puts them in 256 buckets
 * of a few values each, each then insertion-sorted (a bucket of more than FEW — values
 * chosen to share a top byte — goes to qsort, so no input costs more than n log n).
 * With the library's qsort (a call through a function pointer a comparison) frozen()
 * of a 400-value set took 11.4 us; so, 6.3 us (the sort itself ~2 us). Returns -1
 * (MemoryError set) if the scratch array cannot be had. */
static int
sort_values(uint64_t *values, Py_ssize_t n)
{
    if (n <= FEW) {
        insertion_sort(values, n);
        return 0;
    }
    Py_ssize_t starts[257];
    Py_ssize_t at[256];
    memset(starts, 0, sizeof(starts));
    for (Py_ssize_t i = 0; i < n; i++) {
        starts[(values[i] >> 56) + 1]++;
    }
    for (int b = 0; b < 256; b++) {
        starts[b + 1] += starts[b];
        at[b] = starts[b];
    }
    uint64_t *scratch = PyMem_Malloc((size_t)n * sizeof(uint64_t));
    if (scratch == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t x = values[i];
        scratch[at[x >> 56]++] = x;
    }
    memcpy(values, scratch, (size_t)n * sizeof(uint64_t));
    PyMem_Free(scratch);
    for (int b = 0; b < 256; b++) {
        Py_ssize_t size = starts[b + 1] - starts[b];
        if (size > FEW) {
            qsort(values + starts[b], (size_t)size, sizeof(uint64_t), u64_cmp);
        }
        else if (size > 1) {
            insertion_sort(values + starts[b], size);
        }
    }
    return 0;
}

/* Sort and deduplicate n values in place; the number kept (-1: MemoryError). */
static Py_ssize_t
sort_unique(uint64_t *values, Py_ssize_t n)
{
    if (n < 2) {
        return n;
    }
    int sorted = 1;
    for (Py_ssize_t i = 1; i < n && sorted; i++) {
        sorted = values[i - 1] < values[i];
    }
    if (sorted) {
        return n;
    }
    if (sort_values(values, n) < 0) {
        return -1;
    }
    Py_ssize_t kept = 1;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (values[i] != values[kept - 1]) {
            values[kept++] = values[i];
        }
    }
    return kept;
}

/* A FrozenPrints owning `values` (n of them, sorted and distinct; freed on failure). */
static PyObject *
frozen_adopt(PyTypeObject *type, uint64_t *values, Py_ssize_t n)
{
    if (n < 0) { /* sort_unique ran out of memory */
        PyMem_Free(values);
        return NULL;
    }
    FrozenPrints *self = (FrozenPrints *)type->tp_alloc(type, 0);
    if (self == NULL) {
        PyMem_Free(values);
        return NULL;
    }
    if (n == 0) {
        PyMem_Free(values);
        values = NULL;
    }
    else if (n < 16) { /* a few were dropped as duplicates: give the rest back */
        uint64_t *fit = PyMem_Realloc(values, (size_t)n * sizeof(uint64_t));
        values = fit ? fit : values;
    }
    self->size = n;
    self->values = values;
    self->hash = -1;
    return (PyObject *)self;
}

/* Whether a value is held: a binary search. */
static inline int
frozen_has(const FrozenPrints *self, uint64_t value)
{
    return sorted_has(self->values, self->size, value);
}

/* An item as a value of a FrozenPrints: 0, or -1 with TypeError / ValueError set. */
static int
frozen_value(PyObject *item, uint64_t *value)
{
    int kind = as_print(item, value);
    if (kind == 1) {
        return 0;
    }
    if (kind == 0) {
        PyErr_SetString(PyExc_ValueError, "a fingerprint is an int in [0, 2**64)");
    }
    else {
        PyErr_Format(PyExc_TypeError, "a fingerprint is an int, not %.100s",
                     Py_TYPE(item)->tp_name);
    }
    return -1;
}

static PyObject *
frozen_from_iterable(PyTypeObject *type, PyObject *iterable)
{
    uint64_t *values;
    Py_ssize_t n = 0;
    if (IS_FROZEN(iterable)) {
        FrozenPrints *other = (FrozenPrints *)iterable;
        if (type == &FrozenPrintsType) {
            Py_INCREF(iterable);
            return iterable;
        }
        values = PyMem_Malloc((size_t)(other->size ? other->size : 1) * sizeof(uint64_t));
        if (values == NULL) {
            return PyErr_NoMemory();
        }
        if (other->size) {
            memcpy(values, other->values, (size_t)other->size * sizeof(uint64_t));
        }
        return frozen_adopt(type, values, other->size);
    }
    if (IS_PRINTSET(iterable)) {
        PrintSet *ps = (PrintSet *)iterable;
        if (ps->wide != NULL && PySet_GET_SIZE(ps->wide)) {
            PyErr_SetString(PyExc_ValueError, "a fingerprint is an int in [0, 2**64)");
            return NULL;
        }
        values = PyMem_Malloc((size_t)(ps->used + 1) * sizeof(uint64_t));
        if (values == NULL) {
            return PyErr_NoMemory();
        }
        if (ps->has_zero) {
            values[n++] = 0;
        }
        for (Py_ssize_t i = 0; i < ps->capacity; i++) {
            if (ps->slots[i]) {
                values[n++] = ps->slots[i];
            }
        }
        return frozen_adopt(type, values, sort_unique(values, n));
    }
    if (IS_SET(iterable)) { /* its table walked, borrowed: no Python code runs */
        values = PyMem_Malloc((size_t)(PySet_GET_SIZE(iterable) + 1) * sizeof(uint64_t));
        if (values == NULL) {
            return PyErr_NoMemory();
        }
        Py_ssize_t pos = 0;
        PyObject *item;
        while ((item = set_next(iterable, &pos)) != NULL) {
            if (frozen_value(item, &values[n++]) < 0) {
                PyMem_Free(values);
                return NULL;
            }
        }
        return frozen_adopt(type, values, sort_unique(values, n));
    }
    PyObject *seq = PySequence_Fast(iterable, "FrozenPrints() takes an iterable of ints");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *const *items = PySequence_Fast_ITEMS(seq);
    values = PyMem_Malloc((size_t)(count + 1) * sizeof(uint64_t));
    if (values == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (; n < count; n++) {
        if (frozen_value(items[n], &values[n]) < 0) {
            PyMem_Free(values);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return frozen_adopt(type, values, sort_unique(values, n));
}

static PyObject *
frozen_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *iterable = NULL;
    if (!_PyArg_NoKeywords("FrozenPrints", kwds) ||
        !PyArg_UnpackTuple(args, "FrozenPrints", 0, 1, &iterable)) {
        return NULL;
    }
    if (iterable == NULL) {
        return frozen_adopt(type, NULL, 0);
    }
    return frozen_from_iterable(type, iterable);
}

/* frozen_from_bytes(raw) -> FrozenPrints: native-order uint64 values, in any order,
 * repeats allowed. */
static PyObject *
frozen_from_bytes(PyObject *module, PyObject *raw)
{
    if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) % sizeof(uint64_t)) {
        PyErr_SetString(PyExc_TypeError,
                        "frozen_from_bytes(raw): raw is bytes of uint64 values");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(raw) / (Py_ssize_t)sizeof(uint64_t);
    uint64_t *values = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    if (values == NULL) {
        return PyErr_NoMemory();
    }
    if (n) {
        memcpy(values, PyBytes_AS_STRING(raw), (size_t)n * sizeof(uint64_t));
    }
    return frozen_adopt(&FrozenPrintsType, values, sort_unique(values, n));
}

static void
frozen_dealloc(FrozenPrints *self)
{
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t
frozen_length(FrozenPrints *self)
{
    return self->size;
}

static int
frozen_contains(FrozenPrints *self, PyObject *item)
{
    uint64_t value;
    return as_print(item, &value) == 1 && frozen_has(self, value);
}

/* The ints, ascending, in a new frozenset. */
static PyObject *
frozen_as_frozenset(FrozenPrints *self)
{
    return PyFrozenSet_New((PyObject *)self);
}

static Py_hash_t
frozen_hash(FrozenPrints *self)
{
    if (self->hash == -1) {
        PyObject *set = frozen_as_frozenset(self);
        if (set == NULL) {
            return -1;
        }
        self->hash = PyObject_Hash(set);
        Py_DECREF(set);
    }
    return self->hash;
}

/* How many items of `other` (a set, frozenset, PrintSet or FrozenPrints) are held. */
static Py_ssize_t
frozen_common(FrozenPrints *self, PyObject *other)
{
    Py_ssize_t common = 0;
    if (IS_FROZEN(other)) {
        FrozenPrints *b = (FrozenPrints *)other;
        Py_ssize_t i = 0, j = 0;
        while (i < self->size && j < b->size) {
            uint64_t x = self->values[i], y = b->values[j];
            common += x == y;
            i += x <= y;
            j += y <= x;
        }
    }
    else if (IS_PRINTSET(other)) { /* its wide ints are never here */
        for (Py_ssize_t i = 0; i < self->size; i++) {
            common += table_has((PrintSet *)other, self->values[i]);
        }
    }
    else {
        Py_ssize_t pos = 0;
        PyObject *item;
        while ((item = set_next(other, &pos)) != NULL) {
            common += frozen_contains(self, item);
        }
    }
    return common;
}

static Py_ssize_t
any_len(PyObject *o)
{
    if (IS_FROZEN(o)) {
        return ((FrozenPrints *)o)->size;
    }
    if (IS_PRINTSET(o)) {
        return printset_len((PrintSet *)o);
    }
    return PySet_GET_SIZE(o);
}

static PyObject *
frozen_richcompare(FrozenPrints *self, PyObject *other, int op)
{
    if (!(IS_FROZEN(other) || IS_PRINTSET(other) || IS_SET(other))) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t mine = self->size, theirs = any_len(other);
    int result;
    switch (op) {
    case Py_EQ:
    case Py_NE:
        result = mine == theirs && frozen_common(self, other) == mine;
        if (op == Py_NE) {
            result = !result;
        }
        break;
    case Py_LE: /* self within other */
        result = mine <= theirs && frozen_common(self, other) == mine;
        break;
    case Py_LT:
        result = mine < theirs && frozen_common(self, other) == mine;
        break;
    case Py_GE: /* other within self */
        result = mine >= theirs && frozen_common(self, other) == theirs;
        break;
    case Py_GT:
        result = mine > theirs && frozen_common(self, other) == theirs;
        break;
    default:
        Py_RETURN_NOTIMPLEMENTED;
    }
    return PyBool_FromLong(result);
}

/* Whether a value of self is in the set `other`, each made an int (self the smaller). */
static int
frozen_values_in_set(FrozenPrints *self, PyObject *other)
{
    for (Py_ssize_t i = 0; i < self->size; i++) {
        PyObject *item = PyLong_FromUnsignedLongLong(self->values[i]);
        if (item == NULL) {
            return -1;
        }
        int found = PySet_Contains(other, item);
        Py_DECREF(item);
        if (found != 0) {
            return found;
        }
    }
    return 0;
}

static PyObject *
frozen_isdisjoint(FrozenPrints *self, PyObject *other)
{
    int meets = 0;
    if (IS_FROZEN(other)) {
        meets = frozen_common(self, other) != 0;
    }
    else if (IS_PRINTSET(other)) {
        meets = frozen_meets_printset(self, (PrintSet *)other);
    }
    else if (IS_SET(other)) {
        if (self->size == 0 || PySet_GET_SIZE(other) == 0) {
            meets = 0;
        }
        else if (self->size < PySet_GET_SIZE(other)) {
            meets = frozen_values_in_set(self, other);
        }
        else {
            Py_ssize_t pos = 0;
            PyObject *item;
            while (!meets && (item = set_next(other, &pos)) != NULL) {
                meets = frozen_contains(self, item);
            }
        }
    }
    else {
        PyObject *it = PyObject_GetIter(other);
        if (it == NULL) {
            return NULL;
        }
        PyObject *item;
        while (!meets && (item = PyIter_Next(it)) != NULL) {
            meets = frozen_contains(self, item);
            Py_DECREF(item);
        }
        Py_DECREF(it);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    if (meets < 0) {
        return NULL;
    }
    return PyBool_FromLong(!meets);
}

/* ---- &, |, - with a set, frozenset or FrozenPrints on either side: a frozenset */

static int
is_operand(PyObject *o)
{
    return IS_FROZEN(o) || IS_SET(o);
}

/* A frozenset of the values of a FrozenPrints where `keep` (1 to keep each value not
 * in `other`, 0 each value in it); `other` a set or FrozenPrints. */
static PyObject *
frozen_select(FrozenPrints *self, PyObject *other, int keep_absent)
{
    PyObject *result = PyFrozenSet_New(NULL);
    if (result == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->size; i++) {
        uint64_t value = self->values[i];
        PyObject *item = PyLong_FromUnsignedLongLong(value);
        if (item == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        int in = IS_FROZEN(other) ? frozen_has((FrozenPrints *)other, value)
                                  : PySet_Contains(other, item);
        if (in < 0 || (in != keep_absent && PySet_Add(result, item) < 0)) {
            Py_DECREF(item);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(item);
    }
    return result;
}

/* A frozenset of the items of the set `set` that are (keep_held) or are not in self. */
static PyObject *
set_select(PyObject *set, FrozenPrints *self, int keep_held)
{
    PyObject *result = PyFrozenSet_New(NULL);
    if (result == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *item;
    while ((item = set_next(set, &pos)) != NULL) {
        if (frozen_contains(self, item) == keep_held && PySet_Add(result, item) < 0) {
            Py_DECREF(result);
            return NULL;
        }
    }
    return result;
}

static PyObject *
frozen_and(PyObject *a, PyObject *b)
{
    if (!is_operand(a) || !is_operand(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (IS_FROZEN(a) && IS_FROZEN(b)) {
        return frozen_select((FrozenPrints *)a, b, 0);
    }
    if (IS_FROZEN(a)) { /* the set's own items kept: no int made */
        return set_select(b, (FrozenPrints *)a, 1);
    }
    return set_select(a, (FrozenPrints *)b, 1);
}

static PyObject *
frozen_sub(PyObject *a, PyObject *b)
{
    if (!is_operand(a) || !is_operand(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (IS_FROZEN(a)) {
        return frozen_select((FrozenPrints *)a, b, 1);
    }
    return set_select(a, (FrozenPrints *)b, 0);
}

static PyObject *
frozen_or(PyObject *a, PyObject *b)
{
    if (!is_operand(a) || !is_operand(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* the other side's items (a's when both are packed), then the packed one's values */
    PyObject *result = PyFrozenSet_New(IS_FROZEN(b) ? a : b);
    if (result == NULL) {
        return NULL;
    }
    FrozenPrints *self = (FrozenPrints *)(IS_FROZEN(b) ? b : a);
    for (Py_ssize_t i = 0; i < self->size; i++) {
        PyObject *item = PyLong_FromUnsignedLongLong(self->values[i]);
        if (item == NULL || PySet_Add(result, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(item);
    }
    return result;
}

/* ---- the rest of the type */

static PyObject *
frozen_iter(FrozenPrints *self)
{
    FrozenPrintsIter *it = PyObject_New(FrozenPrintsIter, &FrozenPrintsIterType);
    if (it == NULL) {
        return NULL;
    }
    Py_INCREF(self);
    it->set = self;
    it->pos = 0;
    return (PyObject *)it;
}

/* The values as little-endian uint64 bytes, ascending (packing.pack's form). */
static PyObject *
frozen_to_bytes(FrozenPrints *self, PyObject *unused)
{
    PyObject *raw = PyBytes_FromStringAndSize(NULL, self->size * (Py_ssize_t)sizeof(uint64_t));
    if (raw == NULL) {
        return NULL;
    }
    unsigned char *at = (unsigned char *)PyBytes_AS_STRING(raw);
#if PY_LITTLE_ENDIAN
    if (self->size) {
        memcpy(at, self->values, (size_t)self->size * sizeof(uint64_t));
    }
#else
    for (Py_ssize_t i = 0; i < self->size; i++) {
        uint64_t v = self->values[i];
        for (int k = 0; k < 8; k++) {
            *at++ = (unsigned char)(v >> (8 * k));
        }
    }
#endif
    return raw;
}

static PyObject *
frozen_sizeof(FrozenPrints *self, PyObject *unused)
{
    return PyLong_FromSsize_t((Py_ssize_t)sizeof(FrozenPrints) +
                              self->size * (Py_ssize_t)sizeof(uint64_t));
}

static PyObject *
frozen_repr(FrozenPrints *self)
{
    PyObject *items = PySequence_List((PyObject *)self);
    if (items == NULL) {
        return NULL;
    }
    PyObject *text = PyUnicode_FromFormat("FrozenPrints(%R)", items);
    Py_DECREF(items);
    return text;
}

static PyMethodDef frozen_methods[] = {
    {"isdisjoint", (PyCFunction)frozen_isdisjoint, METH_O,
     "isdisjoint(iterable): as frozenset.isdisjoint"},
    {"to_bytes", (PyCFunction)frozen_to_bytes, METH_NOARGS,
     "to_bytes() -> bytes: the values as sorted little-endian uint64 (packing.pack's form)"},
    {"__reduce__", reduce_as_list, METH_NOARGS, NULL},
    {"__sizeof__", (PyCFunction)frozen_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods frozen_as_sequence = {
    .sq_length = (lenfunc)frozen_length,
    .sq_contains = (objobjproc)frozen_contains,
};

static PyNumberMethods frozen_as_number = {
    .nb_and = frozen_and,
    .nb_or = frozen_or,
    .nb_subtract = frozen_sub,
};

static PyTypeObject FrozenPrintsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interlock.session._history.FrozenPrints",
    .tp_basicsize = sizeof(FrozenPrints),
    .tp_dealloc = (destructor)frozen_dealloc,
    .tp_repr = (reprfunc)frozen_repr,
    .tp_as_number = &frozen_as_number,
    .tp_as_sequence = &frozen_as_sequence,
    .tp_hash = (hashfunc)frozen_hash,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FrozenPrints([iterable]): an immutable set of fingerprints (ints in "
              "[0, 2**64)), a sorted uint64 array; equal and hashed as the frozenset",
    .tp_richcompare = (richcmpfunc)frozen_richcompare,
    .tp_iter = (getiterfunc)frozen_iter,
    .tp_methods = frozen_methods,
    .tp_new = frozen_new,
};

static void
frozeniter_dealloc(FrozenPrintsIter *it)
{
    Py_DECREF(it->set);
    PyObject_Free(it);
}

static PyObject *
frozeniter_next(FrozenPrintsIter *it)
{
    if (it->pos < it->set->size) {
        return PyLong_FromUnsignedLongLong(it->set->values[it->pos++]);
    }
    return NULL;
}

static PyTypeObject FrozenPrintsIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interlock.session._history.FrozenPrintsIterator",
    .tp_basicsize = sizeof(FrozenPrintsIter),
    .tp_dealloc = (destructor)frozeniter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)frozeniter_next,
};

/* The process's key: 8 bytes of os.urandom. */
static int
draw_key(void)
{
    PyObject *os = PyImport_ImportModule("os");
    PyObject *bytes = os ? PyObject_CallMethod(os, "urandom", "i", 8) : NULL;
    Py_XDECREF(os);
    if (bytes == NULL) {
        return -1;
    }
    memcpy(&print_key, PyBytes_AS_STRING(bytes), sizeof(print_key));
    Py_DECREF(bytes);
    return 0;
}

/* untracked(prints) -> prints: a frozenset whose every item is an exact int taken
 * out of the garbage collector's lists (PyObject_GC_UnTrack), as CPython itself does
 * for tuples and dicts of atoms (_PyTuple_MaybeUntrack): such a set can be in no
 * reference cycle (an int refers to nothing, and a frozenset never changes), so the
 * collector has nothing to find in it — yet each full collection walked every item
 * of every step's fingerprints (~100 ms a million fingerprints held). Anything else
 * (a set, a frozenset holding a non-int) is returned as it is, still tracked. */
static PyObject *
untracked(PyObject *module, PyObject *prints)
{
    if (PyFrozenSet_CheckExact(prints) && PyObject_GC_IsTracked(prints)) {
        Py_ssize_t pos = 0;
        PyObject *item;
        int atoms = 1;
        while ((item = set_next(prints, &pos)) != NULL) {
            if (!PyLong_CheckExact(item)) {
                atoms = 0;
                break;
            }
        }
        if (atoms) {
            PyObject_GC_UnTrack(prints);
        }
    }
    Py_INCREF(prints);
    return prints;
}

/* The shared empty frozenset that frozen() gives for an empty set (history.py's
 * EMPTY_FINGERPRINTS). */
static PyObject *empty_prints;

/* frozen(prints) -> prints: a step's fingerprints as a history keeps them. A set or
 * frozenset (exactly those types) whose every item is an exact int in [0, 2**64) is
 * made a FrozenPrints (empty: the shared empty frozenset); anything else is as
 * untracked() gives it (a frozenset of ints out of the collector's lists), so a value
 * it cannot pack is kept as it came, never refused nor changed. */
static PyObject *
frozen(PyObject *module, PyObject *prints)
{
    if (IS_FROZEN(prints) || !PyAnySet_CheckExact(prints)) {
        Py_INCREF(prints);
        return prints;
    }
    Py_ssize_t n = PySet_GET_SIZE(prints);
    if (n == 0) {
        Py_INCREF(empty_prints);
        return empty_prints;
    }
    uint64_t *values = PyMem_Malloc((size_t)n * sizeof(uint64_t));
    if (values == NULL) {
        return PyErr_NoMemory();
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *item;
    while ((item = set_next(prints, &pos)) != NULL) {
        if (i == n || !PyLong_CheckExact(item) || as_print(item, &values[i++]) != 1) {
            PyMem_Free(values);
            return untracked(module, prints);
        }
    }
    return frozen_adopt(&FrozenPrintsType, values, sort_unique(values, i));
}

/* packed(raw) -> PrintSet: the fingerprints packed in raw — bytes of native-order
 * uint64 values, as _speedups hands an argument's probe over (no int object made for
 * any of them: a probe of a value seen once is made, tested and freed, and its ints
 * were most of that). Values may repeat (they are added as a set adds them). */
static PyObject *
packed(PyObject *module, PyObject *raw)
{
    if (!PyBytes_CheckExact(raw) || PyBytes_GET_SIZE(raw) % sizeof(uint64_t)) {
        PyErr_SetString(PyExc_TypeError, "packed(raw): raw is bytes of uint64 values");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(raw) / (Py_ssize_t)sizeof(uint64_t);
    PrintSet *self = printset_empty();
    if (self == NULL) {
        return NULL;
    }
    if (n && table_reserve(self, n) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    const char *at = PyBytes_AS_STRING(raw);
    size_t mask = (size_t)self->capacity - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t value;
        memcpy(&value, at + i * (Py_ssize_t)sizeof(uint64_t), sizeof(value));
        if (value == 0) {
            self->has_zero = 1;
        }
        else {
            self->used += slots_put(self->slots, mask, value);
        }
    }
    return (PyObject *)self;
}

/* -- a session's argument tails (interlock.session.tails) --------------------------- */

/* The Python reference is interlock/session/tails.py (ArgumentTails._stepped, _step,
 * _across, _last_run, _PLAIN): these give the same states and the same seams, value for
 * value (tests/session/test_tails_speedups.py). TAILS_KEPT is tails.TAIL. */
#define TAILS_KEPT 48

static int
tails_is_space(Py_UCS4 c)
{
    return Py_UNICODE_ISSPACE(c);
}

/* The index just past the last whitespace of text[start:end], or -1 when it has none. */
static Py_ssize_t
tails_after_last_space(int kind, const void *data, Py_ssize_t start, Py_ssize_t end)
{
    for (Py_ssize_t i = end - 1; i >= start; i--) {
        if (tails_is_space(PyUnicode_READ(kind, data, i))) {
            return i + 1;
        }
    }
    return -1;
}

/* _last_run: the run text ends with, within its last TAILS_KEPT characters ("" when it
 * ends with whitespace), or NULL with no error set when those are one run. */
static PyObject *
tails_last_run(PyObject *text, int *one)
{
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    Py_ssize_t start = size > TAILS_KEPT ? size - TAILS_KEPT : 0;
    Py_ssize_t after = tails_after_last_space(PyUnicode_KIND(text), PyUnicode_DATA(text),
                                              start, size);
    if (after < 0) {
        *one = 1;
        return NULL;
    }
    *one = 0;
    return PyUnicode_Substring(text, after, size);
}

/* The first run of text[:TAILS_KEPT] (NULL with *none set when it is all whitespace) and
 * whether that run is the whole of text[:TAILS_KEPT]. */
static PyObject *
tails_first_run(PyObject *text, int *none, int *whole)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    Py_ssize_t end = size < TAILS_KEPT ? size : TAILS_KEPT;
    Py_ssize_t i = 0;
    while (i < end && tails_is_space(PyUnicode_READ(kind, data, i))) {
        i++;
    }
    if (i == end) {
        *none = 1;
        *whole = 0;
        return NULL;
    }
    Py_ssize_t j = i;
    while (j < end && !tails_is_space(PyUnicode_READ(kind, data, j))) {
        j++;
    }
    *none = 0;
    *whole = i == 0 && j == end;
    return PyUnicode_Substring(text, i, j);
}

/* (a + b)[-TAILS_KEPT:] */
static PyObject *
tails_joined_end(PyObject *a, PyObject *b)
{
    Py_ssize_t bn = PyUnicode_GET_LENGTH(b);
    if (bn >= TAILS_KEPT) {
        return PyUnicode_Substring(b, bn - TAILS_KEPT, bn);
    }
    Py_ssize_t an = PyUnicode_GET_LENGTH(a);
    Py_ssize_t keep = TAILS_KEPT - bn;
    PyObject *left = PyUnicode_Substring(a, an > keep ? an - keep : 0, an);
    if (left == NULL) {
        return NULL;
    }
    PyObject *out = PyUnicode_Concat(left, b);
    Py_DECREF(left);
    return out;
}

/* (a + b)[:TAILS_KEPT] */
static PyObject *
tails_joined_start(PyObject *a, PyObject *b)
{
    Py_ssize_t an = PyUnicode_GET_LENGTH(a);
    if (an >= TAILS_KEPT) {
        return PyUnicode_Substring(a, 0, TAILS_KEPT);
    }
    PyObject *right = PyUnicode_Substring(b, 0, TAILS_KEPT - an);
    if (right == NULL) {
        return NULL;
    }
    PyObject *out = PyUnicode_Concat(a, right);
    Py_DECREF(right);
    return out;
}

/* Append (name, left, right) to joined. Steals neither. */
static int
tails_seam(PyObject *joined, PyObject *name, PyObject *left, PyObject *right)
{
    PyObject *seam = PyTuple_Pack(3, name, left, right);
    if (seam == NULL) {
        return -1;
    }
    int failed = PyList_Append(joined, seam);
    Py_DECREF(seam);
    return failed;
}

/* ArgumentTails._stepped: the state after text (a new reference), its seams appended to
 * joined under name. state is a (tail, first | None, head) tuple of exact strs. */
static PyObject *
tails_stepped(PyObject *state, PyObject *text, PyObject *name, PyObject *joined)
{
    PyObject *tail = PyTuple_GET_ITEM(state, 0);
    PyObject *first = PyTuple_GET_ITEM(state, 1);
    PyObject *head = PyTuple_GET_ITEM(state, 2);
    PyObject *last = NULL, *run = NULL, *start = NULL, *end = NULL, *out = NULL;
    PyObject *new_tail = NULL, *new_head = NULL;
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    int last_none, runs_none, run_whole;

    last = tails_last_run(text, &last_none);
    if (last == NULL && !last_none) {
        return NULL;
    }
    run = tails_first_run(text, &runs_none, &run_whole);
    if (run == NULL && !runs_none) {
        goto done;
    }
    start = PyUnicode_Substring(text, 0, TAILS_KEPT);
    end = PyUnicode_Substring(text, size > TAILS_KEPT ? size - TAILS_KEPT : 0, size);
    if (start == NULL || end == NULL) {
        goto done;
    }
    if (PyUnicode_GET_LENGTH(tail)) {
        if (tails_seam(joined, name, tail, start) < 0) {
            goto done;
        }
        if (last != NULL && PyUnicode_GET_LENGTH(last) &&
            tails_seam(joined, name, tail, last) < 0) {
            goto done;
        }
    }
    if (PyUnicode_GET_LENGTH(head) &&
        tails_seam(joined, name, last == NULL ? end : last, head) < 0) {
        goto done;
    }
    if (last == NULL) {
        new_tail = tails_joined_end(tail, end);
    }
    else {
        new_tail = Py_NewRef(last);
    }
    if (new_tail == NULL) {
        goto done;
    }
    if (last == NULL && run_whole) { /* one run: the head grows to the left */
        new_head = tails_joined_start(text, head);
    }
    else {
        new_head = run != NULL ? Py_NewRef(run) : PyUnicode_New(0, 0);
    }
    if (new_head == NULL) {
        goto done;
    }
    PyObject *new_first = Py_None;
    if (last != NULL && run != NULL) {
        if (first != Py_None && PyUnicode_GET_LENGTH(first) &&
            tails_seam(joined, name, first, run) < 0) {
            goto done;
        }
        new_first = run;
    }
    out = PyTuple_Pack(3, new_tail, new_first, new_head);
done:
    Py_XDECREF(last);
    Py_XDECREF(run);
    Py_XDECREF(start);
    Py_XDECREF(end);
    Py_XDECREF(new_tail);
    Py_XDECREF(new_head);
    return out;
}

/* tails._PLAIN: only [a-z.@/_:-] */
static int
tails_plain(PyObject *text)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t i = 0; i < size; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (!((c >= 'a' && c <= 'z') || c == '.' || c == '@' || c == '/' || c == '_' ||
              c == ':' || c == '-')) {
            return 0;
        }
    }
    return 1;
}

/* A piece for ACROSS: (name, state before, state after), kept while a call is read. */
typedef struct {
    PyObject *name;
    PyObject *text;
    PyObject *before;
    PyObject *after;
} tails_piece;

typedef struct {
    tails_piece *items;
    Py_ssize_t size;
    Py_ssize_t room;
} tails_pieces;

static void
tails_pieces_clear(tails_pieces *pieces)
{
    for (Py_ssize_t i = 0; i < pieces->size; i++) {
        Py_DECREF(pieces->items[i].name);
        Py_DECREF(pieces->items[i].text);
        Py_DECREF(pieces->items[i].before);
        Py_DECREF(pieces->items[i].after);
    }
    PyMem_Free(pieces->items);
    pieces->items = NULL;
    pieces->size = pieces->room = 0;
}

static int
tails_pieces_add(tails_pieces *pieces, PyObject *name, PyObject *text, PyObject *before,
                 PyObject *after)
{
    if (pieces->size == pieces->room) {
        Py_ssize_t room = pieces->room ? pieces->room * 2 : 8;
        tails_piece *grown = PyMem_Realloc(pieces->items, (size_t)room * sizeof(tails_piece));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        pieces->items = grown;
        pieces->room = room;
    }
    tails_piece *piece = &pieces->items[pieces->size++];
    piece->name = Py_NewRef(name);
    piece->text = Py_NewRef(text);
    piece->before = Py_NewRef(before);
    piece->after = Py_NewRef(after);
    return 0;
}

/* ArgumentTails._step: 0, or -1 with an error set. */
static int
tails_step(PyObject *tails, PyObject *name, PyObject *stream, PyObject *text,
           PyObject *joined, tails_pieces *pieces, PyObject *empty, Py_ssize_t max_names,
           PyObject *across, PyObject *across_decoded)
{
    if (PyUnicode_GET_LENGTH(text) == 0) {
        return 0;
    }
    PyObject *state = PyDict_GetItemWithError(tails, stream); /* borrowed */
    if (state != NULL) {
        Py_INCREF(state);
        if (PyDict_DelItem(tails, stream) < 0) { /* put back last: the most recent */
            Py_DECREF(state);
            return -1;
        }
    }
    else {
        if (PyErr_Occurred()) {
            return -1;
        }
        int has_across = PyDict_Contains(tails, across);
        int has_decoded = has_across < 0 ? -1 : PyDict_Contains(tails, across_decoded);
        if (has_decoded < 0) {
            return -1;
        }
        if (PyDict_GET_SIZE(tails) - has_across - has_decoded >= max_names) {
            if (max_names <= 0) {
                return 0;
            }
            /* the least recently stepped stream leaves (never ACROSS) */
            Py_ssize_t at = 0;
            PyObject *key, *value;
            while (PyDict_Next(tails, &at, &key, &value)) {
                int same = PyUnicode_Compare(key, across);
                int also = same == -1 && PyErr_Occurred() ? -1
                                                          : PyUnicode_Compare(key, across_decoded);
                if (also == -1 && PyErr_Occurred()) {
                    return -1;
                }
                if (same != 0 && also != 0) {
                    if (PyDict_DelItem(tails, key) < 0) {
                        return -1;
                    }
                    break;
                }
            }
        }
        state = Py_NewRef(empty);
    }
    if (!PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != 3 ||
        !PyUnicode_CheckExact(PyTuple_GET_ITEM(state, 0)) ||
        !PyUnicode_CheckExact(PyTuple_GET_ITEM(state, 2)) ||
        (PyTuple_GET_ITEM(state, 1) != Py_None &&
         !PyUnicode_CheckExact(PyTuple_GET_ITEM(state, 1)))) {
        PyErr_SetString(PyExc_TypeError, "a stream's state is (str, str | None, str)");
        Py_DECREF(state);
        return -1;
    }
    PyObject *after = tails_stepped(state, text, name, joined);
    if (after == NULL || PyDict_SetItem(tails, stream, after) < 0) {
        Py_XDECREF(after);
        Py_DECREF(state);
        return -1;
    }
    int failed = 0;
    if (PyUnicode_GET_LENGTH(text) <= TAILS_KEPT) {
        PyObject *tail = PyTuple_GET_ITEM(state, 0);
        Py_ssize_t n = PyUnicode_GET_LENGTH(text);
        int again = n <= PyUnicode_GET_LENGTH(tail) &&
                    PyUnicode_Tailmatch(tail, text, 0, PY_SSIZE_T_MAX, 1) == 1;
        if (pieces != NULL && !again &&
            tails_after_last_space(PyUnicode_KIND(text), PyUnicode_DATA(text), 0, n) < 0 &&
            !tails_plain(text)) {
            failed = tails_pieces_add(pieces, name, text, state, after);
        }
    }
    Py_DECREF(after);
    Py_DECREF(state);
    return failed;
}

/* ArgumentTails._across */
static int
tails_across(PyObject *tails, tails_piece *piece, PyObject *joined, PyObject *across,
             PyObject *empty)
{
    PyObject *state = PyDict_GetItemWithError(tails, across); /* borrowed */
    if (state == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        state = empty;
    }
    Py_INCREF(state);
    int same = PyObject_RichCompareBool(state, piece->before, Py_EQ);
    int failed = same < 0;
    if (same == 1) {
        failed = PyDict_SetItem(tails, across, piece->after) < 0;
    }
    else if (same == 0) {
        PyObject *after = tails_stepped(state, piece->text, piece->name, joined);
        failed = after == NULL || PyDict_SetItem(tails, across, after) < 0;
        Py_XDECREF(after);
    }
    Py_DECREF(state);
    return failed ? -1 : 0;
}

/* What one advance_tails call reads: its bounds and what it has made so far. */
typedef struct {
    PyObject *tails;
    PyObject *url_parts;
    PyObject *joined;
    PyObject *empty;
    PyObject *across;
    PyObject *decode;
    PyObject *across_decoded;
    tails_pieces pieces;
    tails_pieces decoded_pieces;
    Py_ssize_t max_names;
    Py_ssize_t max_depth;
    Py_ssize_t budget; /* values still to step this call */
} tails_call;

/* Whether text reads as an http(s) URL: text[:4].lower() == "http" and "://" in
 * text[4:8] (no character outside ASCII lowers to one of "http"). */
static int
tails_is_url(PyObject *text)
{
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    if (size < 7) {
        return 0;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    static const char http[] = "http";
    for (int k = 0; k < 4; k++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, k);
        if (c >= 'A' && c <= 'Z') {
            c += 'a' - 'A';
        }
        if (c != (Py_UCS4)http[k]) {
            return 0;
        }
    }
    Py_ssize_t stop = size < 8 ? size : 8;
    for (Py_ssize_t k = 4; k + 3 <= stop; k++) {
        if (PyUnicode_READ(kind, data, k) == ':' && PyUnicode_READ(kind, data, k + 1) == '/' &&
            PyUnicode_READ(kind, data, k + 2) == '/') {
            return 1;
        }
    }
    return 0;
}

/* What tails._text_of and _decoded's last test make of raw bytes: -1 when they are not
 * UTF-8 (bytes.decode() raises: _text_of gives None, and the next encoding is tried);
 * 0 when they are, but empty or holding an ASCII character that is not printable (the
 * decoding is None); 1 otherwise (characters not ASCII: str.isprintable decides). */
static int
tails_text_of(const unsigned char *b, Py_ssize_t n)
{
    int printable = n > 0;
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = b[i];
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f) {
                printable = 0;
            }
            i++;
            continue;
        }
        Py_ssize_t need;
        unsigned char low = 0x80, high = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        }
        else if (c == 0xE0) {
            need = 2;
            low = 0xA0;
        }
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            need = 2;
        }
        else if (c == 0xED) { /* no surrogates */
            need = 2;
            high = 0x9F;
        }
        else if (c == 0xF0) {
            need = 3;
            low = 0x90;
        }
        else if (c >= 0xF1 && c <= 0xF3) {
            need = 3;
        }
        else if (c == 0xF4) { /* at most U+10FFFF */
            need = 3;
            high = 0x8F;
        }
        else {
            return -1;
        }
        if (n - i - 1 < need || b[i + 1] < low || b[i + 1] > high) {
            return -1;
        }
        for (Py_ssize_t k = 2; k <= need; k++) {
            if (b[i + k] < 0x80 || b[i + k] > 0xBF) {
                return -1;
            }
        }
        i += need + 1;
    }
    return printable;
}

static int
tails_hex_value(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* base64, either alphabet (tails._b64 reads "-" as "+" and "_" as "/") */
static int
tails_b64_value(unsigned char c)
{
    return c >= 'A' && c <= 'Z'   ? c - 'A'
           : c >= 'a' && c <= 'z' ? c - 'a' + 26
           : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+' || c == '-' ? 62
           : c == '/' || c == '_' ? 63
                                  : -1;
}

/* base32 of either case (tails._b32 upper-cases it) */
static int
tails_b32_value(unsigned char c)
{
    return c >= 'A' && c <= 'Z'   ? c - 'A'
           : c >= 'a' && c <= 'z' ? c - 'a'
           : c >= '2' && c <= '7' ? c - '2' + 26
                                  : -1;
}

/* base32's extended hex alphabet, of either case (RFC 4648: 0-9A-V) */
static int
tails_b32hex_value(unsigned char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'V' ? c - 'A' + 10
           : c >= 'a' && c <= 'v' ? c - 'a' + 10
                                  : -1;
}

/* The bytes src[0:n] decode to, n digits of bits each (hex 4, base32 5, base64 6), into
 * out: every whole byte, the bits left over dropped (as binascii and base64 drop them).
 * Their number. */
static Py_ssize_t
tails_unpack(const unsigned char *src, Py_ssize_t n, int bits, int (*value)(unsigned char),
             unsigned char *out)
{
    uint32_t acc = 0;
    int held = 0;
    Py_ssize_t made = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        acc = (acc << bits) | (uint32_t)value(src[i]);
        held += bits;
        if (held >= 8) {
            held -= 8;
            out[made++] = (unsigned char)(acc >> held);
            acc &= (1u << held) - 1;
        }
    }
    return made;
}

/* Whether tails._decoded_whole may read src[0:n] (ASCII) as hex, base64, base32 or
 * base32's extended hex alphabet to printable text: it decodes it as they do, in their
 * order (the first that is UTF-8 decides), and leaves to Python only what may be
 * (tails_text_of: 1). buffer has room for n bytes. */
static int
tails_encoding_may_decode(const unsigned char *src, Py_ssize_t n, unsigned char *buffer)
{
    if (n < 8) {
        return 0;
    }
    Py_ssize_t body = n, hexes = 0, b64 = 0, b32 = 0, b32hex = 0;
    while (body > 0 && src[body - 1] == '=') {
        body--;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = src[i];
        hexes += tails_hex_value(c) >= 0;
        if (i < body) {
            b64 += tails_b64_value(c) >= 0;
            b32 += tails_b32_value(c) >= 0;
            b32hex += tails_b32hex_value(c) >= 0;
        }
    }
    int found = -1;
    /* _HEX_WHOLE: (?:[0-9a-fA-F]{2}){4,} */
    if (hexes == n && n % 2 == 0) {
        tails_unpack(src, n, 4, tails_hex_value, buffer);
        found = tails_text_of(buffer, n / 2);
    }
    /* _B64_WHOLE: [A-Za-z0-9+/_-]{8,}={0,2}, and _b64: not 1 past a multiple of 4 */
    if (found < 0 && b64 == body && body >= 8 && n - body <= 2 && body % 4 != 1) {
        found = tails_text_of(buffer, tails_unpack(src, body, 6, tails_b64_value, buffer));
    }
    /* _B32_WHOLE: [A-Za-z2-7]{8,}={0,6}, then _B32HEX_WHOLE: [0-9A-Va-v]{8,}={0,6}, and
     * _b32: not 1, 3 or 6 past a multiple of 8 */
    int b32_length = body >= 8 && n - body <= 6 && body % 8 != 1 && body % 8 != 3 &&
                     body % 8 != 6;
    if (found < 0 && b32 == body && b32_length) {
        found = tails_text_of(buffer, tails_unpack(src, body, 5, tails_b32_value, buffer));
    }
    if (found < 0 && b32hex == body && b32_length) {
        found = tails_text_of(buffer, tails_unpack(src, body, 5, tails_b32hex_value, buffer));
    }
    return found > 0;
}

/* The ASCII text[start:end] (of kind and data) through tails_encoding_may_decode; a run
 * with any other character: 0 (no encoding's whole). -1 on error (no memory). */
static int
tails_run_may_decode(int kind, const void *data, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t n = end - start;
    if (n < 8) {
        return 0;
    }
    unsigned char *run = PyMem_Malloc((size_t)n * 2);
    if (run == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int may = 1;
    for (Py_ssize_t i = 0; i < n && may; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, start + i);
        may = c < 0x80 && c > ' ';
        run[i] = (unsigned char)c;
    }
    if (may) {
        may = tails_encoding_may_decode(run, n, run + n);
    }
    PyMem_Free(run);
    return may;
}

/* Whether text[start:end] (of kind and data) is a word: [A-Z]?[a-z]+ (pieces._WORD, as
 * tails._runs_decoded tests it). */
static int
tails_is_word(int kind, const void *data, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t i = start;
    if (i < end) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        i += c >= 'A' && c <= 'Z';
    }
    Py_ssize_t letters = i;
    while (i < end) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 'a' || c > 'z') {
            return 0;
        }
        i++;
    }
    return end > letters;
}

/* Whether tails._decoded may give text (anything but None) for text: a % or a
 * backslash (Python decodes those); else the whole of it, or, with white space in it,
 * one of the runs it reads (as str.split cuts them; tails._runs_decoded: the first, the
 * last, and each other among the first TAILS_DECODED_RUNS that is not a word), decoding
 * in hex, base64 or base32 to what may be printable text (tails_encoding_may_decode).
 * 0 when it surely gives None; -1 on error. */
#define TAILS_DECODED_RUNS 32

static int
tails_may_decode(PyObject *text)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    int spaced = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '%' || c == '\\') {
            return 1;
        }
        spaced |= tails_is_space(c);
    }
    if (!spaced) {
        return tails_run_may_decode(kind, data, 0, size);
    }
    /* the last run's start (none: the text is white space) */
    Py_ssize_t last_end = size;
    while (last_end > 0 && tails_is_space(PyUnicode_READ(kind, data, last_end - 1))) {
        last_end--;
    }
    Py_ssize_t last = last_end;
    while (last > 0 && !tails_is_space(PyUnicode_READ(kind, data, last - 1))) {
        last--;
    }
    Py_ssize_t i = 0;
    for (int at = 0; i < last_end; at++) {
        while (i < size && tails_is_space(PyUnicode_READ(kind, data, i))) {
            i++;
        }
        if (at >= TAILS_DECODED_RUNS) {
            i = last; /* past the first runs read: the last */
        }
        Py_ssize_t start = i;
        while (i < size && !tails_is_space(PyUnicode_READ(kind, data, i))) {
            i++;
        }
        if (at == 0 || start == last || !tails_is_word(kind, data, start, i)) {
            int may = tails_run_may_decode(kind, data, start, i);
            if (may != 0) {
                return may;
            }
        }
    }
    return 0;
}

/* Step text into stream, then what it decodes to (tails._decoded) into stream + "~". */
static int
tails_step_value(tails_call *call, PyObject *name, PyObject *stream, PyObject *text)
{
    if (tails_step(call->tails, name, stream, text, call->joined, &call->pieces, call->empty,
                   call->max_names, call->across, call->across_decoded) < 0) {
        return -1;
    }
    if (PyUnicode_GET_LENGTH(text) == 0) {
        return 0;
    }
    int may = tails_may_decode(text);
    if (may <= 0) {
        return may;
    }
    PyObject *decoded = PyObject_CallOneArg(call->decode, text);
    if (decoded == NULL) {
        return -1;
    }
    int failed = 0;
    if (decoded != Py_None) {
        PyObject *inner = PyUnicode_CheckExact(decoded) ? PyUnicode_FromFormat("%U~", stream)
                                                         : NULL;
        if (inner == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "decoded gives a str or None");
            }
            failed = 1;
        }
        else {
            failed = tails_step(call->tails, name, inner, decoded, call->joined,
                                &call->decoded_pieces, call->empty, call->max_names,
                                call->across, call->across_decoded) < 0;
            Py_DECREF(inner);
        }
    }
    Py_DECREF(decoded);
    return failed ? -1 : 0;
}

/* ArgumentTails._walk: 0, or -1 with an error set. */
static int
tails_walk(tails_call *call, PyObject *name, PyObject *stream, PyObject *value,
           Py_ssize_t depth)
{
    PyObject *text;
    if (PyUnicode_CheckExact(value)) {
        text = Py_NewRef(value);
    }
    else if (PyLong_CheckExact(value) || PyFloat_CheckExact(value)) {
        text = PyObject_Str(value);
        if (text == NULL) {
            return -1;
        }
    }
    else if (depth < call->max_depth &&
             (PyDict_CheckExact(value) || PyList_CheckExact(value) ||
              PyTuple_CheckExact(value))) {
        int failed = 0;
        if (PyDict_CheckExact(value)) {
            PyObject *items = PyDict_Items(value); /* a copy: url_parts runs Python */
            PyObject *keys = items == NULL ? NULL : PyUnicode_FromFormat("%U{}", stream);
            if (keys == NULL) {
                Py_XDECREF(items);
                return -1;
            }
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items) && call->budget > 0; i++) {
                PyObject *item = PyList_GET_ITEM(items, i);
                PyObject *key = PyTuple_GET_ITEM(item, 0);
                if (!PyUnicode_CheckExact(key)) {
                    continue;
                }
                if (!tails_plain(key) && /* the key too: {"<piece>": 1} */
                    tails_walk(call, name, keys, key, depth + 1) < 0) {
                    failed = 1;
                    break;
                }
                PyObject *cut = PyUnicode_Substring(key, 0, TAILS_KEPT);
                PyObject *inner = cut == NULL ? NULL : PyUnicode_FromFormat("%U.%U", stream, cut);
                Py_XDECREF(cut);
                if (inner == NULL) {
                    failed = 1;
                    break;
                }
                failed = tails_walk(call, name, inner, PyTuple_GET_ITEM(item, 1), depth + 1) < 0;
                Py_DECREF(inner);
                if (failed) {
                    break;
                }
            }
            Py_DECREF(keys);
            Py_DECREF(items);
        }
        else {
            PyObject *items = PySequence_Tuple(value); /* a copy of a list */
            PyObject *inner = items == NULL ? NULL : PyUnicode_FromFormat("%U[]", stream);
            if (inner == NULL) {
                Py_XDECREF(items);
                return -1;
            }
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items) && call->budget > 0; i++) {
                if (tails_walk(call, name, inner, PyTuple_GET_ITEM(items, i), depth + 1) < 0) {
                    failed = 1;
                    break;
                }
            }
            Py_DECREF(inner);
            Py_DECREF(items);
        }
        return failed ? -1 : 0;
    }
    else {
        return 0;
    }
    if (PyUnicode_GET_LENGTH(text) == 0 || call->budget <= 0) {
        Py_DECREF(text);
        return 0;
    }
    call->budget--;
    PyObject *parts = NULL;
    if (tails_is_url(text)) {
        parts = PyObject_CallFunctionObjArgs(call->url_parts, stream, text, NULL);
        if (parts == NULL) {
            Py_DECREF(text);
            return -1;
        }
        if (parts == Py_None) {
            Py_CLEAR(parts);
        }
        else if (!PyTuple_CheckExact(parts)) {
            Py_DECREF(parts);
            Py_DECREF(text);
            PyErr_SetString(PyExc_TypeError, "url_parts gives a tuple or None");
            return -1;
        }
    }
    int bad = 0;
    if (parts == NULL) {
        bad = tails_step_value(call, name, stream, text) < 0;
    }
    else {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parts) && !bad; k++) {
            PyObject *part = PyTuple_GET_ITEM(parts, k);
            if (!PyTuple_CheckExact(part) || PyTuple_GET_SIZE(part) != 2 ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(part, 0)) ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(part, 1))) {
                PyErr_SetString(PyExc_TypeError, "a URL's part is (str, str)");
                bad = 1;
                break;
            }
            bad = tails_step_value(call, name, PyTuple_GET_ITEM(part, 0),
                                   PyTuple_GET_ITEM(part, 1)) < 0;
        }
        Py_DECREF(parts);
    }
    Py_DECREF(text);
    return bad ? -1 : 0;
}

/* advance_tails(tails, args, url_parts, max_names, across, max_depth, max_values,
 *               decoded) -> list[(name, left, right)]:
 * ArgumentTails._advanced (the caller holds its lock and keeps the sessions' order):
 * each string and number value stepped (an http(s) URL by the parts url_parts(stream,
 * text) gives, None: as a plain value; in dicts and lists by its path), then ACROSS
 * past the pieces. */
static PyObject *
advance_tails(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || !PyDict_CheckExact(args[0]) || !PyUnicode_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "advance_tails(tails: dict, args, url_parts, max_names: int, "
                        "across: str, max_depth: int, max_values: int, decoded)");
        return NULL;
    }
    tails_call call = {args[0], args[2], NULL, NULL, args[4], args[7], NULL, {NULL, 0, 0},
                       {NULL, 0, 0}, 0, 0, 0};
    PyObject *values = args[1], *across = args[4];
    call.max_names = PyLong_AsSsize_t(args[3]);
    if (call.max_names == -1 && PyErr_Occurred()) {
        return NULL;
    }
    call.max_depth = PyLong_AsSsize_t(args[5]);
    if (call.max_depth == -1 && PyErr_Occurred()) {
        return NULL;
    }
    call.budget = PyLong_AsSsize_t(args[6]);
    if (call.budget == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *star = NULL, *empty_text = NULL, *items = NULL;
    call.joined = PyList_New(0);
    if (call.joined == NULL) {
        return NULL;
    }
    call.across_decoded = PyUnicode_FromFormat("%U~", across);
    if (call.across_decoded == NULL) {
        Py_DECREF(call.joined);
        return NULL;
    }
    empty_text = PyUnicode_New(0, 0);
    if (empty_text == NULL) {
        goto failed;
    }
    call.empty = PyTuple_Pack(3, empty_text, Py_None, empty_text);
    if (call.empty == NULL) {
        goto failed;
    }
    int names = PyDict_CheckExact(values);
    if (names) {
        items = PyDict_Items(values); /* a copy: url_parts runs Python */
        star = PyUnicode_FromString("{}"); /* the names' stream */
        if (star == NULL) {
            goto failed;
        }
    }
    else {
        star = PyUnicode_FromString("*");
        items = star == NULL ? NULL : Py_BuildValue("[(OO)]", star, values);
    }
    if (items == NULL) {
        goto failed;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *name = PyTuple_GET_ITEM(item, 0);
        if (!PyUnicode_CheckExact(name)) {
            continue;
        }
        if (names && !tails_plain(name) && /* the names too: {"<piece>": 1} */
            tails_walk(&call, name, star, name, 0) < 0) {
            goto failed;
        }
        if (tails_walk(&call, name, name, PyTuple_GET_ITEM(item, 1), 0) < 0) {
            goto failed;
        }
    }
    for (Py_ssize_t i = 0; i < call.pieces.size; i++) {
        if (tails_across(call.tails, &call.pieces.items[i], call.joined, across, call.empty) <
            0) {
            goto failed;
        }
    }
    for (Py_ssize_t i = 0; i < call.decoded_pieces.size; i++) {
        if (tails_across(call.tails, &call.decoded_pieces.items[i], call.joined,
                         call.across_decoded, call.empty) < 0) {
            goto failed;
        }
    }
    tails_pieces_clear(&call.pieces);
    tails_pieces_clear(&call.decoded_pieces);
    Py_DECREF(call.across_decoded);
    Py_DECREF(items);
    Py_XDECREF(star);
    Py_DECREF(call.empty);
    Py_DECREF(empty_text);
    return call.joined;
failed:
    tails_pieces_clear(&call.pieces);
    tails_pieces_clear(&call.decoded_pieces);
    Py_DECREF(call.across_decoded);
    Py_XDECREF(items);
    Py_XDECREF(star);
    Py_XDECREF(call.empty);
    Py_XDECREF(empty_text);
    Py_DECREF(call.joined);
    return NULL;
}

/* probe_joined(joined, seams, across, fallback, kept) -> list[(name, probe)]: the
 * probing of the seams advance_tails made (ArgumentTails.advance; its Python, _seam, is
 * the reference). Each (name, left, right) of joined is probed once: seams[(left,
 * right)] when that is kept; else, when across(left, right, True) gives (raw, None) —
 * _speedups.across, probe_across's fingerprints when its decodings are ASCII, packed
 * as bytes of uint64 values — the PrintSet of raw (no int object made: the same
 * fingerprints, read as a set of ints); and fallback(left, right) (probe_across: a
 * frozenset) for anything else. A new probe is kept out of the collector's walk
 * (untracked) and in seams, emptied whole when it holds kept. The probes that found
 * something, each with its argument's name. */
static PyObject *
probe_joined(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "probe_joined(joined: list, seams: dict, across, fallback, kept: int)");
        return NULL;
    }
    PyObject *joined = args[0], *seams = args[1], *across = args[2], *fallback = args[3];
    Py_ssize_t kept = PyLong_AsSsize_t(args[4]);
    if (kept == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    /* joined is re-read each turn: fallback runs Python */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(joined); i++) {
        PyObject *item = PyList_GET_ITEM(joined, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "a seam is (name, left, right)");
            goto failed;
        }
        Py_INCREF(item);
        PyObject *left = PyTuple_GET_ITEM(item, 1), *right = PyTuple_GET_ITEM(item, 2);
        PyObject *key = PyTuple_Pack(2, left, right);
        PyObject *found = NULL;
        int bad = key == NULL;
        if (!bad) {
            found = PyDict_GetItemWithError(seams, key); /* borrowed */
            if (found != NULL) {
                Py_INCREF(found);
            }
            else if (PyErr_Occurred()) {
                bad = 1;
            }
        }
        if (!bad && found == NULL) {
            if (PyUnicode_CheckExact(left) && PyUnicode_CheckExact(right) &&
                PyUnicode_GET_LENGTH(left) && PyUnicode_GET_LENGTH(right)) {
                PyObject *call[3] = {left, right, Py_True};
                PyObject *got = PyObject_Vectorcall(across, call, 3, NULL);
                if (got == NULL) {
                    bad = 1;
                }
                else {
                    if (PyTuple_CheckExact(got) && PyTuple_GET_SIZE(got) == 2 &&
                        PyTuple_GET_ITEM(got, 1) == Py_None &&
                        PyBytes_CheckExact(PyTuple_GET_ITEM(got, 0))) {
                        found = packed(module, PyTuple_GET_ITEM(got, 0));
                        bad = found == NULL;
                    }
                    Py_DECREF(got);
                }
            }
            if (!bad && found == NULL) {
                found = PyObject_CallFunctionObjArgs(fallback, left, right, NULL);
                bad = found == NULL;
            }
            if (!bad) {
                PyObject *kept_probe = untracked(module, found);
                Py_DECREF(found);
                found = kept_probe;
                if (PyDict_GET_SIZE(seams) >= kept) {
                    PyDict_Clear(seams);
                }
                bad = PyDict_SetItem(seams, key, found) < 0;
            }
        }
        if (!bad) {
            int truth = PyObject_IsTrue(found);
            if (truth < 0) {
                bad = 1;
            }
            else if (truth) {
                PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(item, 0), found);
                bad = pair == NULL || PyList_Append(out, pair) < 0;
                Py_XDECREF(pair);
            }
        }
        Py_XDECREF(found);
        Py_XDECREF(key);
        Py_DECREF(item);
        if (bad) {
            goto failed;
        }
    }
    return out;
failed:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"untracked", untracked, METH_O,
     "untracked(prints) -> prints: a frozenset of ints out of the collector's lists "
     "(anything else as it is)"},
    {"packed", packed, METH_O,
     "packed(raw) -> PrintSet: the fingerprints packed in raw (bytes of native-order "
     "uint64 values, as _speedups gives a probe)"},
    {"frozen", frozen, METH_O,
     "frozen(prints) -> prints: a set or frozenset of ints in [0, 2**64) as a "
     "FrozenPrints (empty: EMPTY_PRINTS); anything else as untracked() gives it"},
    {"frozen_from_bytes", frozen_from_bytes, METH_O,
     "frozen_from_bytes(raw) -> FrozenPrints: the fingerprints in raw (bytes of "
     "native-order uint64 values, any order, repeats allowed)"},
    {"advance_tails", (PyCFunction)(void (*)(void))advance_tails, METH_FASTCALL,
     "advance_tails(tails, args, url_parts, max_names, across, max_depth, max_values, "
     "decoded) -> "
     "list[(name, left, right)]: the loop of interlock.session.tails.ArgumentTails.advance "
     "(its Python is the reference)"},
    {"probe_joined", (PyCFunction)(void (*)(void))probe_joined, METH_FASTCALL,
     "probe_joined(joined, seams, across, fallback, kept) -> list[(name, probe)]: the "
     "probing of advance_tails' seams (interlock.session.tails.ArgumentTails._seam is the "
     "reference)"},
    {"maker", maker, METH_VARARGS,
     "maker(cls, names) -> make(*values): instances of the slotted class cls, each slot "
     "of names set to the value in its position"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_history", "One C call to make a slotted step or view; a packed set of fingerprints.", -1, methods,
};

PyMODINIT_FUNC
PyInit__history(void)
{
    if (PyType_Ready(&MakerType) < 0 || PyType_Ready(&PrintSetType) < 0 ||
        PyType_Ready(&PrintSetIterType) < 0 || PyType_Ready(&FrozenPrintsType) < 0 ||
        PyType_Ready(&FrozenPrintsIterType) < 0 || draw_key() < 0) {
        return NULL;
    }
    PyObject *made = PyModule_Create(&module);
    if (made == NULL) {
        return NULL;
    }
    Py_INCREF(&PrintSetType);
    if (PyModule_AddIntConstant(made, "TAILS_KEPT", TAILS_KEPT) < 0) {
        Py_DECREF(made);
        return NULL;
    }
    if (PyModule_AddObject(made, "PrintSet", (PyObject *)&PrintSetType) < 0) {
        Py_DECREF(&PrintSetType);
        Py_DECREF(made);
        return NULL;
    }
    if (empty_prints == NULL && (empty_prints = PyFrozenSet_New(NULL)) == NULL) {
        Py_DECREF(made);
        return NULL;
    }
    Py_INCREF(empty_prints);
    if (PyModule_AddObject(made, "EMPTY_PRINTS", empty_prints) < 0) {
        Py_DECREF(empty_prints);
        Py_DECREF(made);
        return NULL;
    }
    Py_INCREF(&FrozenPrintsType);
    if (PyModule_AddObject(made, "FrozenPrints", (PyObject *)&FrozenPrintsType) < 0) {
        Py_DECREF(&FrozenPrintsType);
        Py_DECREF(made);
        return NULL;
    }
    return made;
}

/* interlock.session._speedups: the hot loops of interlock.session.fingerprints in C.
 *
 * Each function computes exactly what its pure-Python reference in fingerprints.py
 * computes (tests/session/test_speedups.py checks them against each other on random
 * input); fingerprints.py falls back to the reference when this module is not built.
 * Docs: docs/adr/0031-a-c-accelerator-for-fingerprints.md.
 *
 * - grams(data, step)     -> _py_grams on bytes: the gram hashes at 0, step, 2*step...
 * - b64_forms(run)        -> _py_b64_forms: a base64 run decoded at its four alignments
 * - hex_forms(run)        -> _py_hex_forms: a hex run decoded at both nibble alignments
 * - mostly_text(raw)      -> _mostly_text: the text of a decoding, or None if noise
 * - at_least(words, size) -> _py_at_least: the words at least size characters long
 * - runs(text, hex)       -> _B64_RUN.findall(text) (or _HEX_RUN's with hex)
 * - smallest(values, k)   -> _py_smallest: sorted(values)[:k] (the sample kept past the cap)
 * - whole_tokens(words, g) -> _py_whole on ASCII words: the norms of the specific whole
 *                            tokens (the caller hashes them) and the grams of long ones
 *
 * Every index is checked against the buffer's length before it is read; no input is
 * trusted to be well formed (a base64 or hex run with a foreign character raises
 * ValueError: the Python side only passes runs its regular expressions matched).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define GRAM 16
#define PRIME ((uint64_t)0x1FFFFFFFFFFFFFFFULL) /* 2**61 - 1 */

/* x modulo 2**61 - 1 (2**61 is 1 modulo it: fold the top 3 bits onto the rest). */
static inline uint64_t
mod61(uint64_t x)
{
    x = (x & PRIME) + (x >> 61);
    return x >= PRIME ? x - PRIME : x;
}

static inline uint64_t
load_be64(const unsigned char *p)
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) {
        x = (x << 8) | p[i];
    }
    return x;
}

/* int.from_bytes(p[0:16], "big") % (2**61 - 1): hi * 2**64 + lo, and 2**64 is 8
 * modulo the prime. */
static inline uint64_t
gram_hash(const unsigned char *p)
{
    uint64_t hi = mod61(mod61(load_be64(p)) << 3);
    return mod61(hi + mod61(load_be64(p + 8)));
}

static PyObject *
grams(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t step;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "grams(data, step) takes 2 arguments");
        return NULL;
    }
    step = PyLong_AsSsize_t(args[1]);
    if (step == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (step < 1) {
        PyErr_SetString(PyExc_ValueError, "step must be at least 1");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        goto fail;
    }
    /* next_cut: the first position >= i holding a 0 byte (the cut mark), or size */
    Py_ssize_t next_cut = -1;
    Py_ssize_t i = 0;
    while (size - i >= GRAM) {
        if (next_cut < i) {
            const void *zero = memchr(data + i, 0, (size_t)(size - i));
            next_cut = zero == NULL ? size : (const unsigned char *)zero - data;
        }
        if (next_cut >= i + GRAM) {
            PyObject *value = PyLong_FromUnsignedLongLong(gram_hash(data + i));
            if (value == NULL) {
                goto fail;
            }
            int failed = PyList_Append(out, value);
            Py_DECREF(value);
            if (failed) {
                goto fail;
            }
        }
        if (step > size - i) {
            break; /* the next start is past the end (and i + step might overflow) */
        }
        i += step;
    }
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* ASCII control bytes but tab, line feed and carriage return (fingerprints._CONTROL). */
static inline int
is_control(unsigned char c)
{
    return (c < 32 && c != '\t' && c != '\n' && c != '\r') || c == 127;
}

/* fingerprints._mostly_text: a new reference to the text, Py_None (new reference) if
 * the bytes read as noise, NULL on error. */
static PyObject *
text_of(const unsigned char *raw, Py_ssize_t size)
{
    Py_ssize_t bad = 0;
    int ascii = 1;
    if (size == 0) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        bad += is_control(raw[i]);
        ascii &= raw[i] < 128;
    }
    if (ascii) {
        if ((double)bad <= 0.15 * (double)size) {
            return PyUnicode_DecodeASCII((const char *)raw, size, "strict");
        }
        Py_RETURN_NONE;
    }
    PyObject *decoded = PyUnicode_DecodeUTF8((const char *)raw, size, "replace");
    if (decoded == NULL) {
        return NULL;
    }
    Py_ssize_t length = PyUnicode_GET_LENGTH(decoded);
    int kind = PyUnicode_KIND(decoded);
    const void *chars = PyUnicode_DATA(decoded);
    for (Py_ssize_t i = 0; i < length; i++) {
        bad += PyUnicode_READ(kind, chars, i) == 0xFFFD;
    }
    if ((double)bad <= 0.15 * (double)length) {
        return decoded;
    }
    Py_DECREF(decoded);
    Py_RETURN_NONE;
}

/* Append the text of raw[0:size] to out when it reads as text: 0, or -1 on error. */
static int
append_text(PyObject *out, const unsigned char *raw, Py_ssize_t size)
{
    PyObject *text = text_of(raw, size);
    if (text == NULL) {
        return -1;
    }
    int failed = text != Py_None && PyList_Append(out, text) < 0;
    Py_DECREF(text);
    return failed ? -1 : 0;
}

static PyObject *
mostly_text(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *text = text_of((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return text;
}

/* The ASCII characters of an ASCII str, or NULL with ValueError set (a run the Python
 * side passes is always ASCII: its regular expressions match ASCII only). */
static const unsigned char *
ascii_chars(PyObject *run, Py_ssize_t *size)
{
    if (!PyUnicode_Check(run)) {
        PyErr_SetString(PyExc_TypeError, "a run must be a str");
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(run) < 0) {
        return NULL;
    }
#endif
    if (!PyUnicode_IS_ASCII(run)) {
        PyErr_SetString(PyExc_ValueError, "a run must be ASCII");
        return NULL;
    }
    *size = PyUnicode_GET_LENGTH(run);
    return (const unsigned char *)PyUnicode_1BYTE_DATA(run);
}

/* A base64 character's 6 bits, standard and URL-safe alphabets; -1 for any other. */
static int
b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

/* _py_b64_forms: the run less its trailing '=', decoded from each of its first four
 * characters on; a piece whose length is 1 modulo 4 loses its last character (as
 * padded, it would be the Python side's error); one shorter than 12 characters once
 * padded is skipped. */
static PyObject *
b64_forms(PyObject *module, PyObject *run)
{
    Py_ssize_t size;
    const unsigned char *chars = ascii_chars(run, &size);
    if (chars == NULL) {
        return NULL;
    }
    while (size > 0 && chars[size - 1] == '=') {
        size--;
    }
    unsigned char *bits = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    unsigned char *raw = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    PyObject *out = PyList_New(0);
    if (bits == NULL || raw == NULL || out == NULL) {
        if (bits == NULL || raw == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        int value = b64_value(chars[i]);
        if (value < 0) {
            PyErr_SetString(PyExc_ValueError, "not a base64 run");
            goto fail;
        }
        bits[i] = (unsigned char)value;
    }
    for (Py_ssize_t start = 0; start < 4 && start < size; start++) {
        Py_ssize_t length = size - start;
        Py_ssize_t rest = length % 4;
        if (rest == 1) {
            length--;
            rest = 0;
        }
        if (length + (rest ? 4 - rest : 0) < 12) {
            continue;
        }
        const unsigned char *in = bits + start;
        Py_ssize_t n = 0;
        Py_ssize_t whole = length - rest;
        for (Py_ssize_t i = 0; i < whole; i += 4) {
            uint32_t group = ((uint32_t)in[i] << 18) | ((uint32_t)in[i + 1] << 12)
                             | ((uint32_t)in[i + 2] << 6) | in[i + 3];
            raw[n++] = (unsigned char)(group >> 16);
            raw[n++] = (unsigned char)(group >> 8);
            raw[n++] = (unsigned char)group;
        }
        if (rest >= 2) { /* 2 characters hold 1 byte, 3 hold 2 */
            uint32_t group = ((uint32_t)in[whole] << 18) | ((uint32_t)in[whole + 1] << 12);
            if (rest == 3) {
                group |= (uint32_t)in[whole + 2] << 6;
            }
            raw[n++] = (unsigned char)(group >> 16);
            if (rest == 3) {
                raw[n++] = (unsigned char)(group >> 8);
            }
        }
        if (append_text(out, raw, n) < 0) {
            goto fail;
        }
    }
    PyMem_Free(bits);
    PyMem_Free(raw);
    return out;
fail:
    PyMem_Free(bits);
    PyMem_Free(raw);
    Py_XDECREF(out);
    return NULL;
}

static int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* _py_hex_forms: the run read as hex from its first and from its second character
 * (an odd last nibble dropped). */
static PyObject *
hex_forms(PyObject *module, PyObject *run)
{
    Py_ssize_t size;
    const unsigned char *chars = ascii_chars(run, &size);
    if (chars == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        if (hex_value(chars[i]) < 0) {
            PyErr_SetString(PyExc_ValueError, "not a hex run");
            return NULL;
        }
    }
    unsigned char *raw = PyMem_Malloc(size / 2 + 1);
    PyObject *out = PyList_New(0);
    if (raw == NULL || out == NULL) {
        if (raw == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    for (Py_ssize_t start = 0; start < 2; start++) {
        Py_ssize_t n = 0;
        for (Py_ssize_t i = start; i + 1 < size; i += 2) {
            raw[n++] = (unsigned char)(hex_value(chars[i]) << 4 | hex_value(chars[i + 1]));
        }
        if (append_text(out, raw, n) < 0) {
            goto fail;
        }
    }
    PyMem_Free(raw);
    return out;
fail:
    PyMem_Free(raw);
    Py_XDECREF(out);
    return NULL;
}

/* at_least(words, size) -> list[str]: the words at least size characters long, in
 * order ([w for w in words if len(w) >= size]; words: a list of str). */
static PyObject *
at_least(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "at_least(words: list[str], size)");
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *words = args[0];
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    /* no Python code runs in this loop: the list cannot change under it */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(words); i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "a word must be a str");
            Py_DECREF(out);
            return NULL;
        }
        if (PyUnicode_GET_LENGTH(word) >= size && PyList_Append(out, word) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* smallest(values, count) -> list[int] | None: sorted(values)[:count] for values that
 * are ints in [0, 2**64) (None for any other: the caller sorts them itself). An LSD
 * radix sort, 8 passes of one byte: linear in any input (no worst case an attacker's
 * data could pick, as a quickselect would have). */
static PyObject *
smallest(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "smallest(values, count) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must not be negative");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "values must be iterable");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    uint64_t *keys = PyMem_Malloc(size > 0 ? (size_t)size * sizeof(uint64_t) : 1);
    uint64_t *spare = PyMem_Malloc(size > 0 ? (size_t)size * sizeof(uint64_t) : 1);
    PyObject *out = NULL;
    if (keys == NULL || spare == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        if (!PyLong_Check(items[i])) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        keys[i] = PyLong_AsUnsignedLongLong(items[i]);
        if (keys[i] == (uint64_t)-1 && PyErr_Occurred()) {
            PyErr_Clear(); /* negative or too large: not a fingerprint */
            out = Py_NewRef(Py_None);
            goto done;
        }
    }
    for (int shift = 0; shift < 64; shift += 8) {
        Py_ssize_t start[257] = {0};
        for (Py_ssize_t i = 0; i < size; i++) {
            start[((keys[i] >> shift) & 0xFF) + 1]++;
        }
        for (int b = 0; b < 256; b++) {
            start[b + 1] += start[b];
        }
        for (Py_ssize_t i = 0; i < size; i++) {
            spare[start[(keys[i] >> shift) & 0xFF]++] = keys[i];
        }
        uint64_t *swap = keys;
        keys = spare;
        spare = swap;
    }
    if (count > size) {
        count = size;
    }
    out = PyList_New(count);
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        PyObject *value = PyLong_FromUnsignedLongLong(keys[i]);
        if (value == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, value);
    }
done:
    PyMem_Free(keys);
    PyMem_Free(spare);
    Py_DECREF(seq);
    return out;
}

/* -- whole tokens (fingerprints._py_whole on ASCII words) ------------------------- */

/* fingerprints._SPLIT: quoting and punctuation a token is cut at. */
static inline int
is_split(unsigned char c)
{
    return c == '"' || c == '\'' || c == '`' || c == '<' || c == '>' || c == '(' || c == ')'
           || c == '[' || c == ']' || c == '{' || c == '}' || c == ',' || c == ';' || c == '|'
           || c == '\\' || c == 0;
}

/* fingerprints._SUBSPLIT: where a token is cut into pieces. */
static inline int
is_subsplit(unsigned char c)
{
    return c == '=' || c == '&' || c == '?' || c == '#' || c == ':' || c == '/';
}

static inline int
is_alnum(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static inline int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static inline int is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }

/* fingerprints._wordlike: the token less . - / _ is letters of one case, or the token
 * is title-cased (str.istitle: an upper-case letter only after an uncased character, a
 * lower-case one only after a cased one, and some cased character). */
static int
wordlike(const unsigned char *raw, Py_ssize_t size)
{
    Py_ssize_t plain = 0, upper = 0, lower = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = raw[i];
        if (c == '.' || c == '-' || c == '/' || c == '_') {
            continue;
        }
        if (!is_upper(c) && !is_lower(c)) {
            return 0;
        }
        plain++;
        upper += is_upper(c);
        lower += is_lower(c);
    }
    if (plain == 0) {
        return 0;
    }
    if (upper == 0 || lower == 0) {
        return 1;
    }
    int previous_cased = 0, cased = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = raw[i];
        if (is_upper(c)) {
            if (previous_cased) {
                return 0;
            }
            previous_cased = cased = 1;
        }
        else if (is_lower(c)) {
            if (!previous_cased) {
                return 0;
            }
            previous_cased = cased = 1;
        }
        else {
            previous_cased = 0;
        }
    }
    return cased;
}

/* fingerprints._norm of ASCII: lower-cased, all but a-z 0-9 _ @ . dropped; into norm
 * (room for size bytes); its length. */
static Py_ssize_t
ascii_norm(const unsigned char *raw, Py_ssize_t size, unsigned char *norm)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = raw[i];
        if (is_upper(c)) {
            c = (unsigned char)(c - 'A' + 'a');
        }
        if (is_lower(c) || (c >= '0' && c <= '9') || c == '_' || c == '@' || c == '.') {
            norm[n++] = c;
        }
    }
    return n;
}

/* One token (fingerprints._whole's loop body): its norm appended to norms when it is
 * specific; with grams (a list) and not a piece, every gram of a long token that does
 * not read as words appended there. 0, or -1 on error. */
static int
whole_token(const unsigned char *raw, Py_ssize_t size, int piece, unsigned char *norm,
            PyObject *norms, PyObject *grams)
{
    Py_ssize_t n = ascii_norm(raw, size, norm);
    if (n >= 8) {
        int at = 0, digit = 0, letter = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            at |= norm[i] == '@';
            digit |= norm[i] >= '0' && norm[i] <= '9';
            letter |= is_lower(norm[i]);
        }
        if (at || (digit && letter) || (!piece && n >= 12 && !wordlike(raw, size))) {
            PyObject *value = PyBytes_FromStringAndSize((const char *)norm, n);
            if (value == NULL) {
                return -1;
            }
            int failed = PyList_Append(norms, value);
            Py_DECREF(value);
            if (failed) {
                return -1;
            }
        }
    }
    if (grams != NULL && !piece && n >= GRAM && !wordlike(raw, size)) {
        for (Py_ssize_t i = 0; i + GRAM <= n; i++) { /* a norm holds no 0 byte */
            PyObject *value = PyLong_FromUnsignedLongLong(gram_hash(norm + i));
            if (value == NULL) {
                return -1;
            }
            int failed = PyList_Append(grams, value);
            Py_DECREF(value);
            if (failed) {
                return -1;
            }
        }
    }
    return 0;
}

/* One long word: its tokens (cut at _SPLIT runs) and their pieces (cut at _SUBSPLIT
 * runs), as fingerprints._tokens yields them. 0, or -1 on error. */
static int
whole_word(const unsigned char *word, Py_ssize_t size, unsigned char *norm, PyObject *norms,
           PyObject *grams)
{
    Py_ssize_t start = 0;
    while (start < size) {
        Py_ssize_t end = start;
        while (end < size && !is_split(word[end])) {
            end++;
        }
        const unsigned char *raw = word + start;
        Py_ssize_t length = end - start;
        if (length >= 8) {
            if (whole_token(raw, length, 0, norm, norms, grams) < 0) {
                return -1;
            }
            int cut = 0;
            for (Py_ssize_t i = 0; i < length; i++) {
                cut |= is_subsplit(raw[i]);
            }
            Py_ssize_t from = 0;
            while (cut && from <= length) {
                Py_ssize_t to = from;
                while (to < length && !is_subsplit(raw[to])) {
                    to++;
                }
                if (to - from >= 8 && whole_token(raw + from, to - from, 1, norm, norms, NULL) < 0) {
                    return -1;
                }
                while (to < length && is_subsplit(raw[to])) {
                    to++;
                }
                if (to >= length) {
                    break;
                }
                from = to;
            }
        }
        while (end < size && is_split(word[end])) {
            end++;
        }
        start = end;
    }
    return 0;
}

/* whole_tokens(long_words, with_grams) -> (norms, grams) | None: fingerprints._py_whole
 * for ASCII words, its whole-token hashes left to the caller (the norms, as bytes, of
 * the specific tokens); None when a word is not ASCII (the Python path then). */
static PyObject *
whole_tokens(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "whole_tokens(long_words: list[str], with_grams)");
        return NULL;
    }
    PyObject *words = args[0];
    int with_grams = PyObject_IsTrue(args[1]);
    if (with_grams < 0) {
        return NULL;
    }
    Py_ssize_t longest = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(words); i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "a word must be a str");
            return NULL;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(word) < 0) {
            return NULL;
        }
#endif
        if (!PyUnicode_IS_ASCII(word)) {
            Py_RETURN_NONE;
        }
        if (PyUnicode_GET_LENGTH(word) > longest) {
            longest = PyUnicode_GET_LENGTH(word);
        }
    }
    unsigned char *norm = PyMem_Malloc(longest > 0 ? (size_t)longest : 1);
    PyObject *norms = PyList_New(0);
    PyObject *grams = with_grams ? PyList_New(0) : NULL;
    if (norm == NULL || norms == NULL || (with_grams && grams == NULL)) {
        if (norm == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    /* the list is not changed while this runs: no Python code is called back */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(words); i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        const unsigned char *chars = PyUnicode_1BYTE_DATA(word);
        if (whole_word(chars, PyUnicode_GET_LENGTH(word), norm, norms, grams) < 0) {
            goto fail;
        }
    }
    PyMem_Free(norm);
    PyObject *out = PyTuple_Pack(2, norms, with_grams ? grams : Py_None);
    Py_DECREF(norms);
    Py_XDECREF(grams);
    return out;
fail:
    PyMem_Free(norm);
    Py_XDECREF(norms);
    Py_XDECREF(grams);
    return NULL;
}

/* -- runs of base64 and hex in a text (fingerprints._B64_RUN, _HEX_RUN) ---------- */

static inline int
in_b64_run(Py_UCS4 c)
{
    return c < 128 && (is_alnum((unsigned char)c) || c == '+' || c == '/' || c == '_' || c == '-');
}

static inline int
in_hex_run(Py_UCS4 c)
{
    return c < 128 && hex_value((unsigned char)c) >= 0;
}

/* runs(text, hex) -> list[str]: what _B64_RUN.findall(text) finds (runs of at least
 * 16 base64 characters, each with up to two '=' after it), or with hex _HEX_RUN's
 * (runs of at least 16 hex digits). A scan that looks at each character once. */
static PyObject *
runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "runs(text: str, hex: bool)");
        return NULL;
    }
    PyObject *text = args[0];
    int hex = PyObject_IsTrue(args[1]);
    if (hex < 0) {
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) {
        return NULL;
    }
#endif
    int kind = PyUnicode_KIND(text);
    const void *chars = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t i = 0;
    while (i < size) {
        Py_ssize_t end = i;
        while (end < size && (hex ? in_hex_run(PyUnicode_READ(kind, chars, end))
                                  : in_b64_run(PyUnicode_READ(kind, chars, end)))) {
            end++;
        }
        if (end - i < GRAM) {
            i = end + 1; /* the character at end is in no run */
            continue;
        }
        Py_ssize_t stop = end;
        while (!hex && stop < size && stop - end < 2 && PyUnicode_READ(kind, chars, stop) == '=') {
            stop++;
        }
        PyObject *run = PyUnicode_Substring(text, i, stop);
        if (run == NULL || PyList_Append(out, run) < 0) {
            Py_XDECREF(run);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(run);
        i = stop;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"grams", (PyCFunction)(void (*)(void))grams, METH_FASTCALL,
     "grams(data, step) -> list[int]: each 16-byte window at 0, step, 2*step... without a "
     "0 byte, as a big-endian integer modulo 2**61 - 1."},
    {"b64_forms", b64_forms, METH_O,
     "b64_forms(run) -> list[str]: a base64 run decoded at its four alignments, the "
     "decodings that read as text."},
    {"hex_forms", hex_forms, METH_O,
     "hex_forms(run) -> list[str]: a hex run decoded at both nibble alignments, the "
     "decodings that read as text."},
    {"whole_tokens", (PyCFunction)(void (*)(void))whole_tokens, METH_FASTCALL,
     "whole_tokens(long_words, with_grams) -> (norms, grams) | None: the specific whole "
     "tokens of ASCII words (their norms, as bytes) and the grams of the long ones."},
    {"at_least", (PyCFunction)(void (*)(void))at_least, METH_FASTCALL,
     "at_least(words, size) -> list[str]: the words at least size characters long."},
    {"smallest", (PyCFunction)(void (*)(void))smallest, METH_FASTCALL,
     "smallest(values, count) -> list[int] | None: sorted(values)[:count] for ints in "
     "[0, 2**64); None for any other."},
    {"runs", (PyCFunction)(void (*)(void))runs, METH_FASTCALL,
     "runs(text, hex) -> list[str]: the base64 runs in text as _B64_RUN.findall finds "
     "them, or with hex the hex runs as _HEX_RUN.findall does."},
    {"mostly_text", mostly_text, METH_O,
     "mostly_text(raw) -> str | None: the text of a decoding if it reads as text."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    /* no Py_mod_gil slot: whole_tokens and at_least walk a list without a lock, which
     * only the GIL makes safe on a free-threaded build */
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "interlock.session._speedups",
    .m_doc = "The hot loops of interlock.session.fingerprints, bit for bit the same.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&module_def);
}

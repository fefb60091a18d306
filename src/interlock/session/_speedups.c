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
 * - b32_forms(run)        -> _py_b32_forms: a base32 run decoded at its eight alignments
 * - b32_runs(source)      -> _py_b32_runs: the base32 runs of a source (DNS labels joined)
 * - mostly_text(raw)      -> _mostly_text: the text of a decoding, or None if noise
 * - at_least(words, size) -> _py_at_least: the words at least size characters long
 * - runs(text, hex)       -> _B64_RUN.findall(text) (or _HEX_RUN's with hex)
 * - smallest(values, k)   -> _py_smallest: sorted(values)[:k] (the sample kept past the cap)
 * - whole_tokens(words, g[, hashed]) -> _py_whole on ASCII words: the norms of the
 *                            specific whole tokens (with hashed, their BLAKE2b-64) and
 *                            the grams of long ones
 * - token_hash(norm)      -> _bytes_hash: BLAKE2b with an 8-byte digest (RFC 7693)
 * - turned_tokens(text)   -> _py_turned_tokens: each specific whole token reversed, ROT13
 * - decodings(text, plain) -> list(_py_decodings(text, plain)): the turned tokens,
 *                            URL-, JSON-, \x- and HTML-unescaping (the last by
 *                            html.unescape itself), base64, hex and base32 runs, up to 3
 *                            layers and 64 forms, in order
 * - probe(value, with_text) -> _py_probe_texts of plain values (str, dict, list, tuple):
 *                            the decodings and the probe of each ASCII form; the forms
 *                            that are not ASCII returned for Python to probe
 * - seams(texts)          -> probe_seams of ASCII texts (same split of the work)
 * - boilerplate(words)    -> _py_boilerplate: _BOILERPLATE.findall over ASCII words
 *
 * Every index is checked against the buffer's length before it is read; no input is
 * trusted to be well formed (a base64 or hex run with a foreign character raises
 * ValueError: the Python side only passes runs its regular expressions matched).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
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

/* The 8 bytes at p as a big-endian integer: one load and a byte swap where the
 * compiler has one (a gram is hashed at every position of every form). */
static inline uint64_t
load_be64(const unsigned char *p)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x;
    memcpy(&x, p, 8);
    return __builtin_bswap64(x);
#else
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) {
        x = (x << 8) | p[i];
    }
    return x;
#endif
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

/* What raw[i] adds to the count text_of's first pass keeps: 1 for a control byte, or a
 * byte sure to decode to a U+FFFD of its own — C0, C1 and F5-FF (never in UTF-8), and a
 * continuation byte 80-BF first or after an ASCII byte or one of those (no sequence is
 * open there). Only raw[i] and raw[i - 1] are read: a decoder counts as it writes. */
static inline int
noise_at(const unsigned char *raw, Py_ssize_t i)
{
    unsigned char c = raw[i];
    if (c < 0x80) {
        return is_control(c);
    }
    int never = c == 0xC0 || c == 0xC1 || c >= 0xF5;
    int stray = c <= 0xBF
                && (i == 0 || raw[i - 1] < 0x80 || raw[i - 1] == 0xC0 || raw[i - 1] == 0xC1
                    || raw[i - 1] >= 0xF5);
    return never | stray;
}

/* The bound of text_of's first pass for a decoding of size bytes: once the count of
 * noise_at passes it, the bytes are noise whatever the rest holds. */
static inline double
noise_limit(Py_ssize_t size)
{
    return 0.15 * (double)size;
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
    /* One pass: the control bytes (bad), and a lower bound of what the UTF-8 decoding
     * will count bad (sure): the control bytes and the bytes each sure to decode to a
     * U+FFFD of its own — C0, C1 and F5-FF (never in UTF-8), and a continuation byte
     * 80-BF first or after an ASCII byte or one of those (no sequence is open there).
     * The decoding has at most size characters, so once sure passes 15% of size the
     * bytes are noise whatever the rest holds: most decodings of a run that was not
     * encoded end here, early and without the decoding's cost. */
    double limit = noise_limit(size);
    Py_ssize_t sure = 0; /* bad + sure: the count of noise_at */
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = raw[i];
        int noise = noise_at(raw, i);
        bad += c < 0x80 && noise; /* a control byte (noise_at of ASCII) */
        sure += c >= 0x80 && noise;
        ascii &= c < 128;
        if ((double)(bad + sure) > limit) {
            Py_RETURN_NONE;
        }
    }
    if (ascii) { /* bad <= limit here */
        return PyUnicode_DecodeASCII((const char *)raw, size, "strict");
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

/* Character values as tables (generated from the functions they replaced: a probe
 * reads every character of every form through them, and the branches cost more). */
/* A base64 character's 6 bits, standard and URL-safe; -1 for any other. */
static const signed char B64_VALUE[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, 62, -1, 63,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -1, -1, -1,
    -1,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, 63,
    -1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};
/* A hex digit's value, either case; -1 for any other. */
static const signed char HEX_VALUE[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
     0,  1,  2,  3,  4,  5,  6,  7,  8,  9, -1, -1, -1, -1, -1, -1,
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};
/* A base32 character's 5 bits, either case; -1 for any other. */
static const signed char B32_VALUE[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, 26, 27, 28, 29, 30, 31, -1, -1, -1, -1, -1, -1, -1, -1,
    -1,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, -1,
    -1,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

/* A base64 character's 6 bits, standard and URL-safe alphabets; -1 for any other. */
static inline int
b64_value(unsigned char c)
{
    return B64_VALUE[c];
}

/* _py_b64_forms on the ASCII characters of a run: its decodings that read as text
 * appended to out. The run less its trailing '=' is decoded from each of its first four
 * characters on; a piece whose length is 1 modulo 4 loses its last character (as
 * padded, it would be the Python side's error); one shorter than 12 characters once
 * padded is skipped. 0, or -1 with an exception set (ValueError: a foreign character). */
static int
b64_forms_into(const unsigned char *chars, Py_ssize_t size, PyObject *out)
{
    while (size > 0 && chars[size - 1] == '=') {
        size--;
    }
    unsigned char *bits = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    unsigned char *raw = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    if (bits == NULL || raw == NULL) {
        PyErr_NoMemory();
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
        /* counted as decoded: a decoding that is noise (most, of a run not encoded)
         * is dropped as soon as text_of would drop it, not decoded to its end */
        double limit = noise_limit(whole / 4 * 3 + (rest >= 2 ? rest - 1 : 0));
        Py_ssize_t noise = 0;
        for (Py_ssize_t i = 0; i < whole && (double)noise <= limit; i += 4) {
            uint32_t group = ((uint32_t)in[i] << 18) | ((uint32_t)in[i + 1] << 12)
                             | ((uint32_t)in[i + 2] << 6) | in[i + 3];
            raw[n++] = (unsigned char)(group >> 16);
            raw[n++] = (unsigned char)(group >> 8);
            raw[n++] = (unsigned char)group;
            noise += noise_at(raw, n - 3) + noise_at(raw, n - 2) + noise_at(raw, n - 1);
        }
        if ((double)noise > limit) {
            continue;
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
    return 0;
fail:
    PyMem_Free(bits);
    PyMem_Free(raw);
    return -1;
}

/* The decodings forms_into(run's ASCII characters) appends, as a new list: what
 * b64_forms, hex_forms and b32_forms return. */
static PyObject *
forms_of(PyObject *run, int (*forms_into)(const unsigned char *, Py_ssize_t, PyObject *))
{
    Py_ssize_t size;
    const unsigned char *chars = ascii_chars(run, &size);
    if (chars == NULL) {
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL || forms_into(chars, size, out) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *
b64_forms(PyObject *module, PyObject *run)
{
    return forms_of(run, b64_forms_into);
}

static inline int
hex_value(unsigned char c)
{
    return HEX_VALUE[c];
}

/* _py_hex_forms on the ASCII characters of a run: the run read as hex from its first
 * and from its second character (an odd last nibble dropped), the decodings that read
 * as text appended to out. 0, or -1 with an exception set. */
static int
hex_forms_into(const unsigned char *chars, Py_ssize_t size, PyObject *out)
{
    for (Py_ssize_t i = 0; i < size; i++) {
        if (hex_value(chars[i]) < 0) {
            PyErr_SetString(PyExc_ValueError, "not a hex run");
            return -1;
        }
    }
    unsigned char *raw = PyMem_Malloc(size / 2 + 1);
    if (raw == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t start = 0; start < 2; start++) {
        Py_ssize_t n = 0;
        double limit = noise_limit((size - start) / 2); /* dropped early: see b64 */
        Py_ssize_t noise = 0;
        for (Py_ssize_t i = start; i + 1 < size && (double)noise <= limit; i += 2) {
            raw[n++] = (unsigned char)(hex_value(chars[i]) << 4 | hex_value(chars[i + 1]));
            noise += noise_at(raw, n - 1);
        }
        if ((double)noise > limit) {
            continue;
        }
        if (append_text(out, raw, n) < 0) {
            PyMem_Free(raw);
            return -1;
        }
    }
    PyMem_Free(raw);
    return 0;
}

static PyObject *
hex_forms(PyObject *module, PyObject *run)
{
    return forms_of(run, hex_forms_into);
}

/* -- base32 (RFC 4648: A-Z 2-7, either case) -------------------------------------- */

/* A base32 character's 5 bits, either case; -1 for any other. */
static inline int
b32_value(unsigned char c)
{
    return B32_VALUE[c];
}

/* _py_b32_forms on the ASCII characters of a run (no dots, no padding): the run read
 * from each of its first eight characters on (8 bit offsets of a byte), each piece's
 * whole bytes (5 bits a character, the last partial byte dropped); a piece of fewer
 * than 13 characters ends the loop. The decodings that read as text appended to out.
 * 0, or -1 with an exception set (ValueError: a foreign character). */
static int
b32_forms_into(const unsigned char *chars, Py_ssize_t size, PyObject *out)
{
    for (Py_ssize_t i = 0; i < size; i++) {
        if (b32_value(chars[i]) < 0) {
            PyErr_SetString(PyExc_ValueError, "not a base32 run");
            return -1;
        }
    }
    unsigned char *raw = PyMem_Malloc(size / 8 * 5 + 5);
    if (raw == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t start = 0; start < 8 && size - start >= 13; start++) {
        Py_ssize_t n = 0;
        uint32_t acc = 0;
        int bits = 0;
        double limit = noise_limit((size - start) * 5 / 8); /* dropped early: see b64 */
        Py_ssize_t noise = 0;
        for (Py_ssize_t i = start; i < size && (double)noise <= limit; i++) {
            acc = (acc << 5 | (uint32_t)b32_value(chars[i])) & 0x1FFF; /* < 13 bits live */
            bits += 5;
            if (bits >= 8) {
                bits -= 8;
                raw[n++] = (unsigned char)(acc >> bits);
                noise += noise_at(raw, n - 1);
            }
        }
        if ((double)noise > limit) {
            continue;
        }
        if (append_text(out, raw, n) < 0) {
            PyMem_Free(raw);
            return -1;
        }
    }
    PyMem_Free(raw);
    return 0;
}

static PyObject *
b32_forms(PyObject *module, PyObject *run)
{
    return forms_of(run, b32_forms_into);
}

/* The end of the base32 labels from src[i] on (fingerprints._B32_LABELS: runs of base32
 * characters joined by single dots) and, in *keep, where the run kept ends: after the
 * last label with a digit 2-7, else after the first label (_py_b32_runs drops the
 * trailing labels without one). src[i] is a base32 character. */
static Py_ssize_t
b32_labels(const unsigned char *src, Py_ssize_t size, Py_ssize_t i, Py_ssize_t *keep)
{
    Py_ssize_t first = -1;
    *keep = -1;
    for (;;) {
        int digit = 0;
        while (i < size && b32_value(src[i]) >= 0) {
            digit |= src[i] >= '2' && src[i] <= '7';
            i++;
        }
        if (first < 0) {
            first = i;
        }
        if (digit) {
            *keep = i;
        }
        if (i + 1 < size && src[i] == '.' && b32_value(src[i + 1]) >= 0) {
            i++;
            continue;
        }
        if (*keep < 0) {
            *keep = first;
        }
        return i;
    }
}

/* The base32 runs of src (ASCII characters, anything else as a byte in no run) as
 * _py_b32_runs finds them (the labels kept joined; at least GRAM characters, of one
 * case or of both with a digit 2-7): each appended to out as a str, or with decode decoded into
 * it (b32_forms_into). 0, or -1 on error. */
static int
b32_runs_into(const unsigned char *src, Py_ssize_t size, PyObject *out, int decode)
{
    unsigned char *run = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    if (run == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t i = 0;
    while (i < size) {
        if (b32_value(src[i]) < 0) {
            i++;
            continue;
        }
        Py_ssize_t keep;
        Py_ssize_t end = b32_labels(src, size, i, &keep);
        Py_ssize_t n = 0;
        for (Py_ssize_t j = i; j < keep; j++) {
            if (src[j] != '.') {
                run[n++] = src[j];
            }
        }
        i = end;
        int upper = 0, lower = 0, digit = 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            upper |= run[j] >= 'A' && run[j] <= 'Z';
            lower |= run[j] >= 'a' && run[j] <= 'z';
            digit |= run[j] >= '2' && run[j] <= '7';
        }
        /* one case, or both with a digit 2-7 (digits alone: none) */
        if (n < GRAM || (!upper && !lower) || (upper && lower && !digit)) {
            continue;
        }
        int failed;
        if (decode) {
            failed = b32_forms_into(run, n, out) < 0;
        } else {
            PyObject *text = PyUnicode_DecodeASCII((const char *)run, n, "strict");
            failed = text == NULL || PyList_Append(out, text) < 0;
            Py_XDECREF(text);
        }
        if (failed) {
            PyMem_Free(run);
            return -1;
        }
    }
    PyMem_Free(run);
    return 0;
}

/* A character as a byte of the runs' scans: itself when ASCII, else 0xFF (in no run). */
static inline unsigned char
projected(Py_UCS4 c)
{
    return c < 128 ? (unsigned char)c : 0xFF;
}

/* b32_runs(source) -> list[str]: _py_b32_runs (a character that is not ASCII is in no
 * run). */
static PyObject *
b32_runs(PyObject *module, PyObject *source)
{
    if (!PyUnicode_Check(source)) {
        PyErr_SetString(PyExc_TypeError, "b32_runs(source: str)");
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(source) < 0) {
        return NULL;
    }
#endif
    int kind = PyUnicode_KIND(source);
    const void *data = PyUnicode_DATA(source);
    Py_ssize_t size = PyUnicode_GET_LENGTH(source);
    unsigned char *src = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    PyObject *out = PyList_New(0);
    if (src == NULL || out == NULL) {
        PyMem_Free(src);
        Py_XDECREF(out);
        return src == NULL ? PyErr_NoMemory() : NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        src[i] = projected(PyUnicode_READ(kind, data, i));
    }
    if (b32_runs_into(src, size, out, 0) < 0) {
        Py_CLEAR(out);
    }
    PyMem_Free(src);
    return out;
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

/* -- a whole token's fingerprint: 64 bits of BLAKE2b (fingerprints._bytes_hash) ----- */

static const uint64_t blake2b_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
    0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
    0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const unsigned char blake2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t
rotr64(uint64_t x, int n)
{
    return (x >> n) | (x << (64 - n));
}

#define BLAKE2B_G(a, b, c, d, x, y)     \
    do {                                \
        a = a + b + (x);                \
        d = rotr64(d ^ a, 32);          \
        c = c + d;                      \
        b = rotr64(b ^ c, 24);          \
        a = a + b + (y);                \
        d = rotr64(d ^ a, 16);          \
        c = c + d;                      \
        b = rotr64(b ^ c, 63);          \
    } while (0)

/* One round with its message schedule: r a constant, so every sigma index folds into a
 * fixed word of m (the loop over 12 rounds with a looked-up schedule cost about twice
 * the instructions, and a probe hashes every specific token of every form). */
#define BLAKE2B_ROUND(r)                                                                 \
    do {                                                                                 \
        BLAKE2B_G(v[0], v[4], v[8], v[12], m[blake2b_sigma[r][0]], m[blake2b_sigma[r][1]]);    \
        BLAKE2B_G(v[1], v[5], v[9], v[13], m[blake2b_sigma[r][2]], m[blake2b_sigma[r][3]]);    \
        BLAKE2B_G(v[2], v[6], v[10], v[14], m[blake2b_sigma[r][4]], m[blake2b_sigma[r][5]]);   \
        BLAKE2B_G(v[3], v[7], v[11], v[15], m[blake2b_sigma[r][6]], m[blake2b_sigma[r][7]]);   \
        BLAKE2B_G(v[0], v[5], v[10], v[15], m[blake2b_sigma[r][8]], m[blake2b_sigma[r][9]]);   \
        BLAKE2B_G(v[1], v[6], v[11], v[12], m[blake2b_sigma[r][10]], m[blake2b_sigma[r][11]]); \
        BLAKE2B_G(v[2], v[7], v[8], v[13], m[blake2b_sigma[r][12]], m[blake2b_sigma[r][13]]);  \
        BLAKE2B_G(v[3], v[4], v[9], v[14], m[blake2b_sigma[r][14]], m[blake2b_sigma[r][15]]);  \
    } while (0)

static void
blake2b_compress(uint64_t h[8], const unsigned char block[128], uint64_t counter, int last)
{
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&m[i], block + 8 * i, 8); /* little-endian words: a plain load */
#else
        uint64_t word = 0;
        for (int b = 7; b >= 0; b--) {
            word = (word << 8) | block[8 * i + b]; /* little-endian */
        }
        m[i] = word;
#endif
    }
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= counter; /* the high word of the 128-bit counter stays 0: inputs < 2**64 */
    if (last) {
        v[14] = ~v[14];
    }
    BLAKE2B_ROUND(0);
    BLAKE2B_ROUND(1);
    BLAKE2B_ROUND(2);
    BLAKE2B_ROUND(3);
    BLAKE2B_ROUND(4);
    BLAKE2B_ROUND(5);
    BLAKE2B_ROUND(6);
    BLAKE2B_ROUND(7);
    BLAKE2B_ROUND(8);
    BLAKE2B_ROUND(9);
    BLAKE2B_ROUND(10);
    BLAKE2B_ROUND(11);
    for (int i = 0; i < 8; i++) {
        h[i] ^= v[i] ^ v[i + 8];
    }
}

/* int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big"): BLAKE2b (RFC
 * 7693) with an 8-byte digest and no key; the digest is the first 8 bytes of h[0] in
 * little-endian order, read here as a big-endian integer. */
static uint64_t
token_hash(const unsigned char *data, size_t size)
{
    uint64_t h[8];
    unsigned char block[128];
    uint64_t counter = 0;
    memcpy(h, blake2b_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8; /* fanout 1, depth 1, no key, digest length 8 */
    while (size > 128) {
        counter += 128;
        blake2b_compress(h, data, counter, 0);
        data += 128;
        size -= 128;
    }
    memset(block, 0, sizeof block);
    if (size > 0) {
        memcpy(block, data, size);
    }
    counter += size;
    blake2b_compress(h, block, counter, 1);
    uint64_t out = 0;
    for (int b = 0; b < 8; b++) {
        out = (out << 8) | ((h[0] >> (8 * b)) & 0xFF);
    }
    return out;
}

/* Add an int to a set (or a brand-new frozenset being filled): 0, or -1 on error. */
static int
add_hash(PyObject *set, uint64_t value)
{
    PyObject *item = PyLong_FromUnsignedLongLong(value);
    if (item == NULL) {
        return -1;
    }
    int failed = PySet_Add(set, item);
    Py_DECREF(item);
    return failed;
}

static PyObject *
token_hash_py(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint64_t value = token_hash((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(value);
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
static inline int is_alpha_or_underscore(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
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

/* fingerprints._specific of an ASCII token (raw, size) and its norm (n >= 8 bytes):
 * letters and digits, an @, or (not a piece) 12+ characters that do not read as words. */
static int
specific(const unsigned char *raw, Py_ssize_t size, int piece, const unsigned char *norm,
         Py_ssize_t n)
{
    int at = 0, digit = 0, letter = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        at |= norm[i] == '@';
        digit |= norm[i] >= '0' && norm[i] <= '9';
        letter |= is_lower(norm[i]);
    }
    return at || (digit && letter) || (!piece && n >= 12 && !wordlike(raw, size));
}

/* One token (fingerprints._whole's loop body): its norm appended to norms when it is
 * specific (norms a list; a set: its BLAKE2b-64 added there instead, for the probe); with grams (a list) and not a piece, every gram of a long token that does
 * not read as words appended there. 0, or -1 on error. */
static int
whole_token(const unsigned char *raw, Py_ssize_t size, int piece, unsigned char *norm,
            void *sink, PyObject *grams)
{
    PyObject *norms = sink;
    Py_ssize_t n = ascii_norm(raw, size, norm);
    if (n >= 8) {
        if (specific(raw, size, piece, norm, n)) {
            if (PyAnySet_Check(norms)) { /* the probe's set: the token's hash itself */
                if (add_hash(norms, token_hash(norm, (size_t)n)) < 0) {
                    return -1;
                }
                goto grams;
            }
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
grams:
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

/* What is done with one token: whole_token, probe_token, turn_token (sink: what each
 * adds to). */
typedef int (*token_fn)(const unsigned char *raw, Py_ssize_t size, int piece,
                        unsigned char *norm, void *sink, PyObject *grams);

static int
each_token(const unsigned char *word, Py_ssize_t size, unsigned char *norm, void *sink,
           PyObject *grams, token_fn on_token);

/* -- the probe's fingerprints, gathered in C before any int object is made ---------- */

/* A set of 64-bit fingerprints in the order first added: the probe adds every gram and
 * token hash of every form here (many are the same: a form and its URL-decoding share
 * most grams), and makes one int object and one set entry per distinct value at the
 * end (fpset_freeze), in that same order: the frozenset is built exactly as adding each
 * value to it directly would build it. */
#define FPSET_SMALL 128 /* values held in the struct itself: most probes fit */

typedef struct {
    uint64_t *values; /* the distinct values, in the order first added */
    Py_ssize_t count;
    int32_t *slots;  /* open addressing: index + 1 into values, 0 for an empty slot */
    Py_ssize_t mask; /* slots - 1 (a power of two, at least twice count) */
    uint64_t small_values[FPSET_SMALL];
    int32_t small_slots[2 * FPSET_SMALL];
} fpset;

static void
fpset_init(fpset *set)
{
    set->values = set->small_values;
    set->slots = set->small_slots;
    set->count = 0;
    set->mask = 2 * FPSET_SMALL - 1;
    memset(set->small_slots, 0, sizeof set->small_slots);
}

static void
fpset_free(fpset *set)
{
    if (set->values != set->small_values) {
        PyMem_Free(set->values);
    }
    if (set->slots != set->small_slots) {
        PyMem_Free(set->slots);
    }
    fpset_init(set);
}

static inline Py_ssize_t
fpset_slot(const fpset *set, uint64_t value)
{
    /* the values are hashes already; the multiply spreads a gram's low bits */
    return (Py_ssize_t)((value * 0x9E3779B97F4A7C15ULL) >> 32) & set->mask;
}

/* Room for twice as many values (values and slots): 0, or -1 with MemoryError. */
static int
fpset_grow(fpset *set)
{
    Py_ssize_t size = (set->mask + 1) * 2;
    if (size / 2 > INT32_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t *values = PyMem_Malloc((size_t)(size / 2) * sizeof(uint64_t));
    int32_t *slots = PyMem_Calloc((size_t)size, sizeof(int32_t));
    if (values == NULL || slots == NULL) {
        PyMem_Free(values);
        PyMem_Free(slots);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(values, set->values, (size_t)set->count * sizeof(uint64_t));
    if (set->values != set->small_values) {
        PyMem_Free(set->values);
    }
    if (set->slots != set->small_slots) {
        PyMem_Free(set->slots);
    }
    set->values = values;
    set->slots = slots;
    set->mask = size - 1;
    for (Py_ssize_t i = 0; i < set->count; i++) {
        Py_ssize_t at = fpset_slot(set, values[i]);
        while (slots[at] != 0) {
            at = (at + 1) & set->mask;
        }
        slots[at] = (int32_t)(i + 1);
    }
    return 0;
}

/* Add a value (nothing if it is there): 0, or -1 on error. Inlined: it runs for every
 * gram of every form. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int
fpset_add(fpset *set, uint64_t value)
{
    if (set->count * 2 >= set->mask + 1 && fpset_grow(set) < 0) {
        return -1;
    }
    Py_ssize_t at = fpset_slot(set, value);
    while (set->slots[at] != 0) {
        if (set->values[set->slots[at] - 1] == value) {
            return 0;
        }
        at = (at + 1) & set->mask;
    }
    set->values[set->count++] = value;
    set->slots[at] = (int32_t)set->count;
    return 0;
}

/* Whether the set holds value. */
static inline int
fpset_contains(const fpset *set, uint64_t value)
{
    Py_ssize_t at = fpset_slot(set, value);
    while (set->slots[at] != 0) {
        if (set->values[set->slots[at] - 1] == value) {
            return 1;
        }
        at = (at + 1) & set->mask;
    }
    return 0;
}

/* The values as a new frozenset (added in order, as the probe used to add them one by
 * one); NULL on error. */
static PyObject *new_out(void);

static PyObject *
fpset_freeze(const fpset *set)
{
    PyObject *out = new_out();
    for (Py_ssize_t i = 0; out != NULL && i < set->count; i++) {
        if (add_hash(out, set->values[i]) < 0) {
            Py_CLEAR(out);
        }
    }
    if (out != NULL && !PyFrozenSet_CheckExact(out)) {
        Py_SETREF(out, PyFrozenSet_New(out));
    }
    return out;
}

/* The values as a new frozenset or, packed, as bytes of native-order uint64 values (for
 * _history.packed: no int object made); NULL on error. */
static PyObject *
fpset_out(const fpset *set, int packed)
{
    return packed ? PyBytes_FromStringAndSize((const char *)set->values,
                                              set->count * (Py_ssize_t)sizeof(uint64_t))
                  : fpset_freeze(set);
}

/* One token of the probe (whole_token without grams, into an fpset): the BLAKE2b-64 of
 * its norm when it is specific. 0, or -1 on error. */
static int
probe_token(const unsigned char *raw, Py_ssize_t size, int piece, unsigned char *norm,
            void *sink, PyObject *grams)
{
    (void)grams;
    Py_ssize_t n = ascii_norm(raw, size, norm);
    if (n >= 8 && specific(raw, size, piece, norm, n)) {
        return fpset_add(sink, token_hash(norm, (size_t)n));
    }
    return 0;
}

/* One long word of the probe: probe_token of each of its tokens and pieces. */
static int
probe_word(const unsigned char *word, Py_ssize_t size, unsigned char *norm, fpset *set)
{
    return each_token(word, size, norm, set, NULL, probe_token);
}

/* One long word: whole_token of each of its tokens and pieces. 0, or -1 on error. */
static int
whole_word(const unsigned char *word, Py_ssize_t size, unsigned char *norm, PyObject *norms,
           PyObject *grams)
{
    return each_token(word, size, norm, norms, grams, whole_token);
}

/* on_token(token, piece, norm, norms, grams) for each token of a long word (cut at
 * _SPLIT runs) and each of its pieces (cut at _SUBSPLIT runs; grams NULL), as
 * fingerprints._tokens yields them. 0, or -1 on error. */
static int
each_token(const unsigned char *word, Py_ssize_t size, unsigned char *norm, void *sink,
           PyObject *grams, token_fn on_token)
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
            if (on_token(raw, length, 0, norm, sink, grams) < 0) {
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
                if (to - from >= 8 && on_token(raw + from, to - from, 1, norm, sink, NULL) < 0) {
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

/* whole_tokens(long_words, with_grams, hashed=False) -> (norms, grams) | None:
 * fingerprints._py_whole for ASCII words: the norms, as bytes, of the specific tokens
 * (with hashed, the set of their hashes: BLAKE2b-64 here); None when a word is not
 * ASCII (the Python path then). */
static PyObject *
whole_tokens(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "whole_tokens(long_words: list[str], with_grams, hashed=False)");
        return NULL;
    }
    PyObject *words = args[0];
    int with_grams = PyObject_IsTrue(args[1]);
    if (with_grams < 0) {
        return NULL;
    }
    int hashed = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (hashed < 0) {
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
    PyObject *norms = hashed ? PySet_New(NULL) : PyList_New(0); /* a set: the hashes */
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

/* -- the decodings of a text (fingerprints._py_decodings) and the probe ------------ */

#define MAX_DECODINGS 64
#define DEPTH 3
#define MIN_TOKEN 8

/* str.split()'s whitespace among ASCII characters. */
static inline int
is_ascii_space(unsigned char c)
{
    return (c >= 9 && c <= 13) || (c >= 28 && c <= 32);
}

static inline int
is_b64_char(unsigned char c)
{
    return B64_VALUE[c] >= 0;
}

/* fingerprints._looks_encoded of an ASCII run: a digit, an upper- and a lower-case
 * letter. */
static int
looks_encoded(const unsigned char *run, Py_ssize_t size)
{
    int digit = 0, upper = 0, lower = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        digit |= run[i] >= '0' && run[i] <= '9';
        upper |= is_upper(run[i]);
        lower |= is_lower(run[i]);
    }
    return digit && upper && lower;
}

/* The base64 runs of src (its characters as bytes, any non-ASCII one as 0xFF: in no
 * run) decoded into found (each, with decode_plain or when it looks encoded); then, if
 * there was a base64 run, its hex runs (a hex run is a base64 run too); then, with
 * decode_plain, its base32 runs: the loop body of fingerprints._py_decodings for one
 * source. 0, or -1 on error. */
static int
decode_source(const unsigned char *src, Py_ssize_t size, int decode_plain, PyObject *found)
{
    int any = 0;
    Py_ssize_t i = 0;
    while (i < size) {
        Py_ssize_t end = i;
        while (end < size && is_b64_char(src[end])) {
            end++;
        }
        if (end - i < GRAM) {
            i = end + 1;
            continue;
        }
        Py_ssize_t stop = end;
        while (stop < size && stop - end < 2 && src[stop] == '=') {
            stop++;
        }
        any = 1;
        if ((decode_plain || looks_encoded(src + i, end - i))
            && b64_forms_into(src + i, stop - i, found) < 0) {
            return -1;
        }
        i = stop;
    }
    i = 0;
    while (any && i < size) {
        Py_ssize_t end = i;
        while (end < size && hex_value(src[end]) >= 0) {
            end++;
        }
        if (end - i < GRAM) {
            i = end + 1;
            continue;
        }
        if (hex_forms_into(src + i, end - i, found) < 0) {
            return -1;
        }
        i = end;
    }
    return decode_plain ? b32_runs_into(src, size, found, 1) : 0;
}

/* The runs of text's words of at least GRAM characters, then (with more than one word,
 * and decode_plain or more than one long word) of its words joined: re-wrapped base64
 * or hex. scratch: room for len(text) bytes. */
static int
decode_runs_ascii(const unsigned char *chars, Py_ssize_t size, int decode_plain,
                  unsigned char *scratch, PyObject *found);

static int
decode_runs(PyObject *text, int decode_plain, unsigned char *scratch, PyObject *found)
{
    if (PyUnicode_IS_ASCII(text)) {
        return decode_runs_ascii(PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text),
                                 decode_plain, scratch, found);
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    Py_ssize_t words = 0, long_words = 0;
    Py_ssize_t i = 0;
    while (i < size) {
        while (i < size && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) {
            i++;
        }
        if (i >= size) {
            break;
        }
        Py_ssize_t start = i;
        while (i < size && !Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) {
            i++;
        }
        words++;
        if (i - start >= GRAM) {
            long_words++;
            for (Py_ssize_t j = start; j < i; j++) {
                scratch[j - start] = projected(PyUnicode_READ(kind, data, j));
            }
            if (decode_source(scratch, i - start, decode_plain, found) < 0) {
                return -1;
            }
        }
    }
    if (words > 1 && (decode_plain || long_words > 1)) {
        Py_ssize_t n = 0;
        for (i = 0; i < size; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (!Py_UNICODE_ISSPACE(c)) {
                scratch[n++] = projected(c);
            }
        }
        if (decode_source(scratch, n, decode_plain, found) < 0) {
            return -1;
        }
    }
    return 0;
}

/* decode_runs of an ASCII text, read as bytes (no character to project; a word is the
 * source itself, and the joined words are copied once). */
static int
decode_runs_ascii(const unsigned char *chars, Py_ssize_t size, int decode_plain,
                  unsigned char *scratch, PyObject *found)
{
    Py_ssize_t words = 0, long_words = 0;
    Py_ssize_t i = 0;
    while (i < size) {
        while (i < size && is_ascii_space(chars[i])) {
            i++;
        }
        if (i >= size) {
            break;
        }
        Py_ssize_t start = i;
        while (i < size && !is_ascii_space(chars[i])) {
            i++;
        }
        words++;
        if (i - start >= GRAM) {
            long_words++;
            if (decode_source(chars + start, i - start, decode_plain, found) < 0) {
                return -1;
            }
        }
    }
    if (words > 1 && (decode_plain || long_words > 1)) {
        Py_ssize_t n = 0;
        for (i = 0; i < size; i++) {
            if (!is_ascii_space(chars[i])) {
                scratch[n++] = chars[i];
            }
        }
        if (decode_source(scratch, n, decode_plain, found) < 0) {
            return -1;
        }
    }
    return 0;
}

/* urllib.parse.unquote_plus(text) (UTF-8, errors "replace"): '+' read as a space;
 * in each run of ASCII characters, %XX escapes read as bytes and the run decoded as
 * UTF-8; other characters kept. buffer: room for len(text) characters. */
static PyObject *
unquote_plus(PyObject *text, Py_UCS4 *buffer, unsigned char *scratch)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    Py_ssize_t n = 0;
    Py_ssize_t i = 0;
    while (i < size) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 128) {
            buffer[n++] = c;
            i++;
            continue;
        }
        Py_ssize_t bytes = 0; /* an ASCII run, unquoted into scratch */
        while (i < size && (c = PyUnicode_READ(kind, data, i)) < 128) {
            if (c == '%' && i + 2 < size) { /* two hex digits in this ASCII run */
                Py_UCS4 hi = PyUnicode_READ(kind, data, i + 1);
                Py_UCS4 lo = PyUnicode_READ(kind, data, i + 2);
                if (hi < 128 && lo < 128 && hex_value((unsigned char)hi) >= 0
                    && hex_value((unsigned char)lo) >= 0) {
                    scratch[bytes++] = (unsigned char)(hex_value((unsigned char)hi) << 4
                                                       | hex_value((unsigned char)lo));
                    i += 3;
                    continue;
                }
            }
            scratch[bytes++] = c == '+' ? ' ' : (unsigned char)c;
            i++;
        }
        PyObject *decoded = PyUnicode_DecodeUTF8((const char *)scratch, bytes, "replace");
        if (decoded == NULL) {
            return NULL;
        }
        int dkind = PyUnicode_KIND(decoded);
        const void *ddata = PyUnicode_DATA(decoded);
        Py_ssize_t length = PyUnicode_GET_LENGTH(decoded);
        for (Py_ssize_t j = 0; j < length; j++) { /* never more characters than bytes */
            buffer[n++] = PyUnicode_READ(dkind, ddata, j);
        }
        Py_DECREF(decoded);
    }
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buffer, n);
}

/* fingerprints._json_unescape: \uXXXX (any code point below 0x10000, a lone
 * surrogate too) and \n \r \t \b \f \" \\ \/ read; any other backslash kept. */
static PyObject *
json_unescape(PyObject *text, Py_UCS4 *buffer)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    Py_ssize_t n = 0;
    Py_ssize_t i = 0;
    while (i < size) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '\\' && i + 1 < size) {
            Py_UCS4 d = PyUnicode_READ(kind, data, i + 1);
            if (d == 'u' && i + 5 < size) {
                Py_UCS4 code = 0;
                int ok = 1;
                for (Py_ssize_t j = i + 2; j < i + 6; j++) {
                    Py_UCS4 h = PyUnicode_READ(kind, data, j);
                    if (h >= 128 || hex_value((unsigned char)h) < 0) {
                        ok = 0;
                        break;
                    }
                    code = code << 4 | (Py_UCS4)hex_value((unsigned char)h);
                }
                if (ok) {
                    buffer[n++] = code;
                    i += 6;
                    continue;
                }
            }
            Py_UCS4 out = d == 'n' ? '\n' : d == 'r' ? '\r' : d == 't' ? '\t' : d == 'b' ? '\b'
                          : d == 'f' ? '\f' : (d == '"' || d == '\\' || d == '/') ? d : 0;
            if (out != 0) {
                buffer[n++] = out;
                i += 2;
                continue;
            }
        }
        buffer[n++] = c;
        i++;
    }
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buffer, n);
}

/* fingerprints._x_unescape: each run of \xNN escapes (two hex digits each) read as
 * bytes and decoded as UTF-8 ("replace"); any other character kept. buffer: room for
 * len(text) characters; scratch: for len(text) bytes. */
static PyObject *
x_unescape(PyObject *text, Py_UCS4 *buffer, unsigned char *scratch)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    Py_ssize_t n = 0;
    Py_ssize_t i = 0;
    while (i < size) {
        Py_ssize_t bytes = 0;
        while (i + 3 < size && PyUnicode_READ(kind, data, i) == '\\'
               && PyUnicode_READ(kind, data, i + 1) == 'x') {
            Py_UCS4 hi = PyUnicode_READ(kind, data, i + 2);
            Py_UCS4 lo = PyUnicode_READ(kind, data, i + 3);
            if (hi >= 128 || lo >= 128 || hex_value((unsigned char)hi) < 0
                || hex_value((unsigned char)lo) < 0) {
                break;
            }
            scratch[bytes++] = (unsigned char)(hex_value((unsigned char)hi) << 4
                                               | hex_value((unsigned char)lo));
            i += 4;
        }
        if (bytes == 0) {
            buffer[n++] = PyUnicode_READ(kind, data, i);
            i++;
            continue;
        }
        PyObject *decoded = PyUnicode_DecodeUTF8((const char *)scratch, bytes, "replace");
        if (decoded == NULL) {
            return NULL;
        }
        int dkind = PyUnicode_KIND(decoded);
        const void *ddata = PyUnicode_DATA(decoded);
        Py_ssize_t length = PyUnicode_GET_LENGTH(decoded);
        for (Py_ssize_t j = 0; j < length; j++) { /* never more characters than bytes */
            buffer[n++] = PyUnicode_READ(dkind, ddata, j);
        }
        Py_DECREF(decoded);
    }
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buffer, n);
}

/* Whether text holds a backslash followed by an 'x' ("\\x" in text). */
static int
has_x_escape(PyObject *text)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t i = 0; i + 1 < size; i++) {
        if (PyUnicode_READ(kind, data, i) == '\\' && PyUnicode_READ(kind, data, i + 1) == 'x') {
            return 1;
        }
    }
    return 0;
}

/* Whether text holds what fingerprints._HTML_ENTITY finds: '&' then '#', or then an
 * ASCII letter, ASCII letters and digits and ';'. */
static int
has_html_entity(PyObject *text)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t i = 0; i + 1 < size; i++) {
        if (PyUnicode_READ(kind, data, i) != '&') {
            continue;
        }
        Py_UCS4 c = PyUnicode_READ(kind, data, i + 1);
        if (c == '#') {
            return 1;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
            continue;
        }
        Py_ssize_t j = i + 2;
        while (j < size && (c = PyUnicode_READ(kind, data, j)) < 128 && is_alnum((unsigned char)c)) {
            j++;
        }
        if (j < size && c == ';') {
            return 1;
        }
    }
    return 0;
}

/* html.unescape(text), the standard library's own (its entity table and the quirks of
 * its numeric references are the reference: the same function on both paths). */
static PyObject *
html_unescape(PyObject *text)
{
    PyObject *html = PyImport_ImportModule("html");
    if (html == NULL) {
        return NULL;
    }
    PyObject *form = PyObject_CallMethod(html, "unescape", "O", text);
    Py_DECREF(html);
    if (form != NULL && !PyUnicode_Check(form)) {
        PyErr_SetString(PyExc_TypeError, "html.unescape did not return a str");
        Py_CLEAR(form);
    }
#if PY_VERSION_HEX < 0x030C0000
    if (form != NULL && PyUnicode_READY(form) < 0) {
        Py_CLEAR(form);
    }
#endif
    return form;
}

/* Append form (a new reference, stolen; NULL: an error already set) to found. */
static int
append_form(PyObject *found, PyObject *form)
{
    int failed = form == NULL || PyList_Append(found, form) < 0;
    Py_XDECREF(form);
    return failed ? -1 : 0;
}

static int
has_char(PyObject *text, Py_UCS4 c)
{
    return PyUnicode_FindChar(text, c, 0, PyUnicode_GET_LENGTH(text), 1) >= 0;
}

static inline unsigned char
rot13_byte(unsigned char c)
{
    if (c >= 'a' && c <= 'z') return (unsigned char)('a' + (c - 'a' + 13) % 26);
    if (c >= 'A' && c <= 'Z') return (unsigned char)('A' + (c - 'A' + 13) % 26);
    return c;
}

/* One token (fingerprints._py_turned_tokens' loop body): when it is specific (and not
 * a piece), itself reversed then ROT13 appended to found. unused: NULL. 0, or -1 on
 * error. */
static int
turn_token(const unsigned char *raw, Py_ssize_t size, int piece, unsigned char *norm,
           void *sink, PyObject *unused)
{
    PyObject *found = sink;
    (void)unused;
    if (piece) {
        return 0;
    }
    Py_ssize_t n = ascii_norm(raw, size, norm);
    if (n < MIN_TOKEN || !specific(raw, size, 0, norm, n)) {
        return 0;
    }
    for (int rot13 = 0; rot13 < 2; rot13++) {
        PyObject *form = PyUnicode_New(size, 127);
        if (form == NULL) {
            return -1;
        }
        Py_UCS1 *out = PyUnicode_1BYTE_DATA(form);
        for (Py_ssize_t i = 0; i < size; i++) {
            if (rot13) {
                out[i] = rot13_byte(raw[i]);
            } else {
                out[size - 1 - i] = raw[i];
            }
        }
        if (append_form(found, form) < 0) {
            return -1;
        }
    }
    return 0;
}

/* fingerprints._py_turned_tokens(text) appended to found: in C for an ASCII text
 * (norm: room for its length), else by the Python reference. 0, or -1 on error. */
static int
turned_tokens_of(PyObject *text, unsigned char *norm, PyObject *found)
{
    if (!PyUnicode_IS_ASCII(text)) {
        PyObject *module = PyImport_ImportModule("interlock.session.fingerprints");
        if (module == NULL) {
            return -1;
        }
        PyObject *turned = PyObject_CallMethod(module, "_py_turned_tokens", "O", text);
        Py_DECREF(module);
        if (turned == NULL) {
            return -1;
        }
        int failed = !PyList_Check(turned) || PyList_SetSlice(found, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, turned) < 0;
        if (failed && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "_py_turned_tokens did not return a list");
        }
        Py_DECREF(turned);
        return failed ? -1 : 0;
    }
    const unsigned char *chars = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    Py_ssize_t i = 0;
    while (i < size) {
        while (i < size && is_ascii_space(chars[i])) {
            i++;
        }
        Py_ssize_t start = i;
        while (i < size && !is_ascii_space(chars[i])) {
            i++;
        }
        if (i - start >= MIN_TOKEN
            && each_token(chars + start, i - start, norm, found, NULL, turn_token) < 0) {
            return -1;
        }
    }
    return 0;
}

/* turned_tokens(text) -> list[str] | None: fingerprints._py_turned_tokens of an ASCII
 * text (None when it is not ASCII: the Python path then). */
static PyObject *
turned_tokens(PyObject *module, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "turned_tokens(text: str)");
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) {
        return NULL;
    }
#endif
    if (!PyUnicode_IS_ASCII(text)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    unsigned char *norm = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    PyObject *found = PyList_New(0);
    if (norm == NULL || found == NULL) {
        PyMem_Free(norm);
        Py_XDECREF(found);
        return norm == NULL ? PyErr_NoMemory() : NULL;
    }
    int failed = turned_tokens_of(text, norm, found);
    PyMem_Free(norm);
    if (failed) {
        Py_DECREF(found);
        return NULL;
    }
    return found;
}

/* fingerprints._py_decodings(text, decode_plain=...) as a list: text and what it
 * decodes to, up to DEPTH layers and MAX_DECODINGS forms, in the same order. */
static PyObject *
decodings_of(PyObject *text, int decode_plain)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) {
        return NULL;
    }
#endif
    Py_ssize_t stack[MAX_DECODINGS]; /* forms' indices: every form is pushed once */
    int depth[MAX_DECODINGS];
    Py_ssize_t pending = 0;
    Py_ssize_t room = 0; /* the longest form's length (the scratch buffers' size) */
    Py_UCS4 *buffer = NULL;
    unsigned char *scratch = NULL;
    PyObject *found = NULL;
    PyObject *seen = PySet_New(NULL);
    PyObject *forms = PyList_New(0);
    if (seen == NULL || forms == NULL || PySet_Add(seen, text) < 0
        || PyList_Append(forms, text) < 0) {
        goto fail;
    }
    stack[pending] = 0;
    depth[pending++] = 0;
    while (pending > 0) {
        pending--;
        PyObject *current = PyList_GET_ITEM(forms, stack[pending]);
        int level = depth[pending];
        if (level >= DEPTH) {
            continue;
        }
        Py_ssize_t size = PyUnicode_GET_LENGTH(current);
        if (size > room || buffer == NULL) {
            room = size > room ? size : room;
            PyMem_Free(buffer);
            PyMem_Free(scratch);
            buffer = PyMem_Malloc((room > 0 ? (size_t)room : 1) * sizeof(Py_UCS4));
            scratch = PyMem_Malloc(room > 0 ? (size_t)room : 1);
            if (buffer == NULL || scratch == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
        }
        found = PyList_New(0);
        if (found == NULL) {
            goto fail;
        }
        /* the first turns forms of found are turned tokens: leaves */
        if (decode_plain && turned_tokens_of(current, scratch, found) < 0) {
            goto fail;
        }
        Py_ssize_t turns = PyList_GET_SIZE(found);
        if (decode_plain) {
            if ((has_char(current, '%') || has_char(current, '+'))
                && append_form(found, unquote_plus(current, buffer, scratch)) < 0) {
                goto fail;
            }
            if (has_char(current, '\\')) {
                if (append_form(found, json_unescape(current, buffer)) < 0) {
                    goto fail;
                }
                if (has_x_escape(current)
                    && append_form(found, x_unescape(current, buffer, scratch)) < 0) {
                    goto fail;
                }
            }
            if (has_html_entity(current) && append_form(found, html_unescape(current)) < 0) {
                goto fail;
            }
        }
        if (size >= GRAM && decode_runs(current, decode_plain, scratch, found) < 0) {
            goto fail;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(found); i++) {
            PyObject *form = PyList_GET_ITEM(found, i);
            if (PyList_GET_SIZE(forms) >= MAX_DECODINGS) {
                break;
            }
            int known = PySet_Contains(seen, form);
            if (known < 0) {
                goto fail;
            }
            if (known) {
                continue;
            }
            if (PySet_Add(seen, form) < 0 || PyList_Append(forms, form) < 0) {
                goto fail;
            }
            if (i >= turns) { /* a turned form is probed, not decoded */
                stack[pending] = PyList_GET_SIZE(forms) - 1;
                depth[pending++] = level + 1;
            }
        }
        Py_CLEAR(found);
    }
    PyMem_Free(buffer);
    PyMem_Free(scratch);
    Py_DECREF(seen);
    return forms;
fail:
    PyMem_Free(buffer);
    PyMem_Free(scratch);
    Py_XDECREF(found);
    Py_XDECREF(seen);
    Py_XDECREF(forms);
    return NULL;
}

static PyObject *
decodings(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decodings(text: str, decode_plain: bool)");
        return NULL;
    }
    int decode_plain = PyObject_IsTrue(args[1]);
    if (decode_plain < 0) {
        return NULL;
    }
    return decodings_of(args[0], decode_plain);
}

/* fingerprints._probe_form of an ASCII form: the whole-token hashes of its specific
 * long words and every gram of its norm, added to out. norm: room for size bytes. */
static int
probe_ascii_form(const unsigned char *chars, Py_ssize_t size, unsigned char *norm,
                 fpset *out)
{
    Py_ssize_t i = 0;
    while (i < size) {
        while (i < size && is_ascii_space(chars[i])) {
            i++;
        }
        Py_ssize_t start = i;
        while (i < size && !is_ascii_space(chars[i])) {
            i++;
        }
        if (i - start >= MIN_TOKEN && probe_word(chars + start, i - start, norm, out) < 0) {
            return -1;
        }
    }
    Py_ssize_t n = ascii_norm(chars, size, norm); /* no 0 byte: grams at every position */
    for (Py_ssize_t j = 0; j + GRAM <= n; j++) {
        if (fpset_add(out, gram_hash(norm + j)) < 0) {
            return -1;
        }
    }
    return 0;
}

/* fingerprints.texts_of for the plain JSON-like values an argument usually is: a str
 * (a subclass read as its str), a dict with str keys, a list or a tuple (exact types,
 * nested at most 32 deep) of them, None. Its texts appended to out: 1; 0 when value holds anything else (the
 * caller walks it with texts_of then), -1 on error. No Python code runs while it
 * walks (exact types only: no __eq__, no __iter__): nothing can change under it. */
static int
collect_texts(PyObject *value, PyObject *out, int depth)
{
    if (PyUnicode_Check(value)) { /* a subclass read as the str it holds */
        PyObject *text = PyUnicode_FromObject(value);
        int failed = text == NULL || PyList_Append(out, text) < 0;
        Py_XDECREF(text);
        return failed ? -1 : 1;
    }
    if (value == Py_None) {
        return 1;
    }
    if (depth >= 32) {
        return 0;
    }
    if (PyDict_CheckExact(value)) {
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &pos, &key, &item)) {
            if (!PyUnicode_CheckExact(key)) {
                return 0;
            }
            if (PyList_Append(out, key) < 0) {
                return -1;
            }
            int done = collect_texts(item, out, depth + 1);
            if (done <= 0) {
                return done;
            }
        }
        return 1;
    }
    if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) {
        Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
        for (Py_ssize_t i = 0; i < size; i++) {
            int done = collect_texts(PySequence_Fast_GET_ITEM(value, i), out, depth + 1);
            if (done <= 0) {
                return done;
            }
        }
        return 1;
    }
    return 0;
}

/* probe(value, with_text) -> (frozenset[int], list[str]) | None:
 * fingerprints._py_probe_texts of value's texts (collect_texts; None when it cannot
 * walk value: the caller passes list(texts_of(value)) then) as far as their forms are
 * ASCII: the probe of every ASCII form of every text's decodings (but the texts
 * themselves without with_text: probe_seams), and the forms that are not ASCII (the
 * caller probes those: NFKC and case folding are Python's). */
/* A brand-new frozenset, to be filled before any other code sees it (as PySet_Add
 * allows); a set if this build gave a shared one (done() copies it then). */
static PyObject *
new_out(void)
{
    PyObject *out = PyFrozenSet_New(NULL);
    if (out != NULL && Py_REFCNT(out) != 1) {
        Py_SETREF(out, PySet_New(NULL));
    }
    return out;
}

/* (the fingerprints as a frozenset — or, packed, as bytes of native-order uint64
 * values, for _history.packed: no int object made —, others): others' reference
 * stolen, the fpset freed; NULL on error. */
static PyObject *
done(fpset *set, PyObject *others, int packed)
{
    PyObject *out = fpset_out(set, packed);
    fpset_free(set);
    PyObject *pair = out == NULL ? NULL : PyTuple_Pack(2, out, others);
    Py_XDECREF(out);
    Py_DECREF(others);
    return pair;
}

/* The probe of every ASCII form of text's decodings (without with_text, but text:
 * probe_seams takes what of it spans a seam) added to out;
 * the other forms appended to others. 0, or -1 on error. */
static int
probe_decodings(PyObject *text, int with_text, fpset *out, PyObject *others)
{
    PyObject *forms = decodings_of(text, 1);
    if (forms == NULL) {
        return -1;
    }
    unsigned char *norm = NULL;
    Py_ssize_t room = 0;
    for (Py_ssize_t i = with_text ? 0 : 1; i < PyList_GET_SIZE(forms); i++) {
        PyObject *form = PyList_GET_ITEM(forms, i);
        if (!PyUnicode_IS_ASCII(form)) {
            if (PyList_Append(others, form) < 0) {
                goto fail;
            }
            continue;
        }
        Py_ssize_t size = PyUnicode_GET_LENGTH(form);
        if (size > room || norm == NULL) {
            room = size > room ? size : room;
            PyMem_Free(norm);
            norm = PyMem_Malloc(room > 0 ? (size_t)room : 1);
            if (norm == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
        }
        if (probe_ascii_form(PyUnicode_1BYTE_DATA(form), size, norm, out) < 0) {
            goto fail;
        }
    }
    PyMem_Free(norm);
    Py_DECREF(forms);
    return 0;
fail:
    PyMem_Free(norm);
    Py_DECREF(forms);
    return -1;
}

static PyObject *
probe(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "probe(value, with_text: bool, packed: bool = False)");
        return NULL;
    }
    int with_text = PyObject_IsTrue(args[1]);
    int packed = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (with_text < 0 || packed < 0) {
        return NULL;
    }
    PyObject *texts = PyList_New(0);
    if (texts == NULL) {
        return NULL;
    }
    int walked = collect_texts(args[0], texts, 0);
    if (walked <= 0) {
        Py_DECREF(texts);
        if (walked < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    fpset out;
    fpset_init(&out);
    PyObject *others = PyList_New(0);
    if (others == NULL) {
        goto fail;
    }
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(texts); t++) { /* the list is ours */
        if (probe_decodings(PyList_GET_ITEM(texts, t), with_text, &out, others) < 0) {
            goto fail;
        }
    }
    Py_DECREF(texts);
    return done(&out, others, packed);
fail:
    Py_DECREF(texts);
    fpset_free(&out);
    Py_XDECREF(others);
    return NULL;
}

static int seams_into(PyObject *texts, fpset *out, PyObject *others);

/* seams(texts) -> (frozenset[int], list[str]) | None: fingerprints._py_probe_seams
 * of ASCII texts (None when a text is not ASCII: the Python path then) but for the
 * non-ASCII forms of the joined text's decodings, returned for the caller to probe:
 * the probe of the joined text's decodings but itself; the whole tokens of its long
 * words that are no word of any text (a word inside one text is one of its words; a
 * word across a seam is compared with every text's words); the grams of the joined
 * norms that start within GRAM - 1 characters before a seam and cross it. */
static PyObject *
seams(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 && nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "seams(texts, packed: bool = False)");
        return NULL;
    }
    int packed = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (packed < 0) {
        return NULL;
    }
    PyObject *texts = PySequence_Tuple(args[0]);
    if (texts == NULL) {
        return NULL;
    }
    fpset out;
    fpset_init(&out);
    PyObject *others = PyList_New(0);
    int got = others == NULL ? -1 : seams_into(texts, &out, others);
    Py_DECREF(texts);
    if (got <= 0) {
        fpset_free(&out);
        Py_XDECREF(others);
        if (got < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return done(&out, others, packed);
}

/* The body of seams() for a tuple of texts: the fingerprints added to out, the forms
 * that are not ASCII appended to others. 1, 0 when a text is not ASCII (nothing
 * added), or -1 on error (TypeError when a text is not a str). */
static int
seams_into(PyObject *texts, fpset *out, PyObject *others)
{
    Py_ssize_t count = PyTuple_GET_SIZE(texts);
    Py_ssize_t total = 0;
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *text = PyTuple_GET_ITEM(texts, t);
        if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "seams(texts): a text must be a str");
            return -1;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(text) < 0) {
            return -1;
        }
#endif
        if (!PyUnicode_IS_ASCII(text)) {
            return 0;
        }
        total += PyUnicode_GET_LENGTH(text);
    }
    PyObject *joined = NULL, *own = NULL;
    unsigned char *chars = PyMem_Malloc(total > 0 ? (size_t)total : 1);
    unsigned char *norm = PyMem_Malloc(total > 0 ? (size_t)total : 1);
    unsigned char *start = PyMem_Calloc(total > 0 ? (size_t)total : 1, 1);
    Py_ssize_t *ends = PyMem_Malloc((count > 0 ? (size_t)count : 1) * sizeof(Py_ssize_t));
    if (chars == NULL || norm == NULL || start == NULL || ends == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *text = PyTuple_GET_ITEM(texts, t);
        memcpy(chars + at, PyUnicode_1BYTE_DATA(text), (size_t)PyUnicode_GET_LENGTH(text));
        at += PyUnicode_GET_LENGTH(text);
        ends[t] = at;
    }
    joined = PyUnicode_DecodeASCII((const char *)chars, total, "strict");
    if (joined == NULL || probe_decodings(joined, 0, out, others) < 0) {
        goto fail;
    }
    /* the long words of the joined text that are no text's word */
    Py_ssize_t i = 0, text = 0;
    while (i < total) {
        while (i < total && is_ascii_space(chars[i])) {
            i++;
        }
        Py_ssize_t from = i;
        while (i < total && !is_ascii_space(chars[i])) {
            i++;
        }
        if (i - from < MIN_TOKEN) {
            continue;
        }
        while (ends[text] <= from) { /* the text the word starts in */
            text++;
        }
        if (i <= ends[text]) {
            continue; /* inside one text: one of its words */
        }
        if (own == NULL) { /* every text's words, once a word crosses a seam */
            own = PySet_New(NULL);
            if (own == NULL) {
                goto fail;
            }
            Py_ssize_t j = 0;
            for (Py_ssize_t t = 0; t < count; t++) {
                Py_ssize_t end = ends[t];
                while (j < end) {
                    while (j < end && is_ascii_space(chars[j])) {
                        j++;
                    }
                    Py_ssize_t w = j;
                    while (j < end && !is_ascii_space(chars[j])) {
                        j++;
                    }
                    if (j > w) {
                        PyObject *word = PyUnicode_DecodeASCII((const char *)chars + w, j - w, NULL);
                        int failed = word == NULL || PySet_Add(own, word) < 0;
                        Py_XDECREF(word);
                        if (failed) {
                            goto fail;
                        }
                    }
                }
            }
        }
        PyObject *word = PyUnicode_DecodeASCII((const char *)chars + from, i - from, NULL);
        int known = word == NULL ? -1 : PySet_Contains(own, word);
        Py_XDECREF(word);
        if (known < 0) {
            goto fail;
        }
        if (!known && probe_word(chars + from, i - from, norm, out) < 0) {
            goto fail;
        }
    }
    /* the grams across a seam: the norms joined, a gram at each start within GRAM - 1
     * characters before the end of a text's norm (but the last text's) */
    Py_ssize_t size = 0;
    Py_ssize_t from = 0;
    for (Py_ssize_t t = 0; t < count; t++) {
        size += ascii_norm(chars + from, ends[t] - from, norm + size);
        from = ends[t];
        if (t + 1 < count) {
            for (Py_ssize_t s = size - GRAM + 1 > 0 ? size - GRAM + 1 : 0; s < size; s++) {
                start[s] = 1;
            }
        }
    }
    for (Py_ssize_t s = 0; s + GRAM <= size; s++) {
        if (start[s] && fpset_add(out, gram_hash(norm + s)) < 0) {
            goto fail;
        }
    }
    PyMem_Free(chars);
    PyMem_Free(norm);
    PyMem_Free(start);
    PyMem_Free(ends);
    Py_DECREF(joined);
    Py_XDECREF(own);
    return 1;
fail:
    PyMem_Free(chars);
    PyMem_Free(norm);
    PyMem_Free(start);
    PyMem_Free(ends);
    Py_XDECREF(joined);
    Py_XDECREF(own);
    return -1;
}

/* -- what spans a seam between two values (fingerprints.probe_across) ------------- */

/* fingerprints._RUN_EDGE: where a run without whitespace or quoting ends. */
static inline int
is_run_edge(unsigned char c)
{
    return is_ascii_space(c) || is_split(c);
}

/* fingerprints._add_short_token: the BLAKE2b-64 of the norm of (raw, size) added to out
 * when it is 8 to 15 characters and specific; norm has room for size bytes. 0, or -1. */
static int
short_token(const unsigned char *raw, Py_ssize_t size, int piece, unsigned char *norm,
            fpset *out)
{
    Py_ssize_t n = ascii_norm(raw, size, norm);
    if (n >= 8 && n < GRAM && specific(raw, size, piece, norm, n)) {
        return fpset_add(out, token_hash(norm, (size_t)n));
    }
    return 0;
}

/* fingerprints._encoded_across of an ASCII run: only [A-Za-z0-9+/=_-], and base64-like
 * (a digit, an upper- and a lower-case letter), base32-like (one case of [A-Z2-7] with
 * a digit 2-7, then '=' padding) or hex (a fifth of it letters a-f at least). */
static int
encoded_across(const unsigned char *run, Py_ssize_t size)
{
    int digit = 0, upper = 0, lower = 0, b32_digit = 0, hex = 1, b32_upper = 1,
        b32_lower = 1;
    Py_ssize_t hex_letters = 0, body = size;
    while (body > 0 && run[body - 1] == '=') {
        body--;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = run[i];
        if (!(is_alnum(c) || c == '+' || c == '/' || c == '=' || c == '_' || c == '-')) {
            return 0;
        }
        int is_digit = c >= '0' && c <= '9';
        digit |= is_digit;
        upper |= is_upper(c);
        lower |= is_lower(c);
        int hex_letter = (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        hex &= is_digit || hex_letter;
        hex_letters += hex_letter;
        if (i < body) {
            int b32_number = c >= '2' && c <= '7';
            b32_digit |= b32_number;
            b32_upper &= is_upper(c) || b32_number;
            b32_lower &= is_lower(c) || b32_number;
        }
    }
    if (digit && upper && lower) {
        return 1;
    }
    if (body > 0 && b32_digit && (b32_upper || b32_lower)) {
        return 1;
    }
    return hex && 5 * hex_letters >= size;
}

/* fingerprints._decoded_across(left, right) of two ASCII runs: probe_seams((left,
 * right)) less probe(left) and probe(right), each an fpset (no int object made but for
 * what is kept), added to out. When a decoding of one of the three is not ASCII (Python
 * probes such forms: NFKC and case folding), nothing is added and *rest is set to what
 * the caller finishes with (fingerprints._decoded_rest): (the seam's fingerprints, its
 * forms not ASCII, either half's, theirs). 0, or -1 on error. */
static int
decoded_across(const unsigned char *left, Py_ssize_t left_size, const unsigned char *right,
               Py_ssize_t right_size, fpset *out, PyObject **rest)
{
    int got = -1;
    fpset seam, own;
    fpset_init(&seam);
    fpset_init(&own);
    PyObject *seam_others = PyList_New(0);
    PyObject *own_others = PyList_New(0);
    PyObject *halves = PyTuple_New(2);
    if (seam_others == NULL || own_others == NULL || halves == NULL) {
        goto end;
    }
    PyObject *half = PyUnicode_DecodeASCII((const char *)left, left_size, NULL);
    if (half == NULL) {
        goto end;
    }
    PyTuple_SET_ITEM(halves, 0, half); /* stolen */
    half = PyUnicode_DecodeASCII((const char *)right, right_size, NULL);
    if (half == NULL) {
        goto end;
    }
    PyTuple_SET_ITEM(halves, 1, half);
    int seamed = seams_into(halves, &seam, seam_others);
    if (seamed <= 0) {
        if (seamed == 0) { /* never: both halves are ASCII */
            PyErr_SetString(PyExc_SystemError, "across: a half is not ASCII");
        }
        goto end;
    }
    /* either half's probe, into one set: only membership is asked of it */
    if (probe_decodings(PyTuple_GET_ITEM(halves, 0), 1, &own, own_others) < 0
        || probe_decodings(PyTuple_GET_ITEM(halves, 1), 1, &own, own_others) < 0) {
        goto end;
    }
    if (PyList_GET_SIZE(seam_others) > 0 || PyList_GET_SIZE(own_others) > 0) {
        PyObject *seam_found = fpset_freeze(&seam);
        PyObject *own_found = seam_found == NULL ? NULL : fpset_freeze(&own);
        if (own_found != NULL) {
            *rest = PyTuple_Pack(4, seam_found, seam_others, own_found, own_others);
        }
        Py_XDECREF(seam_found);
        Py_XDECREF(own_found);
        got = *rest == NULL ? -1 : 0;
        goto end;
    }
    for (Py_ssize_t i = 0; i < seam.count; i++) {
        uint64_t value = seam.values[i];
        if (!fpset_contains(&own, value) && fpset_add(out, value) < 0) {
            goto end;
        }
    }
    got = 0;
end:
    fpset_free(&seam);
    fpset_free(&own);
    Py_XDECREF(seam_others);
    Py_XDECREF(own_others);
    Py_XDECREF(halves);
    return got;
}

/* across(tail, head) -> (frozenset[int], tuple | None) | None: fingerprints.probe_across
 * of two ASCII texts: the grams across the seam (the last GRAM - 1 normalised
 * characters of tail joined to the first GRAM - 1 of head), the short whole token of
 * the run across it and of its piece across it, and — when that run may be an encoding
 * cut in two — the probe of its decodings less either half's (decoded_across); with
 * what the caller finishes those decodings from when one of them is not ASCII (else
 * None). None when a text is not ASCII. */
static PyObject *
across(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "across(tail: str, head: str, packed: bool = False)");
        return NULL;
    }
    int packed = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (packed < 0) {
        return NULL;
    }
    PyObject *tail_text = args[0], *head_text = args[1];
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(tail_text) < 0 || PyUnicode_READY(head_text) < 0) {
        return NULL;
    }
#endif
    if (!PyUnicode_IS_ASCII(tail_text) || !PyUnicode_IS_ASCII(head_text)) {
        Py_RETURN_NONE;
    }
    const unsigned char *tail = PyUnicode_1BYTE_DATA(tail_text);
    const unsigned char *head = PyUnicode_1BYTE_DATA(head_text);
    Py_ssize_t tail_size = PyUnicode_GET_LENGTH(tail_text);
    Py_ssize_t head_size = PyUnicode_GET_LENGTH(head_text);
    fpset out;
    fpset_init(&out);
    PyObject *rest = NULL; /* the decodings across the seam, left to Python */
    size_t room = (size_t)(tail_size + head_size) + 1;
    unsigned char *norm = PyMem_Malloc(room);
    unsigned char *joined = PyMem_Malloc(room);
    if (norm == NULL || joined == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if (tail_size > 0 && head_size > 0) {
        /* the grams across the seam: every gram of at most 2 * (GRAM - 1) bytes spans it */
        Py_ssize_t near = ascii_norm(tail, tail_size, norm);
        Py_ssize_t from = near > GRAM - 1 ? near - (GRAM - 1) : 0;
        near -= from;
        memmove(norm, norm + from, (size_t)near);
        Py_ssize_t far = ascii_norm(head, head_size, norm + near);
        if (far > GRAM - 1) {
            far = GRAM - 1;
        }
        if (near > 0 && far > 0) {
            for (Py_ssize_t s = 0; s + GRAM <= near + far; s++) {
                if (fpset_add(&out, gram_hash(norm + s)) < 0) {
                    goto fail;
                }
            }
        }
        /* the run across the seam, and its piece across it */
        Py_ssize_t left = tail_size;
        while (left > 0 && !is_run_edge(tail[left - 1])) {
            left--;
        }
        Py_ssize_t right = 0;
        while (right < head_size && !is_run_edge(head[right])) {
            right++;
        }
        Py_ssize_t left_size = tail_size - left;
        if (left_size > 0 && right > 0) {
            memcpy(joined, tail + left, (size_t)left_size);
            memcpy(joined + left_size, head, (size_t)right);
            Py_ssize_t size = left_size + right;
            if (size >= 8) {
                if (short_token(joined, size, 0, norm, &out) < 0) {
                    goto fail;
                }
                Py_ssize_t piece_from = left_size;
                while (piece_from > 0 && !is_subsplit(joined[piece_from - 1])) {
                    piece_from--;
                }
                Py_ssize_t piece_to = left_size;
                while (piece_to < size && !is_subsplit(joined[piece_to])) {
                    piece_to++;
                }
                if (piece_from < left_size && piece_to > left_size
                    && piece_to - piece_from < size
                    && short_token(joined + piece_from, piece_to - piece_from, 1, norm, &out)
                           < 0) {
                    goto fail;
                }
                if (size >= GRAM && encoded_across(joined, size)) {
                    if (decoded_across(tail + left, left_size, head, right, &out, &rest) < 0) {
                        goto fail;
                    }
                }
            }
        }
    }
    PyMem_Free(norm);
    PyMem_Free(joined);
    PyObject *found = fpset_out(&out, packed);
    fpset_free(&out);
    if (found == NULL) {
        Py_XDECREF(rest);
        return NULL;
    }
    return Py_BuildValue("(NN)", found, rest == NULL ? Py_NewRef(Py_None) : rest);
fail:
    PyMem_Free(norm);
    PyMem_Free(joined);
    fpset_free(&out);
    Py_XDECREF(rest);
    return NULL;
}

/* -- boilerplate of the data (fingerprints._BOILERPLATE on ASCII words) ---------- */

static inline int
is_word_char(unsigned char c) /* \w of an ASCII character */
{
    return is_alnum(c) || c == '_';
}

/* str.istitle of ASCII: an upper-case letter only after an uncased character, a
 * lower-case one only after a cased one, and some cased character. */
static int
ascii_istitle(const unsigned char *w, Py_ssize_t n)
{
    int previous_cased = 0, cased = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (is_upper(w[i])) {
            if (previous_cased) {
                return 0;
            }
            previous_cased = cased = 1;
        }
        else if (is_lower(w[i])) {
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

/* Whether w[0:n] is _WORD: letters (all lower-case, all upper-case, or one upper-case
 * then lower-case ones) and then at most two digits. */
static int
is_one_word(const unsigned char *w, Py_ssize_t n)
{
    Py_ssize_t letters = n;
    while (letters > 0 && n - letters < 2 && w[letters - 1] >= '0' && w[letters - 1] <= '9') {
        letters--;
    }
    if (letters == 0) {
        return 0;
    }
    int upper = 0, lower = 0;
    for (Py_ssize_t i = 0; i < letters; i++) {
        if (is_upper(w[i])) {
            upper++;
        }
        else if (is_lower(w[i])) {
            lower++;
        }
        else {
            return 0; /* a digit inside, or a third trailing one */
        }
    }
    return upper == 0 || lower == 0 || (upper == 1 && is_upper(w[0]));
}

/* Whether a run of word characters is _WORD(?:_WORD)+ whole. */
static int
is_joined_words(const unsigned char *run, Py_ssize_t n)
{
    Py_ssize_t parts = 0, from = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (i == n || run[i] == '_') {
            if (!is_one_word(run + from, i - from)) {
                return 0;
            }
            parts++;
            from = i + 1;
        }
    }
    return parts >= 2;
}

/* Whether a run of word characters is camel humps whole: lower-case letters then one
 * or more humps (an upper-case letter and lower-case ones), or two or more humps. */
static int
is_camel(const unsigned char *run, Py_ssize_t n)
{
    Py_ssize_t i = 0, humps = 0;
    while (i < n && is_lower(run[i])) {
        i++;
    }
    int leading = i > 0;
    while (i < n) {
        if (!is_upper(run[i])) {
            return 0;
        }
        Py_ssize_t from = ++i;
        while (i < n && is_lower(run[i])) {
            i++;
        }
        if (i == from) {
            return 0;
        }
        humps++;
    }
    return humps >= (leading ? 1 : 2);
}

/* _BOILERPLATE.findall(word) of an ASCII word, the matches of at least MIN_TOKEN
 * characters appended to out in order. The expression's matches, as its lookarounds
 * make them: the key before '=' or ':' at the start (a letter or '_', then word
 * characters, '.' and '-'); else each maximal run of word characters that is
 * _WORD(_WORD)+ whole (not after \w @ - +, not before @ - + =), or camel humps whole
 * (not after \w . @ - + /, not before @ - + / =): a match cannot end inside a run (a
 * word character would follow it) nor start inside one. */
static int
boilerplate_of(const unsigned char *w, Py_ssize_t n, PyObject *out)
{
    Py_ssize_t i = 0;
    if (n > 0 && (is_alpha_or_underscore(w[0]))) {
        Py_ssize_t j = 1;
        while (j < n && (is_word_char(w[j]) || w[j] == '.' || w[j] == '-')) {
            j++;
        }
        if (j < n && (w[j] == '=' || w[j] == ':')) {
            if (j >= MIN_TOKEN) {
                PyObject *match = PyUnicode_DecodeASCII((const char *)w, j, NULL);
                int failed = match == NULL || PyList_Append(out, match) < 0;
                Py_XDECREF(match);
                if (failed) {
                    return -1;
                }
            }
            i = j;
        }
    }
    while (i < n) {
        if (!is_word_char(w[i])) {
            i++;
            continue;
        }
        Py_ssize_t from = i;
        while (i < n && is_word_char(w[i])) {
            i++;
        }
        unsigned char before = from > 0 ? w[from - 1] : ' ';
        unsigned char after = i < n ? w[i] : ' ';
        int found = 0;
        if (before != '@' && before != '-' && before != '+' && after != '@' && after != '-'
            && after != '+' && after != '=') {
            found = is_joined_words(w + from, i - from)
                    || (before != '.' && before != '/' && after != '/'
                        && is_camel(w + from, i - from));
        }
        if (found && i - from >= MIN_TOKEN) {
            PyObject *match = PyUnicode_DecodeASCII((const char *)w + from, i - from, NULL);
            int failed = match == NULL || PyList_Append(out, match) < 0;
            Py_XDECREF(match);
            if (failed) {
                return -1;
            }
        }
    }
    return 0;
}

/* boilerplate(long_words) -> list[str] | None: fingerprints._py_boilerplate of ASCII
 * words (None when one is not: the Python path then), the matches in the order the
 * reference finds them (so the set the caller makes of them is the same set). */
static PyObject *
boilerplate(PyObject *module, PyObject *words)
{
    if (!PyList_Check(words)) {
        PyErr_SetString(PyExc_TypeError, "boilerplate(long_words: list[str])");
        return NULL;
    }
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
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    /* no Python code runs in this loop: the list cannot change under it */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(words); i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        const unsigned char *w = PyUnicode_1BYTE_DATA(word);
        Py_ssize_t n = PyUnicode_GET_LENGTH(word);
        int alnum = n > 0, upper = 0, lower = 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            alnum &= is_alnum(w[j]);
            upper |= is_upper(w[j]);
            lower |= is_lower(w[j]);
        }
        int plain = (upper && !lower) || (lower && !upper) || ascii_istitle(w, n);
        if (alnum && plain) {
            continue; /* a plain word (one case, or capitalised) holds no boilerplate */
        }
        if (boilerplate_of(w, n, out) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* -- the runs of a call's value, for the chains of pieces (interlock.session.pieces) --
 * piece_runs(text, gram, longest) -> tuple[(run, first), ...] | None: pieces._py_runs_of
 * for an ASCII text without a percent-escape: each run between separators (white space — what str's
 * \s matches among ASCII —, quotes, brackets and ",;|\=:"), then after a run with one of
 * "/?&#+" in it its parts between those (and, with a "+" in it, between "/?&#"), then,
 * in a text without white space, the text whole; in a text with white space (prose) a
 * word ([A-Z]?[a-z]+, its dropped characters cut from its ends) left out; each
 * normalised (lower-cased, every character but [a-z0-9_@.] dropped), and then, when it
 * holds one of "._@", its parts between them but words, when it holds a character that is
 * not a letter or a digit, its parts between those but words, with "._@", it without
 * them, and, for a float written with an exponent, its digits without it; each kept
 * when gram to longest characters long and not kept already; in order, each with hash(run[:gram]) & (2**64 - 1).
 * None: not ASCII, a percent-escape ('%' and two hex digits: a '%' alone decodes to
 * itself), or both '&' and ';' (the Python path decodes them). */

static int
piece_space(unsigned char c)
{
    return (c >= 9 && c <= 13) || (c >= 28 && c <= 32);
}

static int
piece_separator(unsigned char c)
{
    if (piece_space(c)) {
        return 1;
    }
    switch (c) {
    case '"': case '\'': case '`': case '<': case '>': case '(': case ')': case '[':
    case ']': case '{': case '}': case ',': case ';': case '|': case '\\': case '=':
    case ':':
        return 1;
    default:
        return 0;
    }
}

static int
piece_delimiter(unsigned char c)
{
    return c == '/' || c == '?' || c == '&' || c == '#' || c == '+';
}

static int
piece_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* What the normalisation keeps: a letter, a digit, '_', '@' or '.'. */
static int
piece_kept_char(unsigned char c)
{
    return piece_alnum(c) || c == '_' || c == '@' || c == '.';
}

/* Add norm[0:k] to out (a dict run -> its first gram's hash) unless too short or long,
 * or there already. */
static int
piece_add(PyObject *out, const char *norm, Py_ssize_t k, Py_ssize_t gram, Py_ssize_t longest)
{
    if (k < gram || k > longest) {
        return 0;
    }
    PyObject *run = PyUnicode_FromStringAndSize(norm, k);
    if (run == NULL) {
        return -1;
    }
    int there = PyDict_Contains(out, run);
    if (there != 0) {
        Py_DECREF(run);
        return there < 0 ? -1 : 0;
    }
    /* hash(run[:gram]): an ASCII str hashes its bytes (unicode_hash) */
    Py_hash_t hashed = _Py_HashBytes(norm, gram);
    PyObject *value = PyLong_FromUnsignedLongLong((unsigned long long)(uint64_t)hashed);
    if (value == NULL) {
        Py_DECREF(run);
        return -1;
    }
    int failed = PyDict_SetItem(out, run, value);
    Py_DECREF(run);
    Py_DECREF(value);
    return failed;
}

/* Whether src[start:end] is a word: [A-Z]?[a-z]+ once what the normalisation drops is cut
 * from both ends (pieces._WORD after _EDGES). */
static int
piece_word(const unsigned char *src, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t a = start, b = end;
    while (a < b && !piece_kept_char(src[a])) {
        a++;
    }
    while (b > a && !piece_kept_char(src[b - 1])) {
        b--;
    }
    if (b <= a) {
        return 0;
    }
    Py_ssize_t i = a;
    if (src[i] >= 'A' && src[i] <= 'Z') {
        i++;
    }
    while (i < b && src[i] >= 'a' && src[i] <= 'z') {
        i++;
    }
    return i == b && src[b - 1] >= 'a' && src[b - 1] <= 'z';
}

/* When src[start:end] is a float written with an exponent, [+-]?[0-9]+\.[0-9]+[eE][+-]?[0-9]+
 * (pieces._FLOAT_TEXT), its digits before the exponent, the dot dropped, into digits (room
 * for end - start): their number; else 0. */
static Py_ssize_t
piece_mantissa(const unsigned char *src, Py_ssize_t start, Py_ssize_t end, char *digits)
{
    Py_ssize_t i = start, k = 0, whole = 0, fraction = 0, exponent = 0;
    if (i < end && (src[i] == '+' || src[i] == '-')) {
        i++;
    }
    for (; i < end && src[i] >= '0' && src[i] <= '9'; i++, whole++) {
        digits[k++] = (char)src[i];
    }
    if (whole == 0 || i >= end || src[i] != '.') {
        return 0;
    }
    for (i++; i < end && src[i] >= '0' && src[i] <= '9'; i++, fraction++) {
        digits[k++] = (char)src[i];
    }
    if (fraction == 0 || i >= end || (src[i] != 'e' && src[i] != 'E')) {
        return 0;
    }
    i++;
    if (i < end && (src[i] == '+' || src[i] == '-')) {
        i++;
    }
    for (; i < end && src[i] >= '0' && src[i] <= '9'; i++) {
        exponent++;
    }
    return exponent > 0 && i == end ? k : 0;
}

/* Add src[start:end] to out, normalised into norm (room for end - start), and, when the
 * normalised run holds one of "._@", its parts between them but words; when the run
 * holds a character that is not a letter or a digit, its parts between those but words
 * (pieces._cuts: "<piece>~x", "v1!<piece>"), lower-cased in scratch (room for
 * end - start); then, with "._@", it without them; then, for a float written with an
 * exponent, its digits without it (piece_mantissa); nothing for a word of prose
 * (piece_word). */
static int
piece_put(PyObject *out, const unsigned char *src, Py_ssize_t start, Py_ssize_t end,
          char *norm, char *scratch, Py_ssize_t gram, Py_ssize_t longest, int prose)
{
    if (prose && piece_word(src, start, end)) {
        return 0;
    }
    Py_ssize_t k = 0;
    int inner = 0, cut = 0;
    for (Py_ssize_t i = start; i < end; i++) {
        unsigned char c = src[i];
        cut |= !piece_alnum(c);
        if (c >= 'A' && c <= 'Z') {
            c = (unsigned char)(c + 32);
        }
        if (piece_kept_char(c)) {
            inner |= (c == '.' || c == '_' || c == '@');
            norm[k++] = (char)c;
        }
    }
    if (piece_add(out, norm, k, gram, longest) < 0) {
        return -1;
    }
    if (inner) {
        /* its parts between "._@" ("<piece>@x.example", "<piece>.png") but those spelled
         * as a word (pieces._parts: "example", "png"); it without them comes after the
         * cuts; the raw run is ASCII, so its parts are the normalised run's, one for one */
        Py_ssize_t from = start, at = 0;
        for (Py_ssize_t i = start; i <= end; i++) {
            if (i < end && src[i] != '.' && src[i] != '_' && src[i] != '@') {
                continue;
            }
            Py_ssize_t part = 0; /* the part's normalised length */
            for (Py_ssize_t m = from; m < i; m++) {
                part += piece_kept_char(src[m]);
            }
            if (!piece_word(src, from, i) &&
                piece_add(out, norm + at, part, gram, longest) < 0) {
                return -1;
            }
            at += part + (i < end); /* and the separator */
            from = i + 1;
        }
    }
    if (cut) {
        /* its parts between what is not a letter or a digit, but words: each part is
         * letters and digits, so normalised it is lower-cased */
        Py_ssize_t from = start;
        for (Py_ssize_t i = start; i <= end; i++) {
            if (i < end && piece_alnum(src[i])) {
                continue;
            }
            if (i - from >= gram && !piece_word(src, from, i)) {
                for (Py_ssize_t m = from; m < i; m++) {
                    unsigned char c = src[m];
                    scratch[m - from] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
                }
                if (piece_add(out, scratch, i - from, gram, longest) < 0) {
                    return -1;
                }
            }
            from = i + 1;
        }
    }
    if (inner) {
        Py_ssize_t j = 0;
        for (Py_ssize_t i = 0; i < k; i++) {
            if (norm[i] != '.' && norm[i] != '_' && norm[i] != '@') {
                norm[j++] = norm[i];
            }
        }
        if (piece_add(out, norm, j, gram, longest) < 0) {
            return -1;
        }
    }
    /* a float written with an exponent ("8.937040044e-05"): its digits without it
     * (pieces._FLOAT_TEXT) */
    Py_ssize_t digits = piece_mantissa(src, start, end, scratch);
    if (digits > 0 && piece_add(out, scratch, digits, gram, longest) < 0) {
        return -1;
    }
    return 0;
}

static int
piece_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Whether src holds a percent-escape (a '%' and two hex digits): what unquote decodes.
 * A '%' without one ("up 12%.") is left as it is, so the text reads the same. */
static int
piece_escaped(const unsigned char *src, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i + 2 < n; i++) {
        if (src[i] == '%' && piece_hex(src[i + 1]) && piece_hex(src[i + 2])) {
            return 1;
        }
    }
    return 0;
}

static PyObject *
piece_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "piece_runs(text: str, gram: int, longest: int)");
        return NULL;
    }
    Py_ssize_t gram = PyLong_AsSsize_t(args[1]);
    if (gram == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t longest = PyLong_AsSsize_t(args[2]);
    if (longest == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (gram < 1 || longest < gram) {
        PyErr_SetString(PyExc_ValueError, "piece_runs: need 1 <= gram <= longest");
        return NULL;
    }
    PyObject *text = args[0];
    if (!PyUnicode_IS_ASCII(text)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const unsigned char *src = (const unsigned char *)PyUnicode_DATA(text);
    if (piece_escaped(src, n) ||
        (memchr(src, '&', (size_t)n) != NULL && memchr(src, ';', (size_t)n) != NULL)) {
        Py_RETURN_NONE; /* percent-encoded, or an HTML entity: the Python path decodes */
    }
    int prose = 0;
    for (Py_ssize_t i = 0; i < n && !prose; i++) {
        prose = piece_space(src[i]);
    }
    char *norm = PyMem_Malloc(n > 0 ? 2 * (size_t)n : 1); /* the run, then scratch */
    if (norm == NULL) {
        return PyErr_NoMemory();
    }
    char *scratch = norm + n;
    PyObject *out = PyDict_New();
    if (out == NULL) {
        PyMem_Free(norm);
        return NULL;
    }
    Py_ssize_t i = 0;
    while (i < n) {
        while (i < n && piece_separator(src[i])) {
            i++;
        }
        if (i >= n) {
            break;
        }
        Py_ssize_t start = i;
        int delimited = 0, plus = 0;
        while (i < n && !piece_separator(src[i])) {
            delimited |= piece_delimiter(src[i]);
            plus |= src[i] == '+';
            i++;
        }
        Py_ssize_t end = i;
        if (piece_put(out, src, start, end, norm, scratch, gram, longest, prose) < 0) {
            goto fail;
        }
        /* its parts between "/?&#+", then, with a "+" in it, between "/?&#" (a space in
         * a query may be put inside a piece) */
        for (int pass = 0; pass < (delimited ? 1 + plus : 0); pass++) {
            Py_ssize_t j = start;
            while (j < end) {
                while (j < end && piece_delimiter(src[j]) && (pass == 0 || src[j] != '+')) {
                    j++;
                }
                if (j >= end) {
                    break;
                }
                Py_ssize_t inner = j;
                while (j < end && !(piece_delimiter(src[j]) && (pass == 0 || src[j] != '+'))) {
                    j++;
                }
                if (piece_put(out, src, inner, j, norm, scratch, gram, longest, prose) < 0) {
                    goto fail;
                }
            }
        }
    }
    if (!prose && piece_put(out, src, 0, n, norm, scratch, gram, longest, prose) < 0) {
        goto fail;
    }
    PyMem_Free(norm);
    PyObject *items = PyDict_Items(out);
    Py_DECREF(out);
    if (items == NULL) {
        return NULL;
    }
    PyObject *found = PyList_AsTuple(items);
    Py_DECREF(items);
    return found;
fail:
    PyMem_Free(norm);
    Py_DECREF(out);
    return NULL;
}

/* piece_grams(token, gram) -> list[int] | None: [hash(token[i:i + gram]) & (2**64 - 1)
 * for each i] of an ASCII token (an ASCII str hashes its bytes, as unicode_hash does);
 * None for any other (the Python path). */
static PyObject *
piece_grams(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "piece_grams(token: str, gram: int)");
        return NULL;
    }
    Py_ssize_t gram = PyLong_AsSsize_t(args[1]);
    if (gram == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (gram < 1) {
        PyErr_SetString(PyExc_ValueError, "piece_grams: need gram >= 1");
        return NULL;
    }
    PyObject *token = args[0];
    if (!PyUnicode_IS_ASCII(token)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(token);
    const char *data = (const char *)PyUnicode_DATA(token);
    Py_ssize_t count = n >= gram ? n - gram + 1 : 0;
    PyObject *out = PyList_New(count);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_hash_t hashed = _Py_HashBytes(data + i, gram);
        PyObject *value = PyLong_FromUnsignedLongLong((unsigned long long)(uint64_t)hashed);
        if (value == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, value);
    }
    return out;
}

/* -- a call's pieces, found in one pass (interlock.session.pieces.Pieces.observe) --
 * piece_scan(args, grams, older, memo, runs_of, limits) -> (bool, [(name, run), ...]) | None:
 * pieces._py_scan for the plain values an argument usually is. limits is
 * (gram, max_values, max_depth, max_runs, max_pieces, smallest). First the texts of args
 * as pieces._texts walks them (exact str, int, float, bool, None, dict, list, tuple, set,
 * frozenset; dict keys that are exact str at the top): none of the values' own code
 * runs while it walks (a collection's finalizer may: what the walk reads it holds, a
 * list's size it reads again, a set's iterator refuses a change); None for any other
 * value (the Python path walks it then: a subclass's methods,
 * bytes, a Mapping that is not a dict, an int past 64 bits). Then each text's runs (from
 * memo, else runs_of(text), which keeps them there) whose every gram's hash is in grams
 * or older: at most max_pieces, in order, after at most max_runs runs in all. The bool:
 * whether args held a text at all. */

#define SCAN_LIMITS 6

typedef struct {
    Py_ssize_t gram, max_values, max_depth, max_runs, max_pieces;
    long long smallest;
    Py_ssize_t budget;
} scan_limits;

/* Append (name, text) to out when text is gram characters or more. */
static int
scan_put(PyObject *out, PyObject *name, PyObject *text, Py_ssize_t gram)
{
    if (PyUnicode_GET_LENGTH(text) < gram) {
        return 0;
    }
    PyObject *pair = PyTuple_Pack(2, name, text);
    if (pair == NULL) {
        return -1;
    }
    int failed = PyList_Append(out, pair);
    Py_DECREF(pair);
    return failed;
}

/* A float's repr (text, exact ASCII) without its exponent, appended when it has gram
 * digits or more and is not text itself already appended (large: text was). */
static int
scan_mantissa(PyObject *out, PyObject *name, PyObject *text, int large, Py_ssize_t gram)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const unsigned char *src = (const unsigned char *)PyUnicode_DATA(text);
    Py_ssize_t end = 0, digits = 0;
    while (end < n && src[end] != 'e') {
        digits += src[end] >= '0' && src[end] <= '9';
        end++;
    }
    if ((end == n && large) || digits < gram) {
        return 0;
    }
    PyObject *mantissa = PyUnicode_Substring(text, 0, end);
    if (mantissa == NULL) {
        return -1;
    }
    int failed = scan_put(out, name, mantissa, gram);
    Py_DECREF(mantissa);
    return failed;
}

/* pieces._walk of value: 1 done, 0 a value it does not read (the Python path), -1 error. */
static int
scan_walk(PyObject *name, PyObject *value, Py_ssize_t depth, PyObject *out, scan_limits *at)
{
    if (at->budget <= 0) {
        return 1;
    }
    at->budget--;
    if (PyUnicode_CheckExact(value)) {
        return scan_put(out, name, value, at->gram) < 0 ? -1 : 1;
    }
    if (value == Py_None || PyBool_Check(value)) {
        return 1;
    }
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow != 0) {
            return 0; /* its bit length: the Python path */
        }
        if (number < at->smallest && number > -at->smallest) {
            return 1;
        }
        PyObject *text = PyObject_Str(value);
        if (text == NULL) {
            return -1;
        }
        int failed = scan_put(out, name, text, at->gram);
        Py_DECREF(text);
        return failed < 0 ? -1 : 1;
    }
    if (PyFloat_CheckExact(value)) {
        double number = PyFloat_AS_DOUBLE(value);
        if (!isfinite(number)) {
            return 1;
        }
        int large = fabs(number) >= (double)at->smallest;
        PyObject *text = PyObject_Repr(value);
        if (text == NULL) {
            return -1;
        }
        int failed = large ? scan_put(out, name, text, at->gram) : 0;
        if (failed == 0) {
            failed = scan_mantissa(out, name, text, large, at->gram);
        }
        Py_DECREF(text);
        if (failed < 0) {
            return -1;
        }
        if (large && floor(number) == number && fabs(number) < 1e38) {
            PyObject *whole = PyLong_FromDouble(number);
            if (whole == NULL) {
                return -1;
            }
            text = PyObject_Str(whole);
            Py_DECREF(whole);
            if (text == NULL) {
                return -1;
            }
            failed = scan_put(out, name, text, at->gram);
            Py_DECREF(text);
            if (failed < 0) {
                return -1;
            }
        }
        return 1;
    }
    if (PyDict_CheckExact(value)) {
        if (depth >= at->max_depth) {
            return 1;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (at->budget > 0 && PyDict_Next(value, &pos, &key, &item)) {
            /* held while walked: a collection on the way cannot free them */
            Py_INCREF(key);
            Py_INCREF(item);
            int done = scan_walk(name, key, depth + 1, out, at);
            if (done > 0) {
                done = scan_walk(name, item, depth + 1, out, at);
            }
            Py_DECREF(key);
            Py_DECREF(item);
            if (done <= 0) {
                return done;
            }
        }
        return 1;
    }
    if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) {
        if (depth >= at->max_depth) {
            return 1;
        }
        /* read item by item, its size each time (a finalizer may change it) */
        for (Py_ssize_t i = 0; at->budget > 0 && i < PySequence_Fast_GET_SIZE(value); i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(value, i);
            Py_INCREF(item);
            int done = scan_walk(name, item, depth + 1, out, at);
            Py_DECREF(item);
            if (done <= 0) {
                return done;
            }
        }
        return 1;
    }
    if (PyAnySet_CheckExact(value)) {
        if (depth >= at->max_depth) {
            return 1;
        }
        PyObject *items = PyObject_GetIter(value); /* a set's own (raises if it changes) */
        if (items == NULL) {
            return -1;
        }
        PyObject *item;
        while (at->budget > 0 && (item = PyIter_Next(items)) != NULL) {
            int done = scan_walk(name, item, depth + 1, out, at);
            Py_DECREF(item);
            if (done <= 0) {
                Py_DECREF(items);
                return done;
            }
        }
        Py_DECREF(items);
        return PyErr_Occurred() ? -1 : 1;
    }
    return 0;
}

/* Whether value (a gram's hash) is in grams or older (None: no older): 1, 0, -1. */
static int
scan_in(PyObject *grams, PyObject *older, PyObject *value)
{
    int found = PySequence_Contains(grams, value);
    if (found == 0 && older != Py_None) {
        found = PySequence_Contains(older, value);
    }
    return found;
}

/* Whether the hash of run[start:start + gram] (as hash() makes it, & 2**64 - 1) is in
 * grams or older: 1, 0, -1 on error. */
static int
scan_kept(PyObject *run, Py_ssize_t start, Py_ssize_t gram, PyObject *grams, PyObject *older)
{
    Py_hash_t hashed;
    if (PyUnicode_KIND(run) == PyUnicode_1BYTE_KIND) {
        /* a str of one byte a character hashes those bytes (unicode_hash) */
        hashed = _Py_HashBytes((const char *)PyUnicode_1BYTE_DATA(run) + start, gram);
    }
    else {
        PyObject *part = PyUnicode_Substring(run, start, start + gram);
        if (part == NULL) {
            return -1;
        }
        hashed = PyObject_Hash(part);
        Py_DECREF(part);
        if (hashed == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    PyObject *value = PyLong_FromUnsignedLongLong((unsigned long long)(uint64_t)hashed);
    if (value == NULL) {
        return -1;
    }
    int found = scan_in(grams, older, value);
    Py_DECREF(value);
    return found;
}

static PyObject *
piece_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyDict_Check(args[3]) || !PyTuple_Check(args[5]) ||
        PyTuple_GET_SIZE(args[5]) != SCAN_LIMITS) {
        PyErr_SetString(PyExc_TypeError,
                        "piece_scan(args, grams, older, memo: dict, runs_of, limits: tuple)");
        return NULL;
    }
    PyObject *value = args[0], *grams = args[1], *older = args[2], *memo = args[3];
    PyObject *runs_of = args[4];
    Py_ssize_t limit[SCAN_LIMITS];
    for (int i = 0; i < SCAN_LIMITS; i++) {
        limit[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[5], i));
        if (limit[i] == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (limit[0] < 1 || limit[5] < 1) {
        PyErr_SetString(PyExc_ValueError, "piece_scan: need gram >= 1 and smallest >= 1");
        return NULL;
    }
    scan_limits at = {limit[0], limit[1], limit[2], limit[3], limit[4], limit[5], limit[1]};
    PyObject *texts = PyList_New(0);
    if (texts == NULL) {
        return NULL;
    }
    int done = 1;
    if (PyDict_CheckExact(value)) {
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (done > 0 && PyDict_Next(value, &pos, &key, &item)) {
            if (!PyUnicode_CheckExact(key)) {
                done = 0; /* str(key): the Python path */
                break;
            }
            Py_INCREF(key);
            Py_INCREF(item);
            done = scan_walk(key, key, 0, texts, &at);
            if (done > 0) {
                done = scan_walk(key, item, 0, texts, &at);
            }
            Py_DECREF(key);
            Py_DECREF(item);
        }
    }
    else if (PyUnicode_CheckExact(value) || PyLong_CheckExact(value) ||
             PyFloat_CheckExact(value) || PyBool_Check(value) || value == Py_None ||
             PyList_CheckExact(value) || PyTuple_CheckExact(value) ||
             PyAnySet_CheckExact(value)) {
        PyObject *star = PyUnicode_FromString("*");
        if (star == NULL) {
            Py_DECREF(texts);
            return NULL;
        }
        done = scan_walk(star, value, 0, texts, &at);
        Py_DECREF(star);
    }
    else {
        done = 0; /* perhaps a Mapping: the Python path */
    }
    if (done <= 0) {
        Py_DECREF(texts);
        if (done < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        Py_DECREF(texts);
        return NULL;
    }
    Py_ssize_t counted = 0;
    int full = 0;
    /* texts is this function's own list: what runs_of runs cannot reach it */
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(texts) && !full; t++) {
        PyObject *pair = PyList_GET_ITEM(texts, t);
        PyObject *name = PyTuple_GET_ITEM(pair, 0), *text = PyTuple_GET_ITEM(pair, 1);
        PyObject *runs = PyDict_GetItemWithError(memo, text);
        if (runs != NULL) {
            Py_INCREF(runs);
        }
        else if (PyErr_Occurred()) {
            goto fail;
        }
        else {
            runs = PyObject_CallOneArg(runs_of, text);
            if (runs == NULL) {
                goto fail;
            }
        }
        if (!PyTuple_Check(runs)) {
            Py_DECREF(runs);
            PyErr_SetString(PyExc_TypeError, "piece_scan: runs_of must give a tuple");
            goto fail;
        }
        for (Py_ssize_t r = 0; r < PyTuple_GET_SIZE(runs); r++) {
            counted++;
            if (counted > at.max_runs || PyList_GET_SIZE(found) >= at.max_pieces) {
                full = 1;
                break;
            }
            PyObject *entry = PyTuple_GET_ITEM(runs, r);
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
                !PyUnicode_Check(PyTuple_GET_ITEM(entry, 0))) {
                Py_DECREF(runs);
                PyErr_SetString(PyExc_TypeError, "piece_scan: a run must be (str, int)");
                goto fail;
            }
            PyObject *run = PyTuple_GET_ITEM(entry, 0), *first = PyTuple_GET_ITEM(entry, 1);
            int kept = scan_in(grams, older, first);
            Py_ssize_t size = PyUnicode_GET_LENGTH(run);
            for (Py_ssize_t i = 1; kept > 0 && i + at.gram <= size; i++) {
                kept = scan_kept(run, i, at.gram, grams, older);
            }
            if (kept < 0) {
                Py_DECREF(runs);
                goto fail;
            }
            if (kept > 0) {
                PyObject *piece = PyTuple_Pack(2, name, run);
                if (piece == NULL || PyList_Append(found, piece) < 0) {
                    Py_XDECREF(piece);
                    Py_DECREF(runs);
                    goto fail;
                }
                Py_DECREF(piece);
            }
        }
        Py_DECREF(runs);
    }
    int any = PyList_GET_SIZE(texts) > 0;
    Py_DECREF(texts);
    PyObject *out = Py_BuildValue("(ON)", any ? Py_True : Py_False, found);
    return out;
fail:
    Py_DECREF(texts);
    Py_DECREF(found);
    return NULL;
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
     "whole_tokens(long_words, with_grams, hashed=False) -> (norms, grams) | None: the "
     "specific whole tokens of ASCII words (their norms, as bytes; with hashed, the set of "
     "their hashes) and the grams of the long ones."},
    {"at_least", (PyCFunction)(void (*)(void))at_least, METH_FASTCALL,
     "at_least(words, size) -> list[str]: the words at least size characters long."},
    {"smallest", (PyCFunction)(void (*)(void))smallest, METH_FASTCALL,
     "smallest(values, count) -> list[int] | None: sorted(values)[:count] for ints in "
     "[0, 2**64); None for any other."},
    {"runs", (PyCFunction)(void (*)(void))runs, METH_FASTCALL,
     "runs(text, hex) -> list[str]: the base64 runs in text as _B64_RUN.findall finds "
     "them, or with hex the hex runs as _HEX_RUN.findall does."},
    {"b32_forms", b32_forms, METH_O,
     "b32_forms(run) -> list[str]: a base32 run decoded at its eight alignments, the "
     "decodings that read as text."},
    {"b32_runs", b32_runs, METH_O,
     "b32_runs(source) -> list[str]: the base32 runs in source (DNS labels joined, the "
     "trailing labels without a digit 2-7 dropped), as _py_b32_runs finds them."},
    {"turned_tokens", turned_tokens, METH_O,
     "turned_tokens(text) -> list[str] | None: each specific whole token of an ASCII "
     "text reversed, then ROT13, as _py_turned_tokens turns them (None: not ASCII)."},
    {"mostly_text", mostly_text, METH_O,
     "mostly_text(raw) -> str | None: the text of a decoding if it reads as text."},
    {"decodings", (PyCFunction)(void (*)(void))decodings, METH_FASTCALL,
     "decodings(text, decode_plain) -> list[str]: text and what it decodes to, as "
     "fingerprints._py_decodings yields them."},
    {"probe", (PyCFunction)(void (*)(void))probe, METH_FASTCALL,
     "probe(value, with_text, packed=False) -> (frozenset[int], list[str]) | None: the "
     "probe of the ASCII forms of the decodings of value's texts, and the forms that are "
     "not ASCII; None for a value it does not walk. Packed: the probe as bytes of "
     "native-order uint64 values (for _history.packed) instead of a frozenset."},
    {"seams", (PyCFunction)(void (*)(void))seams, METH_FASTCALL,
     "seams(texts, packed=False) -> (frozenset[int], list[str]) | None: probe_seams of "
     "ASCII texts, the forms of the joined text's decodings that are not ASCII left to "
     "the caller (packed: as probe's)."},
    {"across", (PyCFunction)(void (*)(void))across, METH_FASTCALL,
     "across(tail, head, packed=False) -> (frozenset[int] | bytes, rest | None) | None: "
     "probe_across of two ASCII texts, and the decodings across the seam left to Python "
     "(None: none); packed, the fingerprints as bytes of uint64 values (for "
     "_history.packed); None when a text is not ASCII."},
    {"boilerplate", boilerplate, METH_O,
     "boilerplate(long_words) -> list[str] | None: the boilerplate the data's ASCII long "
     "words hold (as _BOILERPLATE finds it, 8 characters or more), in order."},
    {"piece_runs", (PyCFunction)(void (*)(void))piece_runs, METH_FASTCALL,
     "piece_runs(text, gram, longest) -> tuple[(run, first), ...] | None: the runs of an "
     "ASCII text without a percent-escape (nor both '&' and ';') as pieces._py_runs_of "
     "makes them (None: the Python path)."},
    {"piece_scan", (PyCFunction)(void (*)(void))piece_scan, METH_FASTCALL,
     "piece_scan(args, grams, older, memo, runs_of, limits) -> (bool, [(name, run), ...]) | "
     "None: the runs of a call's plain values whose every gram is kept, as pieces._py_scan "
     "finds them (None: the Python path)."},
    {"piece_grams", (PyCFunction)(void (*)(void))piece_grams, METH_FASTCALL,
     "piece_grams(token, gram) -> list[int] | None: the hashes of an ASCII token's grams "
     "as pieces keeps them (None: not ASCII, the Python path)."},
    {"token_hash", token_hash_py, METH_O,
     "token_hash(norm) -> int: a whole token's fingerprint, 64 bits of BLAKE2b."},
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

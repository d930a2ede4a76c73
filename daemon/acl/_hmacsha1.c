/* HMAC-SHA1 (RFC 2104) over OpenSSL's SHA-1, for the broker's ACL signature check (daemon/acl/signature.py).
 *
 * Why C: through hashlib, one signature is seven method calls and four EVP context copies (OpenSSL 3
 * allocates, cleanses and frees each): the plumbing cost far more than the hashing (docs/performance.md
 * has the callgrind counts). Here the keyed states are two SHA_CTX structs copied
 * by value, the signed values are hashed straight from each str's UTF-8 buffer (no join, no encode), and
 * one call returns the Base64 text; `verify` reads the values from the request's dict itself and compares
 * the digest here, so the broker's check makes no Python object at all. The hashing is OpenSSL's
 * (libcrypto, SHA-NI where the CPU has it).
 * Built by scripts/build_native.py beside the mypyc modules; without it, signature.py does the same with
 * hashlib, and tests/acl check that both give the same signature.
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA1_Init/Update/Final: the EVP calls are what cost too much */
#include <Python.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <string.h>

#define BLOCK 64

/* keyed(key: bytes) -> bytes: the SHA-1 states after absorbing key XOR ipad and key XOR opad. */
static PyObject *keyed(PyObject *module, PyObject *arg) {
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0) return NULL;
    unsigned char block[BLOCK] = {0}, pad[BLOCK];
    if (key.len > BLOCK)
        SHA1(key.buf, (size_t)key.len, block);
    else
        memcpy(block, key.buf, (size_t)key.len);
    PyBuffer_Release(&key);
    SHA_CTX states[2];
    for (int i = 0; i < BLOCK; i++) pad[i] = block[i] ^ 0x36;
    SHA1_Init(&states[0]);
    SHA1_Update(&states[0], pad, BLOCK);
    for (int i = 0; i < BLOCK; i++) pad[i] = block[i] ^ 0x5c;
    SHA1_Init(&states[1]);
    SHA1_Update(&states[1], pad, BLOCK);
    OPENSSL_cleanse(block, BLOCK);
    OPENSSL_cleanse(pad, BLOCK);
    PyObject *out = PyBytes_FromStringAndSize((const char *)states, sizeof states);
    OPENSSL_cleanse(states, sizeof states);
    return out;
}

/* The signed values are many short strings: gathered here, they reach SHA1_Update in one call, not one each. */
typedef struct {
    SHA_CTX ctx;
    size_t used;
    size_t high; /* the most of `buf` filled: what to cleanse (cleansing all of it cost every send) */
    unsigned char buf[1024];
} Gather;

static int absorb(Gather *g, PyObject *value) {
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "signed values are str, not %.100s", Py_TYPE(value)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    const char *utf8;
    if (PyUnicode_IS_COMPACT_ASCII(value)) { /* header values are: their bytes are their UTF-8 */
        utf8 = (const char *)PyUnicode_DATA(value);
        n = PyUnicode_GET_LENGTH(value);
    } else if ((utf8 = PyUnicode_AsUTF8AndSize(value, &n)) == NULL) {
        return -1; /* a lone surrogate raises, as encode() does */
    }
    if (g->used + (size_t)n > sizeof g->buf) {
        SHA1_Update(&g->ctx, g->buf, g->used);
        g->used = 0;
    }
    if ((size_t)n > sizeof g->buf) {
        SHA1_Update(&g->ctx, utf8, (size_t)n);
    } else {
        memcpy(g->buf + g->used, utf8, (size_t)n);
        g->used += (size_t)n;
        if (g->used > g->high) g->high = g->used;
    }
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
#define B64_LENGTH 28 /* 20 bytes: six full 3-byte groups, then two bytes and one '=' */

/* Copies the keyed states (checked: bytes from keyed()) into g and outer. 0, or -1 with an exception. */
static int start(Gather *g, SHA_CTX *outer, PyObject *states) {
    g->used = g->high = 0;
    if (!PyBytes_Check(states) || PyBytes_GET_SIZE(states) != 2 * (Py_ssize_t)sizeof(SHA_CTX)) {
        PyErr_SetString(PyExc_TypeError, "states must be the bytes keyed() returned");
        return -1;
    }
    memcpy(&g->ctx, PyBytes_AS_STRING(states), sizeof g->ctx);
    memcpy(outer, PyBytes_AS_STRING(states) + sizeof g->ctx, sizeof *outer);
    if (g->ctx.num >= SHA_CBLOCK || outer->num >= SHA_CBLOCK) { /* SHA1_Update would write past its block */
        PyErr_SetString(PyExc_ValueError, "states must be the bytes keyed() returned");
        return -1;
    }
    return 0;
}

/* Hashes what g gathered, then the body (any bytes-like object), and writes the Base64 HMAC into out. */
static int finish(Gather *g, SHA_CTX *outer, PyObject *body_object, unsigned char out[B64_LENGTH]) {
    unsigned char md[SHA_DIGEST_LENGTH];
    Py_buffer body;
    if (PyObject_GetBuffer(body_object, &body, PyBUF_SIMPLE) < 0) return -1;
    SHA1_Update(&g->ctx, g->buf, g->used);
    SHA1_Update(&g->ctx, body.buf, (size_t)body.len);
    PyBuffer_Release(&body);
    SHA1_Final(md, &g->ctx);
    SHA1_Update(outer, md, sizeof md);
    SHA1_Final(md, outer);
    unsigned char *p = out;
    int i = 0;
    for (; i + 3 <= SHA_DIGEST_LENGTH; i += 3) {
        unsigned v = (unsigned)md[i] << 16 | (unsigned)md[i + 1] << 8 | md[i + 2];
        *p++ = B64[v >> 18 & 63], *p++ = B64[v >> 12 & 63], *p++ = B64[v >> 6 & 63], *p++ = B64[v & 63];
    }
    unsigned v = (unsigned)md[i] << 16 | (unsigned)md[i + 1] << 8;
    *p++ = B64[v >> 18 & 63], *p++ = B64[v >> 12 & 63], *p++ = B64[v >> 6 & 63], *p = '=';
    OPENSSL_cleanse(md, sizeof md);
    return 0;
}

/* The keyed states and the signed content leave no copy on the stack. */
static void wipe(Gather *g, SHA_CTX *outer) {
    OPENSSL_cleanse(&g->ctx, sizeof g->ctx);
    OPENSSL_cleanse(g->buf, g->high);
    OPENSSL_cleanse(outer, sizeof *outer);
}

/* signature(states, values, body) -> str: Base64(HMAC-SHA1) of the values (a str or a tuple of str, in
 * order, UTF-8) followed by the body (any bytes-like object), with the states `keyed` made. */
static PyObject *signature(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "signature(states, values, body) takes 3 arguments");
        return NULL;
    }
    Gather g;
    SHA_CTX outer;
    unsigned char b64[B64_LENGTH];
    PyObject *out = NULL;
    if (start(&g, &outer, args[0]) < 0) goto done;
    PyObject *values = args[1];
    if (PyTuple_Check(values)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(values); i++)
            if (absorb(&g, PyTuple_GET_ITEM(values, i)) < 0) goto done;
    } else if (absorb(&g, values) < 0) { /* itemgetter of one key answers the value itself */
        goto done;
    }
    if (finish(&g, &outer, args[2], b64) == 0)
        out = PyUnicode_FromStringAndSize((const char *)b64, B64_LENGTH);
done:
    wipe(&g, &outer);
    return out;
}

/* verify(states, fields, keys, excluded, body, given) -> bool | None: whether `given` is the signature of
 * fields[k] for k in keys, then the body; None when the keys are not the fields' names less the excluded
 * ones present (another order must be tried). That holds for `keys` of distinct names, none of them
 * excluded: the caller's contract (signature.Verifier learns them from sorted(fields), less the excluded).
 * The broker's check in one call: the values are read straight from the dict (no tuple), and the digest
 * is compared here in constant time (no str made). */
static PyObject *verify(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "verify(states, fields, keys, excluded, body, given): 6 arguments");
        return NULL;
    }
    PyObject *fields = args[1], *keys = args[2], *excluded = args[3], *given = args[5];
    if (!PyDict_CheckExact(fields) || !PyTuple_Check(keys) || !PyTuple_Check(excluded) ||
        !PyUnicode_Check(given)) {
        PyErr_SetString(PyExc_TypeError, "verify takes a dict, two tuples of str and a str");
        return NULL;
    }
    Py_ssize_t present = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(excluded); i++) {
        int in = PyDict_Contains(fields, PyTuple_GET_ITEM(excluded, i));
        if (in < 0) return NULL;
        present += in;
    }
    if (PyDict_GET_SIZE(fields) != PyTuple_GET_SIZE(keys) + present) Py_RETURN_NONE;
    Gather g;
    SHA_CTX outer;
    unsigned char b64[B64_LENGTH];
    PyObject *out = NULL;
    if (start(&g, &outer, args[0]) < 0) goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *value = PyDict_GetItemWithError(fields, PyTuple_GET_ITEM(keys, i));
        if (value == NULL) { /* equal counts, other names: not this order */
            if (!PyErr_Occurred()) out = Py_NewRef(Py_None);
            goto done;
        }
        if (absorb(&g, value) < 0) goto done;
    }
    if (finish(&g, &outer, args[4], b64) < 0) goto done;
    /* (PyUnicode_DATA, not the compact layout's: a str subclass keeps its characters apart) */
    int equal = PyUnicode_IS_ASCII(given) && PyUnicode_GET_LENGTH(given) == B64_LENGTH &&
                CRYPTO_memcmp(b64, PyUnicode_DATA(given), B64_LENGTH) == 0;
    out = PyBool_FromLong(equal);
done:
    wipe(&g, &outer);
    OPENSSL_cleanse(b64, sizeof b64);
    return out;
}

static PyMethodDef methods[] = {
    {"keyed", keyed, METH_O, "keyed(key) -> the HMAC-SHA1 states for `key` (inner, outer)"},
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL,
     "signature(states, values, body) -> Base64(HMAC-SHA1(values..., body))"},
    {"verify", (PyCFunction)(void (*)(void))verify, METH_FASTCALL,
     "verify(states, fields, keys, excluded, body, given) -> whether given signs them (None: keys unfit)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hmacsha1", NULL, 0, methods};

PyMODINIT_FUNC PyInit__hmacsha1(void) { return PyModule_Create(&module); }

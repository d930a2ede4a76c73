/* HMAC-SHA1 (RFC 2104) over OpenSSL's SHA-1, for the broker's ACL signature check (daemon/acl/signature.py).
 *
 * Why C: through hashlib, one signature is seven method calls and four EVP context copies (OpenSSL 3
 * allocates, cleanses and frees each), ~20k instructions of plumbing around ~2k of hashing with SHA-NI;
 * a signed send paid ~12 us for it in the broker. Here the keyed states are two SHA_CTX structs copied
 * by value, the signed values are hashed straight from each str's UTF-8 buffer (no join, no encode), and
 * one call returns the Base64 text. The hashing is OpenSSL's (libcrypto, SHA-NI where the CPU has it).
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
    unsigned char buf[1024];
} Gather;

static int absorb(Gather *g, PyObject *value) {
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "signed values are str, not %.100s", Py_TYPE(value)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(value, &n); /* a lone surrogate raises, as encode() does */
    if (utf8 == NULL) return -1;
    if (g->used + (size_t)n > sizeof g->buf) {
        SHA1_Update(&g->ctx, g->buf, g->used);
        g->used = 0;
    }
    if ((size_t)n > sizeof g->buf) {
        SHA1_Update(&g->ctx, utf8, (size_t)n);
    } else {
        memcpy(g->buf + g->used, utf8, (size_t)n);
        g->used += (size_t)n;
    }
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* signature(states, values, body) -> str: Base64(HMAC-SHA1) of the values (a str or a tuple of str, in
 * order, UTF-8) followed by the body (any bytes-like object), with the states `keyed` made. */
static PyObject *signature(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "signature(states, values, body) takes 3 arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) != 2 * (Py_ssize_t)sizeof(SHA_CTX)) {
        PyErr_SetString(PyExc_TypeError, "states must be the bytes keyed() returned");
        return NULL;
    }
    Gather g;
    SHA_CTX outer;
    unsigned char md[SHA_DIGEST_LENGTH];
    PyObject *out = NULL;
    memcpy(&g.ctx, PyBytes_AS_STRING(args[0]), sizeof g.ctx);
    memcpy(&outer, PyBytes_AS_STRING(args[0]) + sizeof g.ctx, sizeof outer);
    g.used = 0;
    if (g.ctx.num >= SHA_CBLOCK || outer.num >= SHA_CBLOCK) { /* SHA1_Update would write past its block */
        PyErr_SetString(PyExc_ValueError, "states must be the bytes keyed() returned");
        goto done;
    }
    PyObject *values = args[1];
    if (PyTuple_Check(values)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(values); i++)
            if (absorb(&g, PyTuple_GET_ITEM(values, i)) < 0) goto done;
    } else if (absorb(&g, values) < 0) { /* itemgetter of one key answers the value itself */
        goto done;
    }
    SHA1_Update(&g.ctx, g.buf, g.used);
    Py_buffer body;
    if (PyObject_GetBuffer(args[2], &body, PyBUF_SIMPLE) < 0) goto done;
    SHA1_Update(&g.ctx, body.buf, (size_t)body.len);
    PyBuffer_Release(&body);
    SHA1_Final(md, &g.ctx);
    SHA1_Update(&outer, md, sizeof md);
    SHA1_Final(md, &outer);
    /* 20 bytes: six full 3-byte groups, then two bytes and one '=' */
    out = PyUnicode_New(28, 127);
    if (out == NULL) goto done;
    Py_UCS1 *p = PyUnicode_1BYTE_DATA(out);
    int i = 0;
    for (; i + 3 <= SHA_DIGEST_LENGTH; i += 3) {
        unsigned v = (unsigned)md[i] << 16 | (unsigned)md[i + 1] << 8 | md[i + 2];
        *p++ = B64[v >> 18 & 63], *p++ = B64[v >> 12 & 63], *p++ = B64[v >> 6 & 63], *p++ = B64[v & 63];
    }
    unsigned v = (unsigned)md[i] << 16 | (unsigned)md[i + 1] << 8;
    *p++ = B64[v >> 18 & 63], *p++ = B64[v >> 12 & 63], *p++ = B64[v >> 6 & 63], *p = '=';
done: /* the keyed states and the signed content leave no copy on the stack */
    OPENSSL_cleanse(&g, sizeof g);
    OPENSSL_cleanse(&outer, sizeof outer);
    OPENSSL_cleanse(md, sizeof md);
    return out;
}

static PyMethodDef methods[] = {
    {"keyed", keyed, METH_O, "keyed(key) -> the HMAC-SHA1 states for `key` (inner, outer)"},
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL,
     "signature(states, values, body) -> Base64(HMAC-SHA1(values..., body))"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hmacsha1", NULL, 0, methods};

PyMODINIT_FUNC PyInit__hmacsha1(void) { return PyModule_Create(&module); }

/* What dispatch needs from a CommitLog record whose hosts are both IPv4, for store/record.py's
 * read_record_info.
 *
 * Why C: a DLedger follower parses every record its leader pushes (its ConsumeQueues and IndexFiles are
 * built from them), and the compiled Python parse makes a Python object of every field it reads, ten
 * more for the properties' split and partition, and goes through the generic buffer protocol for each
 * byte it looks at: a few microseconds a record, a fifth of a follower's CPU per send. Here the record is
 * read in place and only the result's objects are made.
 *
 * It checks exactly what record.py's _layout checks (without the body CRC) and returns None for anything
 * it does not take as it is (IPv6 hosts, a record too short for the fixed head, any check failing): the
 * caller then runs the Python parse, which raises CorruptRecordError with the reason. The properties are
 * split as decode_properties splits them (separators are ASCII, so splitting the bytes first and decoding
 * each name and value with "replace" gives the same strings as decoding first). Built by
 * scripts/build_native.py beside the mypyc modules; tests/store/test_record_info_c.py holds both parses to
 * the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define HOST_V6_FLAGS 0x30 /* BORNHOST_V6_FLAG | STOREHOST_V6_FLAG */
#define V4_HEAD 88         /* TOTALSIZE through BODYLEN when both hosts are IPv4 */

static int32_t i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static int16_t i16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

static int64_t i64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)i32(p) << 32) | (uint32_t)i32(p + 4));
}

/* Property names seen so far (TAGS, KEYS, UNIQ_KEY, WAIT, ...: a handful per broker), made once: each
 * record's names are then looked up here instead of decoded, allocated and hashed again. ASCII only. */
#define NAMES 32
#define NAME_MAX_LEN 32
static struct {
    Py_ssize_t len;
    char bytes[NAME_MAX_LEN];
    PyObject *str;
} names[NAMES];
static int names_used;

static PyObject *name_str(const unsigned char *p, Py_ssize_t len) {
    for (int i = 0; i < names_used; i++)
        if (names[i].len == len && memcmp(names[i].bytes, p, (size_t)len) == 0) return Py_NewRef(names[i].str);
    PyObject *str = PyUnicode_DecodeUTF8((const char *)p, len, "replace");
    if (str != NULL && names_used < NAMES && len <= NAME_MAX_LEN && PyUnicode_IS_ASCII(str)) {
        PyUnicode_InternInPlace(&str);
        names[names_used].len = len;
        memcpy(names[names_used].bytes, p, (size_t)len);
        names[names_used].str = Py_NewRef(str);
        names_used++;
    }
    return str;
}

/* The properties' bytes as decode_properties makes them: name\x01value pairs split by \x02, a pair kept
 * when it has the separator and neither side is empty (a later name wins). */
static PyObject *properties(const unsigned char *p, Py_ssize_t len) {
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    const unsigned char *end = p + len;
    while (p < end) {
        const unsigned char *seg_end = memchr(p, 0x02, (size_t)(end - p));
        if (seg_end == NULL) seg_end = end;
        const unsigned char *sep = memchr(p, 0x01, (size_t)(seg_end - p));
        if (sep != NULL && sep > p && sep + 1 < seg_end) {
            PyObject *name = name_str(p, sep - p);
            PyObject *value = name ? PyUnicode_DecodeUTF8((const char *)sep + 1, seg_end - sep - 1, "replace")
                                   : NULL;
            int failed = value == NULL || PyDict_SetItem(out, name, value) < 0;
            Py_XDECREF(name);
            Py_XDECREF(value);
            if (failed) {
                Py_DECREF(out);
                return NULL;
            }
        }
        p = seg_end + 1;
    }
    return out;
}

/* v4_info(buf, pos, limit) -> (commit_log_offset, size, topic, queue_id, queue_offset, sys_flag,
 * store_timestamp, prepared_transaction_offset, properties) | None */
static PyObject *v4_info(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, limit;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &limit)) return NULL;
    PyObject *result = NULL;
    const unsigned char *b = view.buf;
    if (pos < 0 || limit > view.len || pos + V4_HEAD > limit) goto none;
    int32_t total = i32(b + pos), magic = i32(b + pos + 4), sys_flag = i32(b + pos + 36);
    if (magic != MAGIC_V1 && magic != MAGIC_V2) goto none;
    if (total <= 0 || pos + total > limit) goto none;
    if (sys_flag & HOST_V6_FLAGS) goto none;
    Py_ssize_t end = pos + total;
    if (pos + 72 + 16 > end) goto none;
    int32_t body_len = i32(b + pos + 84);
    Py_ssize_t body_pos = pos + V4_HEAD;
    if (body_len < 0 || body_pos + body_len + 1 > end) goto none;
    Py_ssize_t tp = body_pos + body_len, topic_pos, topic_len;
    if (magic == MAGIC_V1) {
        topic_len = (signed char)b[tp];
        topic_pos = tp + 1;
    } else {
        if (tp + 2 > end) goto none;
        topic_len = i16(b + tp);
        topic_pos = tp + 2;
    }
    if (topic_len < 0 || topic_pos + topic_len + 2 > end) goto none;
    Py_ssize_t props_len = i16(b + topic_pos + topic_len), props_pos = topic_pos + topic_len + 2;
    if (props_len < 0 || props_pos + props_len != end) goto none;
    PyObject *topic = PyUnicode_DecodeUTF8((const char *)b + topic_pos, topic_len, "replace");
    if (topic == NULL) goto done;
    PyObject *props = properties(b + props_pos, props_len);
    if (props == NULL) {
        Py_DECREF(topic);
        goto done;
    }
    result = PyTuple_New(9);
    if (result == NULL) {
        Py_DECREF(topic);
        Py_DECREF(props);
        goto done;
    }
    PyTuple_SET_ITEM(result, 2, topic);
    PyTuple_SET_ITEM(result, 8, props);
    int64_t ints[9] = {i64(b + pos + 28), total, 0, i32(b + pos + 12), i64(b + pos + 20), sys_flag,
                       i64(b + pos + 56), i64(b + pos + 76), 0};
    for (int i = 0; i < 8; i++) {
        if (i == 2) continue;
        PyObject *n = PyLong_FromLongLong((long long)ints[i]);
        if (n == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, n);
    }
    goto done;
none:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"v4_info", v4_info, METH_VARARGS, "What dispatch needs from an all-IPv4 record, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordinfo", NULL, 0, methods};

PyMODINIT_FUNC PyInit__recordinfo(void) { return PyModule_Create(&module); }

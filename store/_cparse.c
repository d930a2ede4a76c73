/* The store's hot loops over records and entries that the compiled Python runs an object at a time:
 *
 * v4_info: what dispatch needs from a CommitLog record whose hosts are both IPv4, for store/record.py's
 * read_record_info. A DLedger follower parses every record its leader pushes (its ConsumeQueues and
 * IndexFiles are built from them); the compiled Python parse made a Python object of every field it read,
 * ten more for the properties' split and partition, and went through the generic buffer protocol for each
 * byte it looked at. It checks exactly what record.py's _layout checks (without the body CRC) and returns
 * None for anything it does not take as it is (IPv6 hosts, a record too short for the fixed head, any check
 * failing): the caller then runs the Python parse, which raises CorruptRecordError with the reason. The
 * properties are split as decode_properties splits them (separators are ASCII, so splitting the bytes first
 * and decoding each name and value with "replace" gives the same strings as decoding first).
 *
 * scan_run: how far a binary push's run of DLedger entries passes the checks of store/dledger_log.py's
 * _append_raw_run, and their index records (below).
 *
 * Built by scripts/build_native.py beside the mypyc modules (zlib's headers needed); without it the Python
 * does the same. tests/store/test_cparse.py holds each to the Python it stands for, on damaged input too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

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
        if (seg_end == end) break; /* (not p = end + 1: a pointer past one-past-the-end is undefined) */
        p = seg_end + 1;
    }
    return out;
}

/* v4_info(buf, pos, limit) -> (commit_log_offset, size, topic, queue_id, queue_offset, sys_flag,
 * store_timestamp, prepared_transaction_offset, properties) | None
 *
 * Every bound is checked as a length against what is left (never as a sum that could wrap round), and a
 * pos or limit outside Py_ssize_t is clipped to it (declined below: the Python parse then refuses it). */
static PyObject *v4_info(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "v4_info(buf, pos, limit) takes 3 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyNumber_AsSsize_t(args[1], NULL), limit = PyNumber_AsSsize_t(args[2], NULL);
    if ((pos == -1 || limit == -1) && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    const unsigned char *b = view.buf;
    if (pos < 0 || pos > limit || limit > view.len || limit - pos < V4_HEAD) goto none;
    int32_t total = i32(b + pos), magic = i32(b + pos + 4), sys_flag = i32(b + pos + 36);
    if (magic != MAGIC_V1 && magic != MAGIC_V2) goto none;
    if (total <= 0 || total > limit - pos) goto none;
    if (sys_flag & HOST_V6_FLAGS) goto none;
    Py_ssize_t end = pos + total;
    if (total < V4_HEAD) goto none;
    int32_t body_len = i32(b + pos + 84);
    Py_ssize_t body_pos = pos + V4_HEAD;
    if (body_len < 0 || body_len > end - body_pos - 1) goto none;
    Py_ssize_t tp = body_pos + body_len, topic_pos, topic_len;
    if (magic == MAGIC_V1) {
        topic_len = (signed char)b[tp];
        topic_pos = tp + 1;
    } else {
        if (end - tp < 2) goto none;
        topic_len = i16(b + tp);
        topic_pos = tp + 2;
    }
    if (topic_len < 0 || topic_len > end - topic_pos - 2) goto none;
    Py_ssize_t props_len = i16(b + topic_pos + topic_len), props_pos = topic_pos + topic_len + 2;
    if (props_len < 0 || props_len != end - props_pos) goto none;
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

/* A binary push's run of DLedger entries, for store/dledger_log.py's _append_raw_run: how far from `off`
 * every check of its loop passes (the header whole, magic 1, size and body length agreeing, the index next
 * and the term not lower, the leader's pos where this log ends, the body against a bodyCrc not 0, except
 * for the run's first entry, which the caller checked; no roll due), and those entries' index records.
 * It stops at the first entry that does not pass (or that needs a roll): the caller's loop takes over
 * there, and refuses or stops as it always did, so that no entry is judged here differently.
 *
 * scan_run(buf, off, start, at, base, file_size, prev_index, prev_term)
 *     -> (off, at, prev_index, prev_term, index_records)
 *
 * The Python loop's ints have no bound: a sum here that would leave 64 bits (the index after the largest,
 * an entry ending past the largest position, the room left in a file from positions far apart) stops the
 * scan before that entry, and arguments past 64 bits take nothing; the loop then judges the rest. */
#define ENTRY_BODY_OFFSET 48
#define ENTRY_HEADER_SIZE 44
#define INDEX_UNIT 32
#define MIN_BLANK_LEN 8

static void put32(unsigned char *p, int32_t v) {
    p[0] = (unsigned char)((uint32_t)v >> 24), p[1] = (unsigned char)((uint32_t)v >> 16);
    p[2] = (unsigned char)((uint32_t)v >> 8), p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, int64_t v) {
    put32(p, (int32_t)((uint64_t)v >> 32));
    put32(p + 4, (int32_t)(uint64_t)v);
}

#define SCAN_ARGS 8

static PyObject *scan_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != SCAN_ARGS) {
        PyErr_SetString(PyExc_TypeError, "scan_run takes 8 arguments");
        return NULL;
    }
    long long v[SCAN_ARGS - 1]; /* off, start, at, base, file_size, prev_index, prev_term */
    int past_64_bits = 0;
    for (int i = 0; i < SCAN_ARGS - 1; i++) {
        int overflow;
        v[i] = PyLong_AsLongLongAndOverflow(args[i + 1], &overflow);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
        past_64_bits |= overflow;
    }
    if (past_64_bits) /* nothing taken: the arguments as they came */
        return Py_BuildValue("(OOOOy#)", args[1], args[3], args[6], args[7], "", (Py_ssize_t)0);
    long long off = v[0], start = v[1], at = v[2], base = v[3], file_size = v[4], prev_index = v[5],
              prev_term = v[6];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf;
    long long len = (long long)view.len;
    unsigned char *records = NULL;
    Py_ssize_t used = 0, cap = 0;
    PyObject *result = NULL;
    while (off >= 0 && off < len) {
        const unsigned char *h = b + off;
        if (len - off < ENTRY_BODY_OFFSET) break;
        int32_t magic = i32(h), size = i32(h + 4), body_crc = i32(h + 40), body_len = i32(h + 44);
        int64_t index = i64(h + 8), term = i64(h + 16), pos = i64(h + 24);
        if (magic != 1 || size <= ENTRY_HEADER_SIZE || (long long)body_len + ENTRY_BODY_OFFSET != size) break;
        if (len - off < size) break;
        if (prev_index == LLONG_MAX || index != prev_index + 1 || term < prev_term) break;
        if (off > start) {
            long long wrote, room;
            if (__builtin_sub_overflow(at, base, &wrote) || __builtin_sub_overflow(file_size, wrote, &room))
                break;
            if ((long long)size + MIN_BLANK_LEN > room) break;
        }
        if (pos != at) break;
        long long next_at;
        if (__builtin_add_overflow(at, (long long)size, &next_at)) break;
        if (off > start && body_crc != 0) {
            uLong crc = crc32(0L, Z_NULL, 0);
            const unsigned char *body = h + ENTRY_BODY_OFFSET;
            long long left = body_len;
            while (left > 0) { /* (zlib takes uInt lengths) */
                uInt n = left > 0x40000000 ? 0x40000000 : (uInt)left;
                crc = crc32(crc, body, n);
                body += n, left -= n;
            }
            if ((int32_t)(crc & 0x7FFFFFFF) != body_crc) break;
        }
        if (used + INDEX_UNIT > cap) {
            Py_ssize_t grown = cap ? cap * 2 : 32 * INDEX_UNIT;
            unsigned char *more = PyMem_Realloc(records, (size_t)grown);
            if (more == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            records = more, cap = grown;
        }
        unsigned char *r = records + used;
        put32(r, magic), put64(r + 4, pos), put32(r + 12, size), put64(r + 16, index), put64(r + 24, term);
        used += INDEX_UNIT;
        off += size, at = next_at, prev_index = index, prev_term = term;
    }
    result = Py_BuildValue("(LLLLy#)", off, at, prev_index, prev_term, records ? (char *)records : "", used);
done:
    PyMem_Free(records);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"v4_info", (PyCFunction)(void (*)(void))v4_info, METH_FASTCALL,
     "What dispatch needs from an all-IPv4 record, or None."},
    {"scan_run", (PyCFunction)(void (*)(void))scan_run, METH_FASTCALL,
     "How far a pushed run of entries passes every check, and their index records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cparse", NULL, 0, methods};

PyMODINIT_FUNC PyInit__cparse(void) { return PyModule_Create(&module); }

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
 * dispatch_entries: a follower's committed entries of such a run straight to their ConsumeQueue units (and
 * the index keys' properties), with no record object made (below).
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

/* CRC-32 (zlib's, gzip's polynomial 0x04C11DB7 bit-reflected) of buf, continuing crc as zlib's crc32 does.
 *
 * zlib (Debian 12's) computes it a byte or a word at a time through tables: for a send's body that is the
 * largest single step of a DLedger follower's entry, and the leader and a single broker pay it for every
 * record's BODYCRC and every entry's bodyCrc. Where the CPU has carry-less multiplication (PCLMULQDQ,
 * checked once at import), the body is folded 64 bytes a step by the method
 * of Gopal, Ozturk et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction"
 * (Intel, 2009): four 128-bit lanes, each multiplied by x^(512+64) and x^512 mod P and xored
 * with the next 64 bytes; the lanes folded into one, 16 bytes at a time for the rest; 128 bits reduced
 * to 64, then to 32 by Barrett's reduction. The constants are the paper's, in the bit-reflected domain.
 * What is shorter than 64 bytes, and the tail of fewer than 16, goes through zlib; so does everything on
 * a CPU without PCLMULQDQ. The same results bit for bit: tests/store/test_cparse_crc.py. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CRC_FOLD 1

__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(uint32_t crc, const unsigned char *p, size_t n) {
    /* n >= 64 and a multiple of 16; crc is the running value, inverted (zlib's pre- and post-conditioning
     * are the caller's). */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL); /* x^(4*128+32), x^(4*128-32) */
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL); /* x^(128+32), x^(128-32) */
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);                 /* x^64 */
    const __m128i mu_p = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);  /* P', mu */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 16)),
            c = _mm_loadu_si128((const __m128i *)(p + 32)), d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)crc));
    p += 64, n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        __m128i a0 = _mm_clmulepi64_si128(a, k1k2, 0x00), b0 = _mm_clmulepi64_si128(b, k1k2, 0x00),
                c0 = _mm_clmulepi64_si128(c, k1k2, 0x00), d0 = _mm_clmulepi64_si128(d, k1k2, 0x00);
        a = _mm_xor_si128(_mm_clmulepi64_si128(a, k1k2, 0x11), a0);
        b = _mm_xor_si128(_mm_clmulepi64_si128(b, k1k2, 0x11), b0);
        c = _mm_xor_si128(_mm_clmulepi64_si128(c, k1k2, 0x11), c0);
        d = _mm_xor_si128(_mm_clmulepi64_si128(d, k1k2, 0x11), d0);
        a = _mm_xor_si128(a, _mm_loadu_si128((const __m128i *)p));
        b = _mm_xor_si128(b, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = _mm_xor_si128(c, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = _mm_xor_si128(d, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    /* the four lanes into one, then 16 bytes a step */
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), b);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), c);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), d);
    for (; n >= 16; p += 16, n -= 16) {
        __m128i folded = _mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00));
        a = _mm_xor_si128(folded, _mm_loadu_si128((const __m128i *)p));
    }
    /* 128 bits to 64 */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k3k4, 0x10));
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00), _mm_srli_si128(a, 4));
    /* Barrett: 64 bits to 32 */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), mu_p, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), mu_p, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}
#endif

static int crc_can_fold; /* set at import: the CPU has PCLMULQDQ and SSE4.1 */

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, size_t n) {
#ifdef CRC_FOLD
    if (crc_can_fold && n >= 64) {
        size_t folded = n & ~(size_t)15;
        crc = ~crc_fold(~crc, p, folded);
        p += folded, n -= folded;
    }
#endif
    while (n > 0) { /* (zlib takes uInt lengths) */
        uInt part = n > 0x40000000 ? 0x40000000 : (uInt)n;
        crc = (uint32_t)crc32(crc, p, part);
        p += part, n -= part;
    }
    return crc;
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

/* Topics seen last (a broker's traffic names a few), made once: each record's topic is then compared
 * here instead of decoded and allocated again. Any bytes: the string kept is what they decoded to. */
#define TOPICS 8
#define TOPIC_MAX_LEN 64
static struct {
    Py_ssize_t len;
    char bytes[TOPIC_MAX_LEN];
    PyObject *str;
} topics[TOPICS];
static int topics_next;

static PyObject *topic_str(const unsigned char *p, Py_ssize_t len) {
    for (int i = 0; i < TOPICS; i++)
        if (topics[i].str != NULL && topics[i].len == len && memcmp(topics[i].bytes, p, (size_t)len) == 0)
            return Py_NewRef(topics[i].str);
    PyObject *str = PyUnicode_DecodeUTF8((const char *)p, len, "replace");
    if (str != NULL && len <= TOPIC_MAX_LEN) {
        int i = topics_next;
        topics_next = (topics_next + 1) % TOPICS;
        Py_XSETREF(topics[i].str, Py_NewRef(str));
        topics[i].len = len;
        memcpy(topics[i].bytes, p, (size_t)len);
    }
    return str;
}

/* Where the fields of an all-IPv4 record at b[pos:limit] lie, as record.py's _layout finds them: 1 with
 * *r filled, 0 when the record is not taken here (the caller's Python parse judges it).
 *
 * Every bound is checked as a length against what is left (never as a sum that could wrap round). */
struct v4 {
    int32_t total, sys_flag, queue_id;
    int64_t offset, queue_offset, store_timestamp, prepared;
    Py_ssize_t topic_pos, topic_len, props_pos, props_len;
};

static int v4_layout(const unsigned char *b, Py_ssize_t len, Py_ssize_t pos, Py_ssize_t limit, struct v4 *r) {
    if (pos < 0 || pos > limit || limit > len || limit - pos < V4_HEAD) return 0;
    int32_t total = i32(b + pos), magic = i32(b + pos + 4), sys_flag = i32(b + pos + 36);
    if (magic != MAGIC_V1 && magic != MAGIC_V2) return 0;
    if (total <= 0 || total > limit - pos) return 0;
    if (sys_flag & HOST_V6_FLAGS) return 0;
    Py_ssize_t end = pos + total;
    if (total < V4_HEAD) return 0;
    int32_t body_len = i32(b + pos + 84);
    Py_ssize_t body_pos = pos + V4_HEAD;
    if (body_len < 0 || body_len > end - body_pos - 1) return 0;
    Py_ssize_t tp = body_pos + body_len, topic_pos, topic_len;
    if (magic == MAGIC_V1) {
        topic_len = (signed char)b[tp];
        topic_pos = tp + 1;
    } else {
        if (end - tp < 2) return 0;
        topic_len = i16(b + tp);
        topic_pos = tp + 2;
    }
    if (topic_len < 0 || topic_len > end - topic_pos - 2) return 0;
    Py_ssize_t props_len = i16(b + topic_pos + topic_len), props_pos = topic_pos + topic_len + 2;
    if (props_len < 0 || props_len != end - props_pos) return 0;
    r->total = total;
    r->sys_flag = sys_flag;
    r->queue_id = i32(b + pos + 12);
    r->offset = i64(b + pos + 28);
    r->queue_offset = i64(b + pos + 20);
    r->store_timestamp = i64(b + pos + 56);
    r->prepared = i64(b + pos + 76);
    r->topic_pos = topic_pos;
    r->topic_len = topic_len;
    r->props_pos = props_pos;
    r->props_len = props_len;
    return 1;
}

/* The fields of the all-IPv4 record v4_layout read into *rp, as v4_info returns them: a new tuple, NULL
 * with an exception set on failure; v4_parse: the record at b[pos:limit] so, Py_None (a new reference)
 * when it is not taken here. */
static PyObject *v4_tuple(const unsigned char *b, const struct v4 *rp) {
    struct v4 r = *rp;
    PyObject *topic = topic_str(b + r.topic_pos, r.topic_len);
    if (topic == NULL) return NULL;
    PyObject *props = properties(b + r.props_pos, r.props_len);
    if (props == NULL) {
        Py_DECREF(topic);
        return NULL;
    }
    PyObject *result = PyTuple_New(9);
    if (result == NULL) {
        Py_DECREF(topic);
        Py_DECREF(props);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 2, topic);
    PyTuple_SET_ITEM(result, 8, props);
    int64_t ints[9] = {r.offset, r.total, 0, r.queue_id, r.queue_offset, r.sys_flag, r.store_timestamp,
                       r.prepared, 0};
    for (int i = 0; i < 8; i++) {
        if (i == 2) continue;
        PyObject *n = PyLong_FromLongLong((long long)ints[i]);
        if (n == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, n);
    }
    return result;
}

static PyObject *v4_parse(const unsigned char *b, Py_ssize_t len, Py_ssize_t pos, Py_ssize_t limit) {
    struct v4 r;
    return v4_layout(b, len, pos, limit, &r) ? v4_tuple(b, &r) : Py_NewRef(Py_None);
}

/* v4_info(buf, pos, limit) -> (commit_log_offset, size, topic, queue_id, queue_offset, sys_flag,
 * store_timestamp, prepared_transaction_offset, properties) | None
 *
 * A pos or limit outside Py_ssize_t is clipped to it (declined: the Python parse then refuses it). */
static PyObject *v4_info(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "v4_info(buf, pos, limit) takes 3 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyNumber_AsSsize_t(args[1], NULL), limit = PyNumber_AsSsize_t(args[2], NULL);
    if ((pos == -1 || limit == -1) && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = v4_parse(view.buf, view.len, pos, limit);
    PyBuffer_Release(&view);
    return result;
}

#define ENTRY_BODY_OFFSET 48
#define ENTRY_POS_OFFSET 24

/* The DLedger entry at b[off:end] whose record dispatch may take: its header whole, its size within what is
 * left, its record all-IPv4 (as v4_layout reads it, into *r), filling the entry and naming its own offset
 * (the entry's pos + the body offset). 1 with *size and *pos set, else 0. */
static int entry_record(const unsigned char *b, Py_ssize_t len, Py_ssize_t off, Py_ssize_t end, int32_t *size,
                        int64_t *pos, struct v4 *r) {
    if (off < 0 || end - off < ENTRY_BODY_OFFSET) return 0;
    *size = i32(b + off + 4);
    *pos = i64(b + off + ENTRY_POS_OFFSET);
    if (*size < ENTRY_BODY_OFFSET || *size > end - off) return 0;
    if (*pos < 0 || *pos > INT64_MAX - *size) return 0;
    if (!v4_layout(b, len, off + ENTRY_BODY_OFFSET, off + *size, r)) return 0;
    return r->total == *size - ENTRY_BODY_OFFSET && r->offset == *pos + ENTRY_BODY_OFFSET;
}

/* buf's bytes for a walk of buf[off:end], *end clipped to their length: 0 with an exception set when it
 * has none. */
static int run_view(PyObject *buf, Py_buffer *view, Py_ssize_t *end) {
    if (PyObject_GetBuffer(buf, view, PyBUF_SIMPLE) < 0) return 0;
    if (*end > view->len) *end = view->len;
    return 1;
}

/* parse_entries(buf, off, end, room, parsed, make) -> off
 *
 * For store/dledger_commitlog.py's _parse_pushed: the DLedger entries of buf[off:end] (a binary push's
 * run, as a data file holds them), each one's record parsed as v4_info parses it and, when it fills its
 * entry and names its own offset (the entry's pos + the body offset), make(*fields) stored in the dict
 * `parsed` under that offset; at most `room` of them. It stops at the first entry it does not take (a
 * header not whole, a record v4_info declines or that does not fill its entry or name its offset) and
 * returns where: the caller's Python takes that entry as before (it parses an IPv6 record, and stops at a
 * damaged one), so that no entry is judged here differently. */
static PyObject *parse_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "parse_entries(buf, off, end, room, parsed, make) takes 6 arguments");
        return NULL;
    }
    Py_ssize_t off = PyNumber_AsSsize_t(args[1], NULL), end = PyNumber_AsSsize_t(args[2], NULL),
               room = PyNumber_AsSsize_t(args[3], NULL);
    if ((off == -1 || end == -1 || room == -1) && PyErr_Occurred()) return NULL;
    PyObject *parsed = args[4], *make = args[5];
    if (!PyDict_CheckExact(parsed)) {
        PyErr_SetString(PyExc_TypeError, "parse_entries: parsed must be a dict");
        return NULL;
    }
    Py_buffer view;
    if (!run_view(args[0], &view, &end)) return NULL;
    const unsigned char *b = view.buf;
    int failed = 0;
    while (off < end && room > 0) {
        int32_t size;
        int64_t pos;
        struct v4 r;
        if (!entry_record(b, view.len, off, end, &size, &pos, &r)) break;
        PyObject *fields = v4_tuple(b, &r);
        if (fields == NULL) {
            failed = 1;
            break;
        }
        PyObject *info = PyObject_Vectorcall(make, &PyTuple_GET_ITEM(fields, 0), 9, NULL);
        int stored = info == NULL ? -1 : PyDict_SetItem(parsed, PyTuple_GET_ITEM(fields, 0), info);
        Py_XDECREF(info);
        Py_DECREF(fields);
        if (stored < 0) {
            failed = 1;
            break;
        }
        off += size;
        room--;
    }
    PyBuffer_Release(&view);
    return failed ? NULL : PyLong_FromSsize_t(off);
}

/* The last value of each property dispatch reads (TAGS, UNIQ_KEY, KEYS) among the properties' bytes, as
 * properties() keeps pairs (a later name wins); NULL when absent. Names compare as bytes: these names are
 * ASCII, and no other bytes decode to them. */
struct dispatched_props {
    const unsigned char *tags, *uniq, *keys;
    Py_ssize_t tags_len, uniq_len, keys_len;
};

static void dispatch_props(const unsigned char *p, Py_ssize_t len, struct dispatched_props *d) {
    d->tags = d->uniq = d->keys = NULL;
    d->tags_len = d->uniq_len = d->keys_len = 0;
    const unsigned char *end = p + len;
    while (p < end) {
        const unsigned char *seg_end = memchr(p, 0x02, (size_t)(end - p));
        if (seg_end == NULL) seg_end = end;
        const unsigned char *sep = memchr(p, 0x01, (size_t)(seg_end - p));
        if (sep != NULL && sep > p && sep + 1 < seg_end) {
            Py_ssize_t n = sep - p, vlen = seg_end - sep - 1;
            if (n == 4 && memcmp(p, "TAGS", 4) == 0)
                d->tags = sep + 1, d->tags_len = vlen;
            else if (n == 8 && memcmp(p, "UNIQ_KEY", 8) == 0)
                d->uniq = sep + 1, d->uniq_len = vlen;
            else if (n == 4 && memcmp(p, "KEYS", 4) == 0)
                d->keys = sep + 1, d->keys_len = vlen;
        }
        if (seg_end == end) break;
        p = seg_end + 1;
    }
}

/* Java's String.hashCode of the TAGS value's bytes decoded as decode_properties decodes them (UTF-8,
 * "replace"), over UTF-16 code units, sign-extended: store/javahash.py's tags_code. 0 with *failed set
 * when the decode failed (an exception set). */
static int64_t tags_hash(const unsigned char *p, Py_ssize_t len, int *failed) {
    uint32_t h = 0;
    Py_ssize_t i = 0;
    while (i < len && p[i] < 0x80) h = h * 31 + p[i++];
    if (i < len) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)p, len, "replace");
        if (s == NULL) {
            *failed = 1;
            return 0;
        }
        h = 0;
        int kind = PyUnicode_KIND(s);
        const void *data = PyUnicode_DATA(s);
        for (Py_ssize_t k = 0, n = PyUnicode_GET_LENGTH(s); k < n; k++) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, k);
            if (ch > 0xFFFF) {
                h = h * 31 + (0xD800 + ((ch - 0x10000) >> 10));
                h = h * 31 + (0xDC00 + ((ch - 0x10000) & 0x3FF));
            } else {
                h = h * 31 + ch;
            }
        }
        Py_DECREF(s);
    }
    return (int64_t)(int32_t)h;
}

static PyObject *decoded_or_none(const unsigned char *p, Py_ssize_t len) {
    return p == NULL ? Py_NewRef(Py_None) : PyUnicode_DecodeUTF8((const char *)p, len, "replace");
}

/* dispatch_entries(buf, off, end, expect, limit, units, indexed) -> (off, expect, count, store_timestamp)
 *
 * For store/dledger_commitlog.py's pushed_units: a follower's dispatch of the committed entries of a binary
 * push's run buf[off:end] straight to their ConsumeQueue units, with no record object: each entry taken as
 * parse_entries takes it (its record parsed as v4_info parses it, filling its entry and naming its offset),
 * and only while it is the one the dispatch expects next (its pos `expect`, then the end of the one
 * before) and committed (its pos below `limit`). Each record's unit (commit log offset, size, tags code,
 * queue offset) is appended to units[(topic, queue_id)] (a list, made when missing), as engine.py's
 * _dispatch_records groups them; with `indexed` a list (index enabled), a record with a UNIQ_KEY or KEYS
 * property appends (topic, uniq or None, keys or None, commit log offset, store timestamp) to it.
 *
 * Only what dispatch_rules treats as the common case is taken here: a record of a transaction state other
 * than none or commit (no unit, or no keys), or of the delay topic (its tags code is a delivery time), stops
 * the walk, as anything parse_entries would not take does: the caller's Python dispatches from that entry
 * as before. Returns where it stopped, the pos the next entry must have, how many records it took and the
 * last one's store timestamp. */
#define SCHEDULE_TOPIC "SCHEDULE_TOPIC_XXXX"
#define SEEN_QUEUES 16

/* A new tuple of n 64-bit ints (NULL with an exception set). */
static PyObject *ints_tuple(int n, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t v[4] = {a, b, c, d};
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyObject *x = PyLong_FromLongLong((long long)v[i]);
        if (x == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}
static int field(PyObject *arg, int bits, long long *out);
static PyObject *dispatch_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "dispatch_entries(buf, off, end, expect, limit, units, indexed) takes 7 arguments");
        return NULL;
    }
    Py_ssize_t off = PyNumber_AsSsize_t(args[1], NULL), end = PyNumber_AsSsize_t(args[2], NULL);
    if ((off == -1 || end == -1) && PyErr_Occurred()) return NULL;
    long long expect, limit;
    if (!field(args[3], 64, &expect) || !field(args[4], 64, &limit)) return NULL;
    PyObject *units = args[5], *indexed = args[6] == Py_None ? NULL : args[6];
    if (!PyDict_CheckExact(units) || (indexed != NULL && !PyList_CheckExact(indexed))) {
        PyErr_SetString(PyExc_TypeError, "dispatch_entries: units must be a dict, indexed a list or None");
        return NULL;
    }
    Py_buffer view;
    if (!run_view(args[0], &view, &end)) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t count = 0;
    int64_t last_ts = 0;
    int failed = 0, seen = 0;
    PyObject *seen_topic[SEEN_QUEUES], *seen_run[SEEN_QUEUES];
    int32_t seen_qid[SEEN_QUEUES];
    while (off < end) {
        int32_t size;
        int64_t pos;
        struct v4 r;
        if (!entry_record(b, view.len, off, end, &size, &pos, &r)) break;
        if (pos != expect || pos >= limit) break;
        int tran = r.sys_flag & 0xC;
        if (tran != 0x0 && tran != 0x8) break; /* (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE) */
        const unsigned char *topic_p = b + r.topic_pos;
        if (r.topic_len == (Py_ssize_t)sizeof SCHEDULE_TOPIC - 1 &&
            memcmp(topic_p, SCHEDULE_TOPIC, sizeof SCHEDULE_TOPIC - 1) == 0)
            break;
        struct dispatched_props d;
        dispatch_props(b + r.props_pos, r.props_len, &d);
        int64_t code = d.tags == NULL ? 0 : tags_hash(d.tags, d.tags_len, &failed);
        if (failed) break;
        PyObject *topic = topic_str(topic_p, r.topic_len);
        PyObject *unit = topic ? ints_tuple(4, r.offset, (int64_t)r.total, code, r.queue_offset) : NULL;
        /* the queue's list: one of those this call used already (no key made, no lookup), else the dict's */
        PyObject *run = NULL; /* (borrowed) */
        for (int q = 0; unit != NULL && q < seen; q++)
            if (seen_topic[q] == topic && seen_qid[q] == r.queue_id) run = seen_run[q];
        if (unit != NULL && run == NULL) {
            PyObject *qid = PyLong_FromLong(r.queue_id);
            PyObject *key = qid ? PyTuple_Pack(2, topic, qid) : NULL;
            run = key ? PyDict_GetItemWithError(units, key) : NULL;
            if (key != NULL && run == NULL && !PyErr_Occurred()) {
                PyObject *fresh = PyList_New(0);
                if (fresh != NULL && PyDict_SetItem(units, key, fresh) == 0) run = fresh;
                Py_XDECREF(fresh); /* (the dict holds it) */
            }
            if (run != NULL && seen < SEEN_QUEUES) { /* (the dict keeps the list alive; the topic held) */
                seen_topic[seen] = Py_NewRef(topic), seen_qid[seen] = r.queue_id, seen_run[seen] = run;
                seen++;
            }
            Py_XDECREF(qid);
            Py_XDECREF(key);
        }
        failed = run == NULL || PyList_Append(run, unit) < 0;
        if (!failed && indexed != NULL && (d.uniq != NULL || d.keys != NULL)) {
            PyObject *uniq = decoded_or_none(d.uniq, d.uniq_len);
            PyObject *keys = uniq ? decoded_or_none(d.keys, d.keys_len) : NULL;
            PyObject *at = keys ? ints_tuple(2, r.offset, r.store_timestamp, 0, 0) : NULL;
            PyObject *entry = at ? PyTuple_Pack(5, topic, uniq, keys, PyTuple_GET_ITEM(at, 0),
                                                PyTuple_GET_ITEM(at, 1))
                                 : NULL;
            Py_XDECREF(at);
            failed = entry == NULL || PyList_Append(indexed, entry) < 0;
            Py_XDECREF(uniq);
            Py_XDECREF(keys);
            Py_XDECREF(entry);
        }
        Py_XDECREF(topic);
        Py_XDECREF(unit);
        if (failed) break;
        expect = pos + size;
        last_ts = r.store_timestamp;
        off += size;
        count++;
    }
    PyBuffer_Release(&view);
    for (int q = 0; q < seen; q++) Py_DECREF(seen_topic[q]);
    if (failed) return NULL;
    return ints_tuple(4, off, expect, count, last_ts);
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
            /* (a size of 45-47 leaves a body length below 0 that agrees with it: no bytes, CRC 0) */
            uint32_t crc = body_len > 0 ? crc32_of(0, h + ENTRY_BODY_OFFSET, (size_t)body_len) : 0;
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

/* The fixed-layout writes of the put paths (store/dledger.py's pack_header and pack_index, store/indexfile.py's
 * put_keys), each the same bytes as the struct it stands for, packed where it lands (a mapped file): no
 * struct call, whose big-endian 64-bit fields take its slow path. Each field is range-checked as struct
 * checks it (OverflowError here, struct.error there), and the buffer's room first: nothing is written
 * unless all of it fits. */

/* args[i] as a signed integer of `bits` bits into *out; 0 with an exception set when it is not one. */
static int field(PyObject *arg, int bits, long long *out) {
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (v == -1 && PyErr_Occurred()) return 0;
    if (overflow || (bits == 32 && (v < INT32_MIN || v > INT32_MAX))) {
        PyErr_Format(PyExc_OverflowError, "%R does not fit a signed %d-bit field", arg, bits);
        return 0;
    }
    *out = v;
    return 1;
}

/* The writable buffer args[0] with `size` bytes of room at args[1] (its start into *at). */
static int room(PyObject *const *args, Py_buffer *view, Py_ssize_t size, Py_ssize_t *at) {
    Py_ssize_t a = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (a == -1 && PyErr_Occurred()) return 0;
    if (PyObject_GetBuffer(args[0], view, PyBUF_WRITABLE) < 0) return 0;
    if (a < 0 || a > view->len || view->len - a < size) {
        PyErr_Format(PyExc_ValueError, "no room for %zd bytes at %zd of a buffer of %zd", size, a, view->len);
        PyBuffer_Release(view);
        return 0;
    }
    *at = a;
    return 1;
}

/* packed(name, args, nargs, layout, n): buf and at, then one argument per field of `layout` (its widths in
 * bits, 32 or 64; -32: a 32-bit field written 0, no argument) packed big-endian one after another at at. */
static PyObject *packed(const char *name, PyObject *const *args, Py_ssize_t nargs, const int *layout, int n) {
    long long v[16];
    Py_ssize_t size = 0, given = 2;
    for (int i = 0; i < n; i++) size += (layout[i] < 0 ? -layout[i] : layout[i]) / 8, given += layout[i] > 0;
    if (nargs != given) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", name, given);
        return NULL;
    }
    for (int i = 0, a = 2; i < n; i++) {
        v[i] = 0;
        if (layout[i] > 0 && !field(args[a++], layout[i], &v[i])) return NULL;
    }
    Py_buffer view;
    Py_ssize_t at;
    if (!room(args, &view, size, &at)) return NULL;
    unsigned char *p = (unsigned char *)view.buf + at;
    for (int i = 0; i < n; i++) {
        if (layout[i] == 64) {
            put64(p, v[i]);
            p += 8;
        } else {
            put32(p, (int32_t)v[i]);
            p += 4;
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* pack_header(buf, at, magic, size, index, term, pos, body_crc, body_len): a DLedger entry's header
 * (">iiqqqiiii", channel and chainCrc 0). */
static PyObject *pack_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    static const int layout[9] = {32, 32, 64, 64, 64, -32, -32, 32, 32};
    return packed("pack_header", args, nargs, layout, 9);
}

/* place_entry(buf, at, index, term, pos, body) -> body_crc
 *
 * A leader's DLedger entry written whole at buf[at:]: the header pack_header writes (magic 1, its size the
 * header's and the body's, channel and chainCrc 0, bodyCrc the body's CRC-32 masked to 31 bits as
 * store/dledger.py's entry_body_crc takes it), then the body; the bodyCrc is returned. One call for what
 * store/dledger_log.py's append_leader_placed did in three (the CRC, the header, the body's copy). Nothing
 * is written unless all of it fits and every field is in range (OverflowError, as pack_header raises). */
static PyObject *place_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "place_entry(buf, at, index, term, pos, body) takes 6 arguments");
        return NULL;
    }
    long long index, term, pos;
    if (!field(args[2], 64, &index) || !field(args[3], 64, &term) || !field(args[4], 64, &pos)) return NULL;
    Py_buffer body;
    if (PyObject_GetBuffer(args[5], &body, PyBUF_SIMPLE) < 0) return NULL;
    if (body.len > INT32_MAX - ENTRY_BODY_OFFSET) {
        PyErr_Format(PyExc_OverflowError, "a body of %zd bytes does not fit an entry", body.len);
        PyBuffer_Release(&body);
        return NULL;
    }
    Py_buffer view;
    Py_ssize_t at;
    if (!room(args, &view, ENTRY_BODY_OFFSET + body.len, &at)) {
        PyBuffer_Release(&body);
        return NULL;
    }
    uint32_t crc = crc32_of(0, body.buf, (size_t)body.len) & 0x7FFFFFFFu;
    unsigned char *p = (unsigned char *)view.buf + at;
    put32(p, 1); /* (MAGIC_1, the only one 0.3.x writes) */
    put32(p + 4, (int32_t)(ENTRY_BODY_OFFSET + body.len));
    put64(p + 8, index);
    put64(p + 16, term);
    put64(p + 24, pos);
    put32(p + 32, 0);
    put32(p + 36, 0);
    put32(p + 40, (int32_t)crc);
    put32(p + 44, (int32_t)body.len);
    memmove(p + ENTRY_BODY_OFFSET, body.buf, (size_t)body.len); /* (memmove: the body may be a view of buf) */
    PyBuffer_Release(&view);
    PyBuffer_Release(&body);
    return PyLong_FromUnsignedLong(crc);
}

/* pack_index(buf, at, magic, pos, size, index, term): a DLedger index record (">iqiqq"). */
static PyObject *pack_index(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    static const int layout[5] = {32, 64, 32, 64, 64};
    return packed("pack_index", args, nargs, layout, 5);
}

/* pack_unit(buf, at, commit_log_offset, size, tags_code): one ConsumeQueue unit (">qiq") at at: a queue's
 * lone unit of a dispatch (a single broker's put, a DLedger commit of a few sends over several queues),
 * without struct's slow path for big-endian 64-bit fields. */
static PyObject *pack_unit(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    static const int layout[3] = {64, 32, 64};
    return packed("pack_unit", args, nargs, layout, 3);
}

#define INDEX_ENTRY 20

/* index_entry(mm, entry_at, slot_at, key_hash, phy_offset, time_diff, n) -> prev | None
 *
 * An IndexFile entry (">iqii": keyHash, phyOffset, timeDiff, prevIndex) written at entry_at and its hash
 * slot (">i" at slot_at) pointed at it, as put_keys writes them: prevIndex is what the slot held (0 if it
 * was negative), returned. When the slot holds n or more (only after a restore: it points past the
 * checkpoint), nothing is written and None is returned: the caller walks the chain below n. */
static PyObject *index_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    static const int bits[4] = {32, 64, 32, 32};
    long long v[4];
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "index_entry takes 7 arguments");
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        if (!field(args[i + 3], bits[i], &v[i])) return NULL;
    Py_ssize_t slot_at = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if (slot_at == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    Py_ssize_t entry_at;
    if (!room(args, &view, INDEX_ENTRY, &entry_at)) return NULL;
    if (slot_at < 0 || slot_at > view.len || view.len - slot_at < 4) {
        PyErr_Format(PyExc_ValueError, "no room for a slot at %zd of a buffer of %zd", slot_at, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *b = view.buf;
    long long prev = i32(b + slot_at), n = v[3];
    if (prev >= n) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    if (prev < 0) prev = 0;
    unsigned char *p = b + entry_at;
    put32(p, (int32_t)v[0]), put64(p + 4, v[1]), put32(p + 12, (int32_t)v[2]), put32(p + 16, (int32_t)prev);
    put32(b + slot_at, (int32_t)n);
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(prev);
}

/* pack_units(buf, at, units, start, count) -> None: ConsumeQueue units units[start:start + count] (a list of
 * (commit log offset, size, tags code, queue offset) tuples, the queue offset not written) packed one after
 * another at at, each as ">qiq" (20 bytes): a run of a queue's units written straight into its mapped file,
 * no bytearray, no struct call a unit. Nothing is written unless every unit fits its fields. */
#define CQ_UNIT 20
static PyObject *pack_units(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "pack_units(buf, at, units, start, count) takes 5 arguments");
        return NULL;
    }
    if (!PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "pack_units: units must be a list");
        return NULL;
    }
    Py_ssize_t start = PyNumber_AsSsize_t(args[3], PyExc_OverflowError),
               count = PyNumber_AsSsize_t(args[4], PyExc_OverflowError);
    if ((start == -1 || count == -1) && PyErr_Occurred()) return NULL;
    PyObject *units = args[2];
    if (start < 0 || count < 0 || start > PyList_GET_SIZE(units) || PyList_GET_SIZE(units) - start < count) {
        PyErr_Format(PyExc_ValueError, "pack_units: %zd units from %zd of a list of %zd", count, start,
                     PyList_GET_SIZE(units));
        return NULL;
    }
    if (count > PY_SSIZE_T_MAX / CQ_UNIT) {
        PyErr_SetString(PyExc_OverflowError, "pack_units: too many units");
        return NULL;
    }
    Py_buffer view;
    Py_ssize_t at;
    if (!room(args, &view, count * CQ_UNIT, &at)) return NULL;
    long long (*v)[3] = count ? PyMem_Malloc((size_t)count * sizeof *v) : NULL;
    if (count && v == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    static const int bits[3] = {64, 32, 64};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *unit = PyList_GET_ITEM(units, start + i);
        if (!PyTuple_Check(unit) || PyTuple_GET_SIZE(unit) < 3) {
            PyErr_SetString(PyExc_TypeError, "pack_units: a unit is a tuple of at least 3 ints");
            goto fail;
        }
        for (int f = 0; f < 3; f++)
            if (!field(PyTuple_GET_ITEM(unit, f), bits[f], &v[i][f])) goto fail;
    }
    unsigned char *p = (unsigned char *)view.buf + at;
    for (Py_ssize_t i = 0; i < count; i++, p += CQ_UNIT)
        put64(p, v[i][0]), put32(p + 8, (int32_t)v[i][1]), put64(p + 12, v[i][2]);
    PyMem_Free(v);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    PyMem_Free(v);
    PyBuffer_Release(&view);
    return NULL;
}

/* split_numbers(buf, start, end, parts) -> tuple | None: the integers written between the byte strings of
 * `parts` (a tuple of n + 1 bytes) when buf[start:end] is exactly parts[0], an integer, parts[1], ..., an
 * integer, parts[n]; each integer as %d writes a 64-bit one ("0", or an optional "-" then 1-19 digits not
 * starting with "0", within int64), else None. What a DLedger member reads a header written from a template
 * by (the template's bytes, the numbers written in): no JSON decode, no slice, no search a number. */
static PyObject *split_numbers(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "split_numbers(buf, start, end, parts) takes 4 arguments");
        return NULL;
    }
    PyObject *parts = args[3];
    if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) < 2 || PyTuple_GET_SIZE(parts) > 17) {
        PyErr_SetString(PyExc_TypeError, "split_numbers: parts must be a tuple of 2 to 17 bytes");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(parts) - 1;
    for (Py_ssize_t i = 0; i <= n; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(parts, i))) {
            PyErr_SetString(PyExc_TypeError, "split_numbers: parts must be a tuple of 2 to 17 bytes");
            return NULL;
        }
    Py_ssize_t start = PyNumber_AsSsize_t(args[1], PyExc_OverflowError),
               end = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if ((start == -1 || end == -1) && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    long long v[16];
    int ok = 0 <= start && start <= end && end <= view.len;
    const unsigned char *b = view.buf;
    Py_ssize_t at = start;
    for (Py_ssize_t i = 0; ok && i <= n; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);
        Py_ssize_t len = PyBytes_GET_SIZE(part);
        if (end - at < len || memcmp(b + at, PyBytes_AS_STRING(part), (size_t)len) != 0) {
            ok = 0;
            break;
        }
        at += len;
        if (i == n) break;
        int negative = at < end && b[at] == '-';
        Py_ssize_t d = at + negative, digits = 0;
        unsigned long long u = 0;
        while (d + digits < end && digits < 20 && b[d + digits] >= '0' && b[d + digits] <= '9')
            u = u * 10 + (unsigned long long)(b[d + digits] - '0'), digits++;
        if (digits == 0 || digits > 19 || (b[d] == '0' && (digits > 1 || negative)) ||
            u > (negative ? 9223372036854775808ULL : 9223372036854775807ULL)) {
            ok = 0;
            break;
        }
        v[i] = negative ? (long long)(0 - u) : (long long)u;
        at = d + digits;
    }
    PyBuffer_Release(&view);
    if (!ok || at != end) Py_RETURN_NONE;
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, x);
    }
    return out;
}

/* crc32(data, value=0) -> int: zlib.crc32's result for the same arguments (any buffer), through crc32_of.
 * crc31(data) -> int: the same of value 0 masked to 31 bits: a record's BODYCRC, an entry's bodyCrc. */
static PyObject *crc_call(PyObject *const *args, Py_ssize_t nargs, int masked) {
    if (nargs < 1 || nargs > (masked ? 1 : 2)) {
        PyErr_SetString(PyExc_TypeError, masked ? "crc31 takes 1 argument" : "crc32 takes 1 or 2 arguments");
        return NULL;
    }
    uint32_t value = 0;
    if (nargs == 2) {
        unsigned long v = PyLong_AsUnsignedLongMask(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        value = (uint32_t)v;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc = crc32_of(value, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(masked ? crc & 0x7FFFFFFFu : crc);
}

static PyObject *crc32_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    return crc_call(args, nargs, 0);
}

static PyObject *crc31(PyObject *module, PyObject *const *args, Py_ssize_t nargs) { return crc_call(args, nargs, 1); }

/* crc_folds() -> bool: whether this CPU takes the folding path (else zlib's, throughout). */
static PyObject *crc_folds(PyObject *module, PyObject *unused) { return PyBool_FromLong(crc_can_fold); }

static PyMethodDef methods[] = {
    {"crc32", (PyCFunction)(void (*)(void))crc32_py, METH_FASTCALL, "zlib.crc32, folded by PCLMULQDQ."},
    {"crc31", (PyCFunction)(void (*)(void))crc31, METH_FASTCALL, "CRC-32 masked to 31 bits (BODYCRC)."},
    {"crc_folds", crc_folds, METH_NOARGS, "Whether the CRC-32 is folded by PCLMULQDQ on this CPU."},
    {"v4_info", (PyCFunction)(void (*)(void))v4_info, METH_FASTCALL,
     "What dispatch needs from an all-IPv4 record, or None."},
    {"parse_entries", (PyCFunction)(void (*)(void))parse_entries, METH_FASTCALL,
     "The records of a pushed run of entries, parsed into a dict as far as they are taken."},
    {"dispatch_entries", (PyCFunction)(void (*)(void))dispatch_entries, METH_FASTCALL,
     "A pushed run's committed records, straight to their ConsumeQueue units, as far as they are taken."},
    {"pack_header", (PyCFunction)(void (*)(void))pack_header, METH_FASTCALL, "A DLedger entry's header."},
    {"pack_index", (PyCFunction)(void (*)(void))pack_index, METH_FASTCALL, "A DLedger index record."},
    {"place_entry", (PyCFunction)(void (*)(void))place_entry, METH_FASTCALL,
     "A leader's DLedger entry, header and body, its bodyCrc returned."},
    {"index_entry", (PyCFunction)(void (*)(void))index_entry, METH_FASTCALL,
     "An IndexFile entry and its hash slot, unless the slot points at or past it."},
    {"pack_unit", (PyCFunction)(void (*)(void))pack_unit, METH_FASTCALL, "A ConsumeQueue unit."},
    {"pack_units", (PyCFunction)(void (*)(void))pack_units, METH_FASTCALL,
     "A run of ConsumeQueue units packed into a buffer."},
    {"split_numbers", (PyCFunction)(void (*)(void))split_numbers, METH_FASTCALL,
     "The integers between a template's parts, when a buffer's slice is that template with them."},
    {"scan_run", (PyCFunction)(void (*)(void))scan_run, METH_FASTCALL,
     "How far a pushed run of entries passes every check, and their index records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cparse", NULL, 0, methods};

PyMODINIT_FUNC PyInit__cparse(void) {
#ifdef CRC_FOLD
    __builtin_cpu_init();
    crc_can_fold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    return PyModule_Create(&module);
}

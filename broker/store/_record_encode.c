/* broker.store._record_encode: the put path's record encoder in C (issue 22).
 *
 * Rules:
 * - encode(msgs, max_body_size) lays the commitlog records of `msgs` (a list of MessageExt)
 *   end to end exactly as broker.store.message.encode_batch_py does (QUEUEOFFSET and
 *   PHYSICALOFFSET 0, patched later under the put lock) and returns (bytearray, starts, sizes).
 * - It answers for the everyday message: a `bytes` body no longer than max_body_size (-1: no
 *   limit), a non-empty str topic of at most 32767 UTF-8 bytes (v1 magic up to 127 bytes, v2
 *   above, as _topic_field), properties given as `bytes` (properties_bytes) or as a dict of
 *   str to str, at most 32767 bytes once joined, hosts as (str ip, int port) that inet_pton
 *   reads (IPv4, or IPv6 when the ip has a ':', brackets stripped), and numbers that fit their
 *   fields. For anything else (a None or non-str property, a lone surrogate, a body that is not
 *   bytes, a number out of range, a bad address, a too long field, not a list) it returns None
 *   and builds nothing; the caller then runs the Python encoder, which is the one definition of
 *   those answers and their errors. C never decides that a message is bad; it only declines.
 * - The body CRC is crc32(body) & 0x7FFFFFFF with broker.store.crc's function (ISA-L's or
 *   zlib's, the same values; no second CRC implementation, no link-time dependency).
 * - No state besides interned attribute names; holds the GIL throughout.
 *
 * Theory of operation: two passes. The first reads each message's attributes, checks them and
 * computes its record size (and CRC); the second allocates one bytearray for the whole batch and
 * writes every record into it. The Python encoder made a struct.pack, two small concatenations,
 * two cached host lookups and a properties string per message, then joined and copied the batch
 * twice; here the only objects made are the bytearray and the two lists.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define BORNHOST_V6_FLAG 0x10
#define STOREHOST_V6_FLAG 0x20
#define MAX_TOPIC_LENGTH_V1 127
#define MAX_SHORT 32767

static PyObject *crc32_fn;  /* broker.store.crc.crc32 */
static PyObject *s_topic, *s_body, *s_queue_id, *s_flag, *s_properties, *s_properties_bytes, *s_sys_flag,
    *s_born_timestamp, *s_born_host, *s_store_timestamp, *s_store_host, *s_reconsume_times,
    *s_prepared_transaction_offset;

typedef struct {
    PyObject *body;        /* new reference */
    PyObject *props;       /* new reference: bytes, or the dict */
    int props_is_bytes;
    Py_ssize_t props_len;
    const char *topic;     /* UTF-8 owned by the topic str, kept alive by `topic_obj` */
    PyObject *topic_obj;   /* new reference */
    Py_ssize_t topic_len;
    int32_t queue_id, flag, sys_flag, reconsume, crc;
    int64_t born_ts, store_ts, prepared;
    unsigned char born[20], store[20];
    int born_len, store_len;
    Py_ssize_t size;
} Rec;

static inline void put32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24); p[1] = (unsigned char)(u >> 16); p[2] = (unsigned char)(u >> 8); p[3] = (unsigned char)u;
}

static inline void put64(unsigned char *p, int64_t v) {
    put32(p, (int32_t)((uint64_t)v >> 32));
    put32(p + 4, (int32_t)(uint64_t)v);
}

/* An exact int in [lo, hi] into *out; 0 (no exception set) otherwise. */
static int get_i64(PyObject *o, int64_t lo, int64_t hi, int64_t *out) {
    if (o == NULL || !PyLong_Check(o)) {
        return 0;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < lo || v > hi) {
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

static int attr_i32(PyObject *m, PyObject *name, int32_t *out) {
    PyObject *o = PyObject_GetAttr(m, name);
    int64_t v = 0;
    int ok = o != NULL && get_i64(o, INT32_MIN, INT32_MAX, &v);
    Py_XDECREF(o);
    if (o == NULL) {
        PyErr_Clear();
    }
    *out = (int32_t)v;
    return ok;
}

static int attr_i64(PyObject *m, PyObject *name, int64_t *out) {
    PyObject *o = PyObject_GetAttr(m, name);
    int ok = o != NULL && get_i64(o, INT64_MIN, INT64_MAX, out);
    Py_XDECREF(o);
    if (o == NULL) {
        PyErr_Clear();
    }
    return ok;
}

/* The last hosts read, by identity: a connection's born host and the broker's store host are the
   same tuple object for every message they make. A tuple of a str and an int never changes, and
   the cache holds a reference, so an address cannot be reused by another object meanwhile. */
#define HOST_CACHE 4
static PyObject *cached_host[HOST_CACHE];
static unsigned char cached_bytes[HOST_CACHE][20];
static int cached_len[HOST_CACHE];
static int cache_next;

static void remember_host(PyObject *host, const unsigned char *bytes, int len) {
    int k = cache_next;
    cache_next = (cache_next + 1) % HOST_CACHE;
    Py_XDECREF(cached_host[k]);
    Py_INCREF(host);
    cached_host[k] = host;
    memcpy(cached_bytes[k], bytes, (size_t)len);
    cached_len[k] = len;
}

/* host_to_bytes: (ip, port) -> address bytes + 4-byte port; 0 to decline. */
static int host_bytes(PyObject *m, PyObject *name, unsigned char *out, int *len) {
    PyObject *host = PyObject_GetAttr(m, name);
    int ok = 0;
    if (host == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (int k = 0; k < HOST_CACHE; k++) {
        if (cached_host[k] == host) {
            memcpy(out, cached_bytes[k], (size_t)cached_len[k]);
            *len = cached_len[k];
            Py_DECREF(host);
            return 1;
        }
    }
    if (PyTuple_CheckExact(host) && PyTuple_GET_SIZE(host) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(host, 0))) {
        Py_ssize_t n = 0;
        const char *ip = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(host, 0), &n);
        int64_t port = 0;
        char text[64];
        if (ip == NULL) {
            PyErr_Clear();
        } else if (get_i64(PyTuple_GET_ITEM(host, 1), INT32_MIN, INT32_MAX, &port) && n > 0 && n < 62
                   && (Py_ssize_t)strlen(ip) == n) {
            if (n >= 2 && ip[0] == '[' && ip[n - 1] == ']') {
                memcpy(text, ip + 1, (size_t)(n - 2));
                text[n - 2] = 0;
            } else {
                memcpy(text, ip, (size_t)n);
                text[n] = 0;
            }
            if (strchr(text, ':') != NULL) {
                if (inet_pton(AF_INET6, text, out) == 1) {
                    put32(out + 16, (int32_t)port);
                    *len = 20;
                    ok = 1;
                }
            } else if (inet_pton(AF_INET, text, out) == 1) {
                put32(out + 4, (int32_t)port);
                *len = 8;
                ok = 1;
            }
        }
    }
    if (ok && PyTuple_CheckExact(host) && PyUnicode_CheckExact(PyTuple_GET_ITEM(host, 0))
        && PyLong_CheckExact(PyTuple_GET_ITEM(host, 1))) {
        remember_host(host, out, *len);
    }
    Py_DECREF(host);
    return ok;
}

/* Joined length of a dict of str -> str (k \x01 v, pairs split by \x02); -1 to decline. */
static Py_ssize_t dict_props_len(PyObject *d) {
    Py_ssize_t pos = 0, total = 0, pairs = 0, n = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_Check(k) || !PyUnicode_Check(v)) {
            return -1;
        }
        if (PyUnicode_AsUTF8AndSize(k, &n) == NULL) {
            PyErr_Clear();
            return -1;
        }
        total += n + 1;
        if (PyUnicode_AsUTF8AndSize(v, &n) == NULL) {
            PyErr_Clear();
            return -1;
        }
        total += n;
        pairs++;
        if (total > MAX_SHORT + 2) {
            return -1;
        }
    }
    return pairs ? total + pairs - 1 : 0;
}

static Py_ssize_t write_dict_props(PyObject *d, unsigned char *p, Py_ssize_t room) {
    Py_ssize_t pos = 0, at = 0, n = 0;
    PyObject *k, *v;
    int first = 1;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *ks, *vs;
        Py_ssize_t kn, vn;
        if (!PyUnicode_Check(k) || !PyUnicode_Check(v)) {
            return -1;
        }
        ks = PyUnicode_AsUTF8AndSize(k, &n);
        kn = n;
        vs = PyUnicode_AsUTF8AndSize(v, &n);
        vn = n;
        if (ks == NULL || vs == NULL) {
            PyErr_Clear();
            return -1;
        }
        if (at + (first ? 0 : 1) + kn + 1 + vn > room) {
            return -1;
        }
        if (!first) {
            p[at++] = 2;
        }
        first = 0;
        memcpy(p + at, ks, (size_t)kn);
        at += kn;
        p[at++] = 1;
        memcpy(p + at, vs, (size_t)vn);
        at += vn;
    }
    return at;
}

static void release(Rec *recs, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(recs[i].body);
        Py_XDECREF(recs[i].props);
        Py_XDECREF(recs[i].topic_obj);
    }
    PyMem_Free(recs);
}

/* Pass 1 for one message: 1 when it is the everyday case (fields read into r), else 0. */
static int read_message(PyObject *m, Py_ssize_t max_body, Rec *r) {
    PyObject *pb;
    PyObject *crc;
    int64_t c = 0;
    Py_ssize_t lp, n;

    r->topic_obj = PyObject_GetAttr(m, s_topic);
    if (r->topic_obj == NULL || !PyUnicode_Check(r->topic_obj)) {
        PyErr_Clear();
        return 0;
    }
    r->topic = PyUnicode_AsUTF8AndSize(r->topic_obj, &r->topic_len);
    if (r->topic == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (r->topic_len == 0 || r->topic_len > MAX_SHORT) {
        return 0;
    }
    r->body = PyObject_GetAttr(m, s_body);
    if (r->body == NULL || !PyBytes_CheckExact(r->body)) {
        PyErr_Clear();
        return 0;
    }
    n = PyBytes_GET_SIZE(r->body);
    if (max_body >= 0 && n > max_body) {
        return 0;
    }
    pb = PyObject_GetAttr(m, s_properties_bytes);
    if (pb == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (pb != Py_None) {
        if (!PyBytes_CheckExact(pb)) {
            Py_DECREF(pb);
            return 0;
        }
        r->props = pb;
        r->props_is_bytes = 1;
        lp = PyBytes_GET_SIZE(pb);
    } else {
        Py_DECREF(pb);
        r->props = PyObject_GetAttr(m, s_properties);
        if (r->props == NULL || !PyDict_CheckExact(r->props)) {
            PyErr_Clear();
            return 0;
        }
        r->props_is_bytes = 0;
        lp = dict_props_len(r->props);
        if (lp < 0) {
            return 0;
        }
    }
    if (lp > MAX_SHORT) {
        return 0;
    }
    r->props_len = lp;
    if (!attr_i32(m, s_queue_id, &r->queue_id) || !attr_i32(m, s_flag, &r->flag)
        || !attr_i32(m, s_sys_flag, &r->sys_flag) || !attr_i32(m, s_reconsume_times, &r->reconsume)
        || !attr_i64(m, s_born_timestamp, &r->born_ts) || !attr_i64(m, s_store_timestamp, &r->store_ts)
        || !attr_i64(m, s_prepared_transaction_offset, &r->prepared)) {
        return 0;
    }
    if (!host_bytes(m, s_born_host, r->born, &r->born_len) || !host_bytes(m, s_store_host, r->store, &r->store_len)) {
        return 0;
    }
    r->sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG);
    if (r->born_len == 20) {
        r->sys_flag |= BORNHOST_V6_FLAG;
    }
    if (r->store_len == 20) {
        r->sys_flag |= STOREHOST_V6_FLAG;
    }
    crc = PyObject_CallOneArg(crc32_fn, r->body);
    if (crc == NULL || !get_i64(crc, 0, UINT32_MAX, &c)) {
        Py_XDECREF(crc);
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(crc);
    r->crc = (int32_t)(c & 0x7FFFFFFF);
    r->size = 72 + r->born_len + r->store_len + n + (r->topic_len > MAX_TOPIC_LENGTH_V1 ? 2 : 1) + r->topic_len
              + 2 + lp;
    return r->size <= INT32_MAX;
}

/* Pass 2 for one record at p (r->size bytes); 0 if the properties changed size meanwhile. */
static int write_record(const Rec *r, unsigned char *p) {
    Py_ssize_t n = PyBytes_GET_SIZE(r->body);
    int v2 = r->topic_len > MAX_TOPIC_LENGTH_V1;
    unsigned char *q = p;
    put32(q, (int32_t)r->size); q += 4;
    put32(q, v2 ? MAGIC_V2 : MAGIC_V1); q += 4;
    put32(q, r->crc); q += 4;
    put32(q, r->queue_id); q += 4;
    put32(q, r->flag); q += 4;
    put64(q, 0); q += 8;  /* QUEUEOFFSET */
    put64(q, 0); q += 8;  /* PHYSICALOFFSET */
    put32(q, r->sys_flag); q += 4;
    put64(q, r->born_ts); q += 8;
    memcpy(q, r->born, (size_t)r->born_len); q += r->born_len;
    put64(q, r->store_ts); q += 8;
    memcpy(q, r->store, (size_t)r->store_len); q += r->store_len;
    put32(q, r->reconsume); q += 4;
    put64(q, r->prepared); q += 8;
    put32(q, (int32_t)n); q += 4;
    memcpy(q, PyBytes_AS_STRING(r->body), (size_t)n); q += n;
    if (v2) {
        *q++ = (unsigned char)(r->topic_len >> 8);
    }
    *q++ = (unsigned char)r->topic_len;
    memcpy(q, r->topic, (size_t)r->topic_len); q += r->topic_len;
    *q++ = (unsigned char)(r->props_len >> 8);
    *q++ = (unsigned char)r->props_len;
    if (r->props_is_bytes) {
        memcpy(q, PyBytes_AS_STRING(r->props), (size_t)r->props_len);
    } else if (write_dict_props(r->props, q, r->props_len) != r->props_len) {
        return 0;
    }
    q += r->props_len;
    return q - p == r->size;
}

static PyObject *encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *msgs, *data = NULL, *starts = NULL, *sizes = NULL, *out = NULL;
    Py_ssize_t max_body, n, total = 0, i, done = 0;
    Rec *recs;
    unsigned char *p;

    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyLong_Check(args[1])) {
        Py_RETURN_NONE;
    }
    msgs = args[0];
    max_body = PyLong_AsSsize_t(args[1]);
    if (max_body == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    n = PyList_GET_SIZE(msgs);
    if (n == 0) {
        Py_RETURN_NONE;
    }
    /* our own list of the messages: an attribute read of an object that is not a compiled
       MessageExt may run Python code, which could change the caller's list meanwhile */
    msgs = PyList_GetSlice(msgs, 0, n);
    if (msgs == NULL) {
        return NULL;
    }
    recs = PyMem_Calloc((size_t)n, sizeof(Rec));
    if (recs == NULL) {
        Py_DECREF(msgs);
        return PyErr_NoMemory();
    }
    for (i = 0; i < n; i++) {
        done = i + 1;
        if (!read_message(PyList_GET_ITEM(msgs, i), max_body, &recs[i]) || total > PY_SSIZE_T_MAX - recs[i].size) {
            release(recs, done);
            Py_DECREF(msgs);
            Py_RETURN_NONE;
        }
        total += recs[i].size;
    }
    Py_DECREF(msgs);  /* the records hold what they read */
    data = PyByteArray_FromStringAndSize(NULL, total);
    starts = PyList_New(n);
    sizes = PyList_New(n);
    if (data == NULL || starts == NULL || sizes == NULL) {
        goto fail;
    }
    p = (unsigned char *)PyByteArray_AS_STRING(data);
    total = 0;
    for (i = 0; i < n; i++) {
        PyObject *s, *z;
        if (!write_record(&recs[i], p + total)) {
            release(recs, done);
            Py_DECREF(data); Py_DECREF(starts); Py_DECREF(sizes);
            Py_RETURN_NONE;
        }
        s = PyLong_FromSsize_t(total);
        z = PyLong_FromSsize_t(recs[i].size);
        if (s == NULL || z == NULL) {
            Py_XDECREF(s); Py_XDECREF(z);
            goto fail;
        }
        PyList_SET_ITEM(starts, i, s);
        PyList_SET_ITEM(sizes, i, z);
        total += recs[i].size;
    }
    release(recs, done);
    out = PyTuple_Pack(3, data, starts, sizes);
    Py_DECREF(data); Py_DECREF(starts); Py_DECREF(sizes);
    return out;
fail:
    release(recs, done);
    Py_XDECREF(data); Py_XDECREF(starts); Py_XDECREF(sizes);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(msgs, max_body_size) -> (bytearray, starts, sizes), or None to leave it to Python"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_encode(void) {
    PyObject *crc = PyImport_ImportModule("broker.store.crc");
    if (crc == NULL) {
        return NULL;
    }
    crc32_fn = PyObject_GetAttrString(crc, "crc32");
    Py_DECREF(crc);
    if (crc32_fn == NULL) {
        return NULL;
    }
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_topic, "topic");
    INTERN(s_body, "body");
    INTERN(s_queue_id, "queue_id");
    INTERN(s_flag, "flag");
    INTERN(s_properties, "properties");
    INTERN(s_properties_bytes, "properties_bytes");
    INTERN(s_sys_flag, "sys_flag");
    INTERN(s_born_timestamp, "born_timestamp");
    INTERN(s_born_host, "born_host");
    INTERN(s_store_timestamp, "store_timestamp");
    INTERN(s_store_host, "store_host");
    INTERN(s_reconsume_times, "reconsume_times");
    INTERN(s_prepared_transaction_offset, "prepared_transaction_offset");
#undef INTERN
    return PyModule_Create(&module);
}

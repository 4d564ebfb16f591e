/* broker.store._index_write: one record's IndexFile entries in C (issue 22).
 *
 * Rules:
 * - put_keys(view, topic, uniq_key, keys, phy_offset, store_timestamp, index_count, index_num,
 *   hash_slot_num, hash_slot_count, begin_timestamp, begin_phy_offset, ready_end) does for one
 *   record what broker.store.index_file's IndexService.dispatch does with its keys when all of
 *   them fit in the file: for `topic#uniq_key` (when uniq_key is not empty) and then for
 *   `topic#<token>` of each non-empty token of `keys` split on single spaces, exactly
 *   IndexFile.put_key, in order: the key hash (java_hash.index_key_hash: abs of Java's
 *   String.hashCode, Integer.MIN_VALUE -> 0), the slot read (a value <= 0 or above the entry
 *   count is 0), the entry `>iqii` (hash, phyOffset, timeDiff, previous slot value), the slot
 *   write; the first entry of a file sets beginTimestamp/beginPhyOffset (so a later key of the
 *   same record has timeDiff 0). Then the header `>qqqqii` once, with the record's final values
 *   (put_key writes it after every key; nothing reads the mapped header in between, and the
 *   bytes after the record are the same). It returns (index_count, hash_slot_count) after the
 *   record; the caller sets the IndexFile's attributes from them.
 * - It declines (returns None, writes nothing) for everything else, and the Python loop, which
 *   is the one definition, answers: a key that is not ASCII (Java hashes UTF-16; one byte is
 *   one code unit only for ASCII) or an argument that is not a str; a number outside its
 *   field's range (int64, or int32 for the header's counts); a geometry that does not fit the
 *   buffer; a record whose keys would fill the file before its last key (the caller rolls to a
 *   new file mid-record); entries reaching past `ready_end`, the byte up to which the caller
 *   knows the file has blocks (IndexFile.reserve_keys: a store into an unbacked hole of a full
 *   tmpfs is SIGBUS, so blocks and DiskFullError stay Python's); a buffer that is not writable.
 *   C never decides that input is bad; it only declines.
 * - Every read and write is inside the buffer (bounds checked in 64-bit arithmetic that cannot
 *   overflow); the slot table and header must be reserved by the caller (they are once
 *   reserve_keys has run for the file, which `ready_end > 0` says).
 * - No state; it holds the GIL throughout (a record is well under a microsecond).
 *
 * Theory of operation: the compiled Python path builds a `topic#key` string per key, encodes it
 * to hash it, and makes four struct calls per key (slot read, entry, slot, header); with the
 * block reservation calls that was ~4% of the classic master's CPU under Apache's benchmark
 * producer. Here one pass counts the keys (to check that they fit, before any write) and a
 * second hashes each straight from the strings' ASCII bytes (topic and '#' hashed once) and
 * writes its entry and slot with byte stores.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 40
#define SLOT_SIZE 4
#define ENTRY_SIZE 20
#define INT32_MAX_ 0x7FFFFFFFLL

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* The ASCII bytes of a str (NULL when it is not a str or not ASCII: decline). */
static const unsigned char *ascii_data(PyObject *s, Py_ssize_t *n) {
    if (!PyUnicode_Check(s)) {
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        return NULL;
    }
#endif
    if (!PyUnicode_IS_ASCII(s)) {
        return NULL;
    }
    *n = PyUnicode_GET_LENGTH(s);
    return (const unsigned char *)PyUnicode_DATA(s);
}

/* An int64 argument (0 with *ok cleared when it is not an int or out of range: decline). */
static int64_t arg64(PyObject *o, int *ok) {
    if (!PyLong_Check(o)) {
        *ok = 0;
        return 0;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    return (int64_t)v;
}

/* IndexFile.indexKeyHashMethod of a hash state after the key's last code unit. */
static inline uint32_t key_hash(uint32_t h) {
    int32_t s = (int32_t)h;
    if (s == INT32_MIN) {
        return 0;
    }
    return (uint32_t)(s < 0 ? -s : s);
}

typedef struct {
    unsigned char *base;
    int64_t entries_base, slots, count, begin_ts, begin_phy, phy, ts, new_slots;
} file_t;

/* IndexFile.put_key for one key whose hash is known (fits and blocks checked by the caller). */
static void put_one(file_t *f, uint32_t hash) {
    unsigned char *slot = f->base + HEADER_SIZE + (int64_t)(hash % (uint64_t)f->slots) * SLOT_SIZE;
    int64_t prev = be32(slot);
    if (prev <= 0 || prev > f->count) {
        prev = 0;
        f->new_slots++;
    }
    int64_t time_diff = 0;
    if (f->begin_ts > 0 && f->ts > f->begin_ts) {
        uint64_t delta = (uint64_t)f->ts - (uint64_t)f->begin_ts; /* < 2**63: both are int64, begin > 0 */
        uint64_t secs = delta / 1000;
        time_diff = secs > (uint64_t)INT32_MAX_ ? INT32_MAX_ : (int64_t)secs;
    }
    unsigned char *e = f->base + f->entries_base + f->count * ENTRY_SIZE;
    put32(e, hash);
    put64(e + 4, (uint64_t)f->phy);
    put32(e + 12, (uint32_t)time_diff);
    put32(e + 16, (uint32_t)prev);
    put32(slot, (uint32_t)f->count);
    if (f->count <= 1) {
        f->begin_phy = f->phy;
        f->begin_ts = f->ts;
    }
    f->count++;
}

static PyObject *decline(Py_buffer *view) {
    PyBuffer_Release(view);
    Py_RETURN_NONE;
}

static PyObject *put_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError,
                        "put_keys(view, topic, uniq_key, keys, phy_offset, store_timestamp, index_count, index_num, "
                        "hash_slot_num, hash_slot_count, begin_timestamp, begin_phy_offset, ready_end) takes 13 "
                        "arguments");
        return NULL;
    }
    Py_ssize_t topic_n = 0, uniq_n = 0, keys_n = 0;
    const unsigned char *topic = ascii_data(args[1], &topic_n);
    const unsigned char *uniq = ascii_data(args[2], &uniq_n);
    const unsigned char *keys = ascii_data(args[3], &keys_n);
    if (topic == NULL || uniq == NULL || keys == NULL) {
        Py_RETURN_NONE;
    }
    int ok = 1;
    file_t f;
    f.phy = arg64(args[4], &ok);
    f.ts = arg64(args[5], &ok);
    f.count = arg64(args[6], &ok);
    int64_t index_num = arg64(args[7], &ok);
    f.slots = arg64(args[8], &ok);
    int64_t slot_count = arg64(args[9], &ok);
    f.begin_ts = arg64(args[10], &ok);
    f.begin_phy = arg64(args[11], &ok);
    int64_t ready_end = arg64(args[12], &ok);
    f.new_slots = 0;
    if (!ok) {
        Py_RETURN_NONE;
    }
    /* how many keys: a check that they all fit comes before any write */
    int64_t n = uniq_n > 0 ? 1 : 0;
    for (Py_ssize_t i = 0; i < keys_n; i++) {
        if (keys[i] != ' ' && (i == 0 || keys[i - 1] == ' ')) {
            n++;
        }
    }
    if (n == 0) {
        return Py_BuildValue("(LL)", (long long)f.count, (long long)slot_count);
    }
    if (f.count < 1 || index_num < 1 || f.count > index_num || n > index_num - f.count || f.slots < 1
        || slot_count < 0 || slot_count > INT32_MAX_ - n || index_num > INT32_MAX_) {
        Py_RETURN_NONE; /* the roll mid-record, and anything unusual: Python's */
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int64_t len = (int64_t)view.len;
    if (len < HEADER_SIZE || f.slots > (len - HEADER_SIZE) / SLOT_SIZE) {
        return decline(&view);
    }
    f.entries_base = HEADER_SIZE + f.slots * SLOT_SIZE;
    int64_t last = f.count + n; /* the entry count after the record; <= index_num <= INT32_MAX */
    if (last > (len - f.entries_base) / ENTRY_SIZE || f.entries_base + last * ENTRY_SIZE > ready_end) {
        return decline(&view);
    }
    f.base = (unsigned char *)view.buf;

    uint32_t prefix = 0;
    for (Py_ssize_t i = 0; i < topic_n; i++) {
        prefix = 31u * prefix + topic[i];
    }
    prefix = 31u * prefix + '#';
    if (uniq_n > 0) {
        uint32_t h = prefix;
        for (Py_ssize_t i = 0; i < uniq_n; i++) {
            h = 31u * h + uniq[i];
        }
        put_one(&f, key_hash(h));
    }
    Py_ssize_t i = 0;
    while (i < keys_n) {
        if (keys[i] == ' ') {
            i++;
            continue;
        }
        uint32_t h = prefix;
        while (i < keys_n && keys[i] != ' ') {
            h = 31u * h + keys[i];
            i++;
        }
        put_one(&f, key_hash(h));
    }
    slot_count += f.new_slots;
    unsigned char *hd = f.base;
    put64(hd, (uint64_t)f.begin_ts);
    put64(hd + 8, (uint64_t)f.ts);
    put64(hd + 16, (uint64_t)f.begin_phy);
    put64(hd + 24, (uint64_t)f.phy);
    put32(hd + 32, (uint32_t)slot_count);
    put32(hd + 36, (uint32_t)f.count);
    PyBuffer_Release(&view);
    return Py_BuildValue("(LL)", (long long)f.count, (long long)slot_count);
}

static PyMethodDef methods[] = {
    {"put_keys", (PyCFunction)(void (*)(void))put_keys, METH_FASTCALL,
     "put_keys(view, topic, uniq_key, keys, phy_offset, store_timestamp, index_count, index_num, hash_slot_num, "
     "hash_slot_count, begin_timestamp, begin_phy_offset, ready_end) -> (index_count, hash_slot_count) after the "
     "record, or None (let the Python loop decide)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_index_write",
    "One record's IndexFile entries in C; see broker/store/index_file.py.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__index_write(void) {
    return PyModule_Create(&module);
}

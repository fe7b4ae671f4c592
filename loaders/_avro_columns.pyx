# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Avro binary bodies of one writer schema -> column buffers, a column at a time (built by scripts/setup.sh).

Why: decoding one record at a time into dicts (fastavro) and rebuilding columns from lists costs several
microseconds a record; here the schema is compiled once into a small tree of nodes (ferry.loaders.
avro_program) and every body is walked with it, appending each field to its node's growable C buffer in
Arrow's layout (fixed-width values, int32 offsets + data, one validity byte per slot). Python then wraps
the buffers as Arrow arrays without copying them again.

A body that does not decode (truncated, bad union or enum index, bytes left over, a non-canonical uuid, a
duplicate map key, an int out of range, a boolean byte other than 0/1) is rolled back from every buffer
and reported with its reason; the caller then decodes that group the careful way (fastavro, record by
record), so what counts as undecodable stays exactly what it always was.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

from cpython.bytes cimport PyBytes_FromStringAndSize

# node kinds (ferry.loaders.avro_program uses the same numbers)
cdef enum:
    K_BOOL = 1
    K_INT = 2
    K_LONG = 3
    K_FLOAT = 4
    K_DOUBLE = 5
    K_STRING = 6
    K_BYTES = 7
    K_FIXED = 8
    K_ENUM = 9
    K_RECORD = 10
    K_ARRAY = 11
    K_MAP = 12
    K_NULLABLE = 13
    K_UUID = 14

KINDS = {"boolean": K_BOOL, "int": K_INT, "long": K_LONG, "float": K_FLOAT, "double": K_DOUBLE,
         "string": K_STRING, "bytes": K_BYTES, "fixed": K_FIXED, "enum": K_ENUM, "record": K_RECORD,
         "array": K_ARRAY, "map": K_MAP, "nullable": K_NULLABLE, "uuid": K_UUID}


class AvroDecodeError(ValueError):
    pass


# why a body failed (the walk records a code and a number; the message is made only for failures)
cdef enum:
    E_TRUNCATED = 1
    E_VARINT
    E_LENGTH
    E_INT_RANGE
    E_UNION
    E_UUID
    E_BOOL
    E_ENUM
    E_BLOCK
    E_MAP_SIZE
    E_DUP_KEY
    E_TOO_BIG
    E_NO_MEMORY

_REASONS = {E_TRUNCATED: "truncated", E_VARINT: "a number longer than 10 bytes", E_LENGTH: "length out of bounds",
            E_INT_RANGE: "int out of range", E_UNION: "union branch that does not exist",
            E_UUID: "uuid not in canonical form", E_BOOL: "boolean byte other than 0 or 1",
            E_ENUM: "enum index out of range", E_BLOCK: "block of items larger than the bytes left",
            E_MAP_SIZE: "map with more than 64 keys (checked the careful way)", E_DUP_KEY: "duplicate map key",
            E_TOO_BIG: "more than 2 GiB of bytes in one column batch"}


include "_avro_buffers.pxi"


@cython.final
cdef class AvroColumns:
    """Decoder of one compiled writer schema; node 0 is the top-level record."""

    cdef Node* nodes
    cdef int nnodes
    cdef int* kids
    cdef Py_ssize_t* saved

    def __cinit__(self, list kinds, list args, list children):
        cdef int i, j, k = 0
        self.nnodes = len(kinds)
        self.nodes = <Node*>malloc(self.nnodes * sizeof(Node))
        self.kids = <int*>malloc((sum(len(c) for c in children) + 1) * sizeof(int))
        self.saved = <Py_ssize_t*>malloc(self.nnodes * 4 * sizeof(Py_ssize_t))
        if self.nodes == NULL or self.kids == NULL or self.saved == NULL:
            raise MemoryError()
        memset(self.nodes, 0, self.nnodes * sizeof(Node))
        for i in range(self.nnodes):
            self.nodes[i].kind = kinds[i]
            self.nodes[i].arg = args[i]
            self.nodes[i].first = k
            self.nodes[i].nkids = len(children[i])
            for j in children[i]:
                self.kids[k] = j
                k += 1
        self._reset()

    def __dealloc__(self):
        cdef int i
        if self.nodes != NULL:
            for i in range(self.nnodes):
                free(self.nodes[i].vals.p)
                free(self.nodes[i].data.p)
                free(self.nodes[i].valid.p)
        free(self.nodes)
        free(self.kids)
        free(self.saved)

    cdef int _reset(self) except -1:
        cdef int i
        cdef Node* nd
        cdef Walk w
        w.err = 0
        for i in range(self.nnodes):
            nd = &self.nodes[i]
            nd.n = nd.vals.n = nd.data.n = nd.valid.n = 0
            if nd.kind in (K_STRING, K_BYTES, K_UUID, K_ARRAY, K_MAP):
                if put_i32(&w, &nd.vals, 0) < 0:
                    raise MemoryError()
        return 0

    cdef inline void _save(self) noexcept:
        cdef int i
        cdef Py_ssize_t* s = self.saved
        cdef Node* nd
        for i in range(self.nnodes):
            nd = &self.nodes[i]
            s[0] = nd.n
            s[1] = nd.vals.n
            s[2] = nd.data.n
            s[3] = nd.valid.n
            s += 4

    cdef void _restore(self) noexcept:
        cdef int i
        cdef Py_ssize_t* s = self.saved
        cdef Node* nd
        for i in range(self.nnodes):
            nd = &self.nodes[i]
            nd.n = s[0]
            nd.vals.n = s[1]
            nd.data.n = s[2]
            nd.valid.n = s[3]
            s += 4

    cdef int _fill(self, Walk* w, int i) noexcept:
        """A placeholder slot (under a null union branch)."""
        cdef Node* nd = &self.nodes[i]
        cdef int k = nd.kind
        cdef int c
        cdef int r = 0
        if k == K_BOOL:
            r = put_u8(w, &nd.vals, 0)
        elif k == K_INT or k == K_ENUM:
            r = put_i32(w, &nd.vals, 0)
        elif k == K_LONG:
            r = put_i64(w, &nd.vals, 0)
        elif k == K_FLOAT:
            r = zeros(w, &nd.vals, 4)
        elif k == K_DOUBLE:
            r = zeros(w, &nd.vals, 8)
        elif k == K_STRING or k == K_BYTES or k == K_UUID:
            r = put_i32(w, &nd.vals, <int32_t>nd.data.n)
        elif k == K_FIXED:
            r = zeros(w, &nd.data, nd.arg)
        elif k == K_ARRAY or k == K_MAP:
            r = put_i32(w, &nd.vals, <int32_t>self.nodes[self.kids[nd.first]].n)
        elif k == K_RECORD:
            for c in range(nd.nkids):
                if self._fill(w, self.kids[nd.first + c]) < 0:
                    return -1
        elif k == K_NULLABLE:
            if put_u8(w, &nd.valid, 0) < 0:
                return -1
            r = self._fill(w, self.kids[nd.first])
        if r < 0:
            return -1
        nd.n += 1
        return 0

    cdef int _dec(self, Walk* w, int i) noexcept:
        cdef Node* nd = &self.nodes[i]
        cdef int k = nd.kind
        cdef int c
        cdef int64_t v, count, j
        cdef Py_ssize_t size, at
        cdef uint8_t b
        if k == K_LONG:
            if read_long(w, &v) < 0 or put_i64(w, &nd.vals, v) < 0:
                return -1
        elif k == K_STRING or k == K_BYTES:
            if read_size(w, &size) < 0 or put(w, &nd.data, w.p + w.pos, size) < 0:
                return -1
            w.pos += size
            if nd.data.n > 0x7FFFFFFF:
                w.err = E_TOO_BIG
                return -1
            if put_i32(w, &nd.vals, <int32_t>nd.data.n) < 0:
                return -1
        elif k == K_INT:
            if read_long(w, &v) < 0:
                return -1
            if v < -2147483648 or v > 2147483647:
                w.err, w.detail = E_INT_RANGE, v
                return -1
            if put_i32(w, &nd.vals, <int32_t>v) < 0:
                return -1
        elif k == K_NULLABLE:
            if read_long(w, &v) < 0:
                return -1
            if v == nd.arg:
                if put_u8(w, &nd.valid, 0) < 0 or self._fill(w, self.kids[nd.first]) < 0:
                    return -1
            elif v == 1 - nd.arg:
                if put_u8(w, &nd.valid, 1) < 0 or self._dec(w, self.kids[nd.first]) < 0:
                    return -1
            else:
                w.err, w.detail = E_UNION, v
                return -1
        elif k == K_RECORD:
            for c in range(nd.nkids):
                if self._dec(w, self.kids[nd.first + c]) < 0:
                    return -1
        elif k == K_UUID:
            if read_size(w, &size) < 0:
                return -1
            if size != 36:
                w.err = E_UUID
                return -1
            for at in range(36):
                b = w.p[w.pos + at]
                if at == 8 or at == 13 or at == 18 or at == 23:
                    if b != 45:
                        w.err = E_UUID
                        return -1
                elif not hexdigit(b):
                    w.err = E_UUID
                    return -1
            if put(w, &nd.data, w.p + w.pos, 36) < 0 or put_i32(w, &nd.vals, <int32_t>(nd.data.n + 0)) < 0:
                return -1
            w.pos += 36
        elif k == K_DOUBLE or k == K_FLOAT:
            size = 8 if k == K_DOUBLE else 4
            if w.end - w.pos < size:
                w.err = E_TRUNCATED
                return -1
            if put(w, &nd.vals, w.p + w.pos, size) < 0:
                return -1
            w.pos += size
        elif k == K_BOOL:
            if w.pos >= w.end:
                w.err = E_TRUNCATED
                return -1
            b = w.p[w.pos]
            if b > 1:
                w.err, w.detail = E_BOOL, b
                return -1
            if put_u8(w, &nd.vals, b) < 0:
                return -1
            w.pos += 1
        elif k == K_ENUM:
            if read_long(w, &v) < 0:
                return -1
            if v < 0 or v >= nd.arg:
                w.err, w.detail = E_ENUM, v
                return -1
            if put_i32(w, &nd.vals, <int32_t>v) < 0:
                return -1
        elif k == K_FIXED:
            if w.end - w.pos < nd.arg:
                w.err = E_TRUNCATED
                return -1
            if put(w, &nd.data, w.p + w.pos, nd.arg) < 0:
                return -1
            w.pos += nd.arg
        elif k == K_ARRAY or k == K_MAP:
            while True:
                if read_long(w, &count) < 0:
                    return -1
                if count == 0:
                    break
                if count < 0:
                    count = -count
                    if read_long(w, &v) < 0:  # the block's size in bytes
                        return -1
                if count > w.end - w.pos:
                    w.err, w.detail = E_BLOCK, count
                    return -1
                for j in range(count):
                    if self._dec(w, self.kids[nd.first]) < 0:
                        return -1
                    if k == K_MAP and self._dec(w, self.kids[nd.first + 1]) < 0:
                        return -1
            if k == K_MAP and self._check_keys(w, self.kids[nd.first], nd) < 0:
                return -1
            if put_i32(w, &nd.vals, <int32_t>self.nodes[self.kids[nd.first]].n) < 0:
                return -1
        nd.n += 1
        return 0

    cdef int _check_keys(self, Walk* w, int key_node, Node* nd) noexcept:
        """A duplicate key would be kept twice here; fastavro keeps the last: let it decide."""
        cdef Node* kn = &self.nodes[key_node]
        cdef int32_t first = (<int32_t*>nd.vals.p)[nd.n]  # this map's first entry
        cdef int32_t last = <int32_t>kn.n
        cdef int32_t* off = <int32_t*>kn.vals.p
        cdef int32_t a, b
        if last - first > 64:
            w.err = E_MAP_SIZE
            return -1
        for a in range(first, last):
            for b in range(a + 1, last):
                if off[a + 1] - off[a] == off[b + 1] - off[b] and memcmp(
                        kn.data.p + off[a], kn.data.p + off[b], off[a + 1] - off[a]) == 0:
                    w.err = E_DUP_KEY
                    return -1
        return 0

    def decode(self, const uint8_t[::1] data, const int32_t[::1] offsets, const int64_t[::1] rows, int skip):
        """Decode ``data[offsets[r] + skip : offsets[r + 1]]`` for every r in ``rows``; returns
        ``[(index into rows, reason)]`` of the bodies that failed (rolled back: they have no slot)."""
        cdef Py_ssize_t j, r
        cdef Walk w
        w.p = &data[0] if data.shape[0] else NULL
        failures = []
        for j in range(rows.shape[0]):
            r = rows[j]
            w.pos = offsets[r] + skip
            w.end = offsets[r + 1]
            w.err = 0
            self._save()
            if self._dec(&w, 0) == 0 and w.pos == w.end:
                continue
            self._restore()
            if w.err == E_NO_MEMORY:
                raise MemoryError()
            if w.err == 0:
                failures.append((j, f"{w.end - w.pos} bytes left over"))
            else:
                failures.append((j, f"{_REASONS[w.err]} (byte {w.pos - offsets[r]}, {w.detail})"))
        return failures

    def take(self):
        """Per node: (slots, values bytes, data bytes, validity bytes); then a fresh start."""
        cdef int i
        cdef Node* nd
        out = []
        for i in range(self.nnodes):
            nd = &self.nodes[i]
            out.append((nd.n, PyBytes_FromStringAndSize(nd.vals.p, nd.vals.n),
                        PyBytes_FromStringAndSize(nd.data.p, nd.data.n),
                        PyBytes_FromStringAndSize(nd.valid.p, nd.valid.n)))
        self._reset()
        return out

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


cdef struct Buf:
    char* p
    Py_ssize_t n
    Py_ssize_t cap


cdef struct Node:
    int kind
    int arg           # fixed: size; enum: symbol count; nullable: index of the null branch
    int first         # first child in AvroColumns.kids
    int nkids
    Py_ssize_t n      # slots
    Buf vals          # fixed-width values, or int32 offsets (string, bytes, uuid, array, map)
    Buf data          # bytes of string, bytes, uuid, fixed
    Buf valid         # nullable: one byte per slot


cdef int grow(Buf* b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap = b.cap * 2 if b.cap else 1024
    while cap < b.n + extra:
        cap *= 2
    cdef char* p = <char*>realloc(b.p, cap)
    if p == NULL:
        raise MemoryError()
    b.p = p
    b.cap = cap
    return 0


cdef inline int put(Buf* b, const void* src, Py_ssize_t size) except -1:
    if b.n + size > b.cap:
        grow(b, size)
    memcpy(b.p + b.n, src, size)
    b.n += size
    return 0


cdef inline int put_i32(Buf* b, int32_t v) except -1:
    if b.n + 4 > b.cap:
        grow(b, 4)
    (<int32_t*>(b.p + b.n))[0] = v
    b.n += 4
    return 0


cdef inline int put_i64(Buf* b, int64_t v) except -1:
    if b.n + 8 > b.cap:
        grow(b, 8)
    (<int64_t*>(b.p + b.n))[0] = v
    b.n += 8
    return 0


cdef inline int put_u8(Buf* b, uint8_t v) except -1:
    if b.n + 1 > b.cap:
        grow(b, 1)
    b.p[b.n] = <char>v
    b.n += 1
    return 0


cdef inline int zeros(Buf* b, Py_ssize_t size) except -1:
    if b.n + size > b.cap:
        grow(b, size)
    memset(b.p + b.n, 0, size)
    b.n += size
    return 0


cdef inline int64_t read_long(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end) except? -1:
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos[0] >= end:
            raise AvroDecodeError(f"truncated (a number runs past the end, byte {pos[0]})")
        b = p[pos[0]]
        pos[0] += 1
        raw |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            return <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))
        shift += 7
        if shift > 63:
            raise AvroDecodeError(f"a number is longer than 10 bytes (byte {pos[0]})")


cdef inline Py_ssize_t read_size(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end) except -1:
    cdef int64_t n = read_long(p, pos, end)
    if n < 0 or n > end - pos[0]:
        raise AvroDecodeError(f"length {n} at byte {pos[0]} is negative or runs past the end")
    return <Py_ssize_t>n


cdef inline bint hexdigit(uint8_t c):
    return (48 <= c <= 57) or (97 <= c <= 102)


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
        for i in range(self.nnodes):
            nd = &self.nodes[i]
            nd.n = nd.vals.n = nd.data.n = nd.valid.n = 0
            if nd.kind in (K_STRING, K_BYTES, K_UUID, K_ARRAY, K_MAP):
                put_i32(&nd.vals, 0)
        return 0

    cdef inline void _save(self):
        cdef int i
        cdef Py_ssize_t* s = self.saved
        for i in range(self.nnodes):
            s[0] = self.nodes[i].n
            s[1] = self.nodes[i].vals.n
            s[2] = self.nodes[i].data.n
            s[3] = self.nodes[i].valid.n
            s += 4

    cdef void _restore(self):
        cdef int i
        cdef Py_ssize_t* s = self.saved
        for i in range(self.nnodes):
            self.nodes[i].n = s[0]
            self.nodes[i].vals.n = s[1]
            self.nodes[i].data.n = s[2]
            self.nodes[i].valid.n = s[3]
            s += 4

    cdef int _fill(self, int i) except -1:
        """A placeholder slot (under a null union branch)."""
        cdef Node* nd = &self.nodes[i]
        cdef int k = nd.kind
        cdef int c
        if k == K_BOOL:
            put_u8(&nd.vals, 0)
        elif k == K_INT or k == K_ENUM:
            put_i32(&nd.vals, 0)
        elif k == K_LONG:
            put_i64(&nd.vals, 0)
        elif k == K_FLOAT:
            zeros(&nd.vals, 4)
        elif k == K_DOUBLE:
            zeros(&nd.vals, 8)
        elif k == K_STRING or k == K_BYTES or k == K_UUID:
            put_i32(&nd.vals, <int32_t>nd.data.n)
        elif k == K_FIXED:
            zeros(&nd.data, nd.arg)
        elif k == K_ARRAY or k == K_MAP:
            put_i32(&nd.vals, <int32_t>self.nodes[self.kids[nd.first]].n)
        elif k == K_RECORD:
            for c in range(nd.nkids):
                self._fill(self.kids[nd.first + c])
        elif k == K_NULLABLE:
            put_u8(&nd.valid, 0)
            self._fill(self.kids[nd.first])
        nd.n += 1
        return 0

    cdef int _dec(self, int i, const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end) except -1:
        cdef Node* nd = &self.nodes[i]
        cdef int k = nd.kind
        cdef int c
        cdef int64_t v, count, j
        cdef Py_ssize_t size, at
        cdef uint8_t b
        if k == K_LONG:
            put_i64(&nd.vals, read_long(p, pos, end))
        elif k == K_STRING or k == K_BYTES:
            size = read_size(p, pos, end)
            put(&nd.data, p + pos[0], size)
            pos[0] += size
            if nd.data.n > 0x7FFFFFFF:
                raise AvroDecodeError("more than 2 GiB of bytes in one column batch")
            put_i32(&nd.vals, <int32_t>nd.data.n)
        elif k == K_INT:
            v = read_long(p, pos, end)
            if v < -2147483648 or v > 2147483647:
                raise AvroDecodeError(f"int {v} out of range")
            put_i32(&nd.vals, <int32_t>v)
        elif k == K_NULLABLE:
            v = read_long(p, pos, end)
            if v == nd.arg:
                put_u8(&nd.valid, 0)
                self._fill(self.kids[nd.first])
            elif v == 1 - nd.arg:
                put_u8(&nd.valid, 1)
                self._dec(self.kids[nd.first], p, pos, end)
            else:
                raise AvroDecodeError(f"union branch {v} does not exist")
        elif k == K_RECORD:
            for c in range(nd.nkids):
                self._dec(self.kids[nd.first + c], p, pos, end)
        elif k == K_UUID:
            size = read_size(p, pos, end)
            if size != 36:
                raise AvroDecodeError("uuid not in canonical form")
            for at in range(36):
                b = p[pos[0] + at]
                if at == 8 or at == 13 or at == 18 or at == 23:
                    if b != 45:
                        raise AvroDecodeError("uuid not in canonical form")
                elif not hexdigit(b):
                    raise AvroDecodeError("uuid not in canonical form")
            put(&nd.data, p + pos[0], 36)
            pos[0] += 36
            put_i32(&nd.vals, <int32_t>nd.data.n)
        elif k == K_DOUBLE or k == K_FLOAT:
            size = 8 if k == K_DOUBLE else 4
            if end - pos[0] < size:
                raise AvroDecodeError("truncated float")
            put(&nd.vals, p + pos[0], size)
            pos[0] += size
        elif k == K_BOOL:
            if pos[0] >= end:
                raise AvroDecodeError("truncated boolean")
            b = p[pos[0]]
            if b > 1:
                raise AvroDecodeError(f"boolean byte {b}")
            put_u8(&nd.vals, b)
            pos[0] += 1
        elif k == K_ENUM:
            v = read_long(p, pos, end)
            if v < 0 or v >= nd.arg:
                raise AvroDecodeError(f"enum index {v} out of range")
            put_i32(&nd.vals, <int32_t>v)
        elif k == K_FIXED:
            if end - pos[0] < nd.arg:
                raise AvroDecodeError("truncated fixed")
            put(&nd.data, p + pos[0], nd.arg)
            pos[0] += nd.arg
        elif k == K_ARRAY or k == K_MAP:
            while True:
                count = read_long(p, pos, end)
                if count == 0:
                    break
                if count < 0:
                    count = -count
                    read_long(p, pos, end)  # the block's size in bytes
                if count > end - pos[0]:
                    raise AvroDecodeError(f"block of {count} items cannot fit in the bytes left")
                for j in range(count):
                    self._dec(self.kids[nd.first], p, pos, end)
                    if k == K_MAP:
                        self._dec(self.kids[nd.first + 1], p, pos, end)
            if k == K_MAP:
                self._check_keys(self.kids[nd.first], nd)
            put_i32(&nd.vals, <int32_t>self.nodes[self.kids[nd.first]].n)
        else:
            raise AvroDecodeError(f"node kind {k} unknown")
        nd.n += 1
        return 0

    cdef int _check_keys(self, int key_node, Node* nd) except -1:
        """A duplicate key would be kept twice here; fastavro keeps the last: let it decide."""
        cdef Node* kn = &self.nodes[key_node]
        cdef int32_t first = (<int32_t*>nd.vals.p)[nd.n]  # this map's first entry
        cdef int32_t last = <int32_t>kn.n
        cdef int32_t* off = <int32_t*>kn.vals.p
        cdef int32_t a, b
        if last - first > 64:
            raise AvroDecodeError("map with more than 64 keys (checked the careful way)")
        for a in range(first, last):
            for b in range(a + 1, last):
                if off[a + 1] - off[a] == off[b + 1] - off[b] and memcmp(
                        kn.data.p + off[a], kn.data.p + off[b], off[a + 1] - off[a]) == 0:
                    raise AvroDecodeError("duplicate map key")
        return 0

    def decode(self, const uint8_t[::1] data, const int32_t[::1] offsets, const int64_t[::1] rows, int skip):
        """Decode ``data[offsets[r] + skip : offsets[r + 1]]`` for every r in ``rows``; returns
        ``[(index into rows, reason)]`` of the bodies that failed (rolled back: they have no slot)."""
        cdef Py_ssize_t j, r, pos, end
        cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
        failures = []
        for j in range(rows.shape[0]):
            r = rows[j]
            pos = offsets[r] + skip
            end = offsets[r + 1]
            self._save()
            try:
                self._dec(0, p, &pos, end)
                if pos != end:
                    raise AvroDecodeError(f"{end - pos} bytes left over")
            except AvroDecodeError as e:
                self._restore()
                failures.append((j, str(e)))
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

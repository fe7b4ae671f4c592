# Included by _avro_columns.pyx: the column buffers and the bounds-checked reads of the Avro walk.
# Every function returns 0 or -1 and records why in the Walk (no Python exception on the hot path).

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


cdef struct Walk:
    const uint8_t* p
    Py_ssize_t pos
    Py_ssize_t end
    int err
    int64_t detail


cdef int grow(Buf* b, Py_ssize_t extra) noexcept:
    cdef Py_ssize_t cap = b.cap * 2 if b.cap else 1024
    while cap < b.n + extra:
        cap *= 2
    cdef char* p = <char*>realloc(b.p, cap)
    if p == NULL:
        return -1
    b.p = p
    b.cap = cap
    return 0


cdef inline int put(Walk* w, Buf* b, const void* src, Py_ssize_t size) noexcept:
    if b.n + size > b.cap and grow(b, size) < 0:
        w.err = E_NO_MEMORY
        return -1
    memcpy(b.p + b.n, src, size)
    b.n += size
    return 0


cdef inline int put_i32(Walk* w, Buf* b, int32_t v) noexcept:
    if b.n + 4 > b.cap and grow(b, 4) < 0:
        w.err = E_NO_MEMORY
        return -1
    (<int32_t*>(b.p + b.n))[0] = v
    b.n += 4
    return 0


cdef inline int put_i64(Walk* w, Buf* b, int64_t v) noexcept:
    if b.n + 8 > b.cap and grow(b, 8) < 0:
        w.err = E_NO_MEMORY
        return -1
    (<int64_t*>(b.p + b.n))[0] = v
    b.n += 8
    return 0


cdef inline int put_u8(Walk* w, Buf* b, uint8_t v) noexcept:
    if b.n + 1 > b.cap and grow(b, 1) < 0:
        w.err = E_NO_MEMORY
        return -1
    b.p[b.n] = <char>v
    b.n += 1
    return 0


cdef inline int zeros(Walk* w, Buf* b, Py_ssize_t size) noexcept:
    if b.n + size > b.cap and grow(b, size) < 0:
        w.err = E_NO_MEMORY
        return -1
    memset(b.p + b.n, 0, size)
    b.n += size
    return 0


cdef inline int read_long(Walk* w, int64_t* out) noexcept:
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if w.pos >= w.end:
            w.err = E_TRUNCATED
            return -1
        b = w.p[w.pos]
        w.pos += 1
        raw |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            out[0] = <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))
            return 0
        shift += 7
        if shift > 63:
            w.err = E_VARINT
            return -1


cdef inline int read_size(Walk* w, Py_ssize_t* out) noexcept:
    cdef int64_t n
    if read_long(w, &n) < 0:
        return -1
    if n < 0 or n > w.end - w.pos:
        w.err, w.detail = E_LENGTH, n
        return -1
    out[0] = <Py_ssize_t>n
    return 0


cdef inline bint hexdigit(uint8_t c) noexcept:
    return (48 <= c <= 57) or (97 <= c <= 102)

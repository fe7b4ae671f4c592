# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""RecordBatch v2 records -> column buffers, with no Python object per record (built by scripts/setup.sh).

Why native: the warehouse load reads hundreds of thousands of records a second; aiokafka's C reader still
makes a tuple, two bytes objects and a header list per record, and building Arrow arrays from those lists
costs as much again. Here a batch's records are walked once and appended to growable C buffers: offsets
and timestamps (int64), keys and values (Arrow binary layout: int32 offsets + one data buffer, validity
bytes), headers (list offsets, key/value offsets and data). ``take()`` hands the buffers to Python as
``bytes`` that pyarrow wraps without copying (ferry.loaders.record_columns builds the arrays).

Batches are NOT CRC-checked here: the split reader's MessageSetConsumer checks the CRC-32C of every batch
before its bytes are handed out. Compressed batches are left to the caller (``walk`` stops at them), which
decompresses the records section and calls ``records`` on it.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

from cpython.bytes cimport PyBytes_FromStringAndSize

from batch_bytes cimport ferry_be32, ferry_be64  # wire/record/batch_bytes.h


cdef struct Buf:
    char* p
    Py_ssize_t n
    Py_ssize_t cap


cdef int grow(Buf* b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap = b.cap * 2 if b.cap else 4096
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


cdef inline int put_i64(Buf* b, int64_t v) except -1:
    return put(b, &v, 8)


cdef inline int put_i32(Buf* b, int32_t v) except -1:
    return put(b, &v, 4)


cdef inline int put_u8(Buf* b, uint8_t v) except -1:
    return put(b, &v, 1)


class CorruptRecordsError(ValueError):
    """The records of a batch do not parse (lengths out of bounds, varints too long)."""


cdef inline int64_t varlong(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end) except? -1:
    """A zigzag base-128 varint (Kafka's record fields)."""
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos[0] >= end:
            raise CorruptRecordsError(f"record field runs past the end of its batch (byte {pos[0]})")
        b = p[pos[0]]
        pos[0] += 1
        raw |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordsError(f"varint longer than 10 bytes (byte {pos[0]})")
    return <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))


cdef inline Py_ssize_t length_at(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, bint nullable) except -2:
    cdef int64_t n = varlong(p, pos, end)
    if n < 0:
        if nullable and n == -1:
            return -1
        raise CorruptRecordsError(f"negative length {n} (byte {pos[0]})")
    if n > end - pos[0]:
        raise CorruptRecordsError(f"length {n} runs past the end of its batch (byte {pos[0]})")
    return <Py_ssize_t>n


BATCH_HEADER_SIZE = 61

cdef enum:
    OFFSETS, STAMPS, KEY_OFF, KEY_DATA, KEY_VALID, VAL_OFF, VAL_DATA, VAL_VALID
    HDR_OFF, HKEY_OFF, HKEY_DATA, HVAL_OFF, HVAL_DATA, HVAL_VALID, N_BUFS


cdef bytes as_bytes(Buf* b):
    return PyBytes_FromStringAndSize(b.p, b.n)


cdef class RecordColumns:
    """Growable columns of records in ``[start, end)`` offsets; ``keys``/``headers`` False skips them."""

    cdef Buf b[N_BUFS]
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t data_bytes
    cdef Py_ssize_t n_headers
    cdef bint keys, headers
    cdef int64_t start, end

    def __cinit__(self, int64_t start, int64_t end, bint keys=True, bint headers=True):
        cdef int i
        for i in range(N_BUFS):
            self.b[i].p = NULL
            self.b[i].n = self.b[i].cap = 0
        self.start, self.end, self.keys, self.headers = start, end, keys, headers
        self._reset()

    def __dealloc__(self):
        cdef int i
        for i in range(N_BUFS):
            free(self.b[i].p)

    cdef int _reset(self) except -1:
        cdef int i
        for i in range(N_BUFS):
            self.b[i].n = 0
        self.count = self.n_headers = self.data_bytes = 0
        for i in (KEY_OFF, VAL_OFF, HDR_OFF, HKEY_OFF, HVAL_OFF):  # offsets start with 0
            put_i32(&self.b[i], 0)
        return 0

    def walk(self, const uint8_t[::1] data, Py_ssize_t pos=0):
        """Parse the records of every whole, uncompressed data batch from ``pos`` on (control batches are
        skipped). Returns the position of the first compressed batch, or the end of the whole batches."""
        cdef Py_ssize_t end = data.shape[0]
        cdef Py_ssize_t stop
        cdef int32_t length, count
        cdef int attributes
        cdef const uint8_t* p = &data[0] if end else NULL
        while end - pos >= 61:
            length = ferry_be32(p + pos + 8)
            stop = pos + 12 + length
            if length < 49 or stop > end:
                break
            if p[pos + 16] != 2:
                raise CorruptRecordsError(f"batch at offset {ferry_be64(p + pos)}: magic {p[pos + 16]}, not 2")
            attributes = (p[pos + 21] << 8) | p[pos + 22]
            if attributes & 0x20:  # a control batch (transaction marker): no data records
                pos = stop
                continue
            if attributes & 0x07:
                return pos
            count = ferry_be32(p + pos + 57)
            self._records(p, pos + 61, stop, count, ferry_be64(p + pos), ferry_be64(p + pos + 27),
                          ferry_be64(p + pos + 35) if attributes & 0x08 else -1)
            pos = stop
        return pos

    def records(self, const uint8_t[::1] data, int32_t count, int64_t base_offset, int64_t base_timestamp,
                int64_t log_append_time):
        """Parse ``count`` records from ``data`` (a decompressed records section)."""
        cdef Py_ssize_t end = data.shape[0]
        self._records(&data[0] if end else NULL, 0, end, count, base_offset, base_timestamp, log_append_time)

    cdef int _records(self, const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, int32_t count, int64_t base,
                      int64_t base_ts, int64_t log_append_time) except -1:
        cdef int32_t i, h, n_hdr
        cdef Py_ssize_t rec_end, klen, vlen, hk, hv, key_at, val_at
        cdef int64_t length, ts_delta, off_delta, offset, ts
        cdef bint keep
        for i in range(count):
            length = varlong(p, &pos, end)
            if length < 0 or length > end - pos:
                raise CorruptRecordsError(f"record {i} of the batch at offset {base}: length {length} out of bounds")
            rec_end = pos + <Py_ssize_t>length
            pos += 1  # attributes (unused in v2)
            ts_delta = varlong(p, &pos, rec_end)
            off_delta = varlong(p, &pos, rec_end)
            offset = base + off_delta
            keep = self.start <= offset < self.end
            klen = length_at(p, &pos, rec_end, True)
            key_at = pos
            if klen > 0:
                pos += klen
            vlen = length_at(p, &pos, rec_end, True)
            val_at = pos
            if vlen > 0:
                pos += vlen
            if keep:
                ts = log_append_time if log_append_time >= 0 else base_ts + ts_delta
                put_i64(&self.b[OFFSETS], offset)
                put_i64(&self.b[STAMPS], ts)
                if self.keys:
                    if klen >= 0:
                        put(&self.b[KEY_DATA], p + key_at, klen)
                    put_i32(&self.b[KEY_OFF], <int32_t>self.b[KEY_DATA].n)
                    put_u8(&self.b[KEY_VALID], klen >= 0)
                if vlen >= 0:
                    put(&self.b[VAL_DATA], p + val_at, vlen)
                    self.data_bytes += vlen
                put_i32(&self.b[VAL_OFF], <int32_t>self.b[VAL_DATA].n)
                put_u8(&self.b[VAL_VALID], vlen >= 0)
                self.count += 1
            n_hdr = <int32_t>varlong(p, &pos, rec_end)
            if n_hdr < 0:
                raise CorruptRecordsError(f"record at offset {offset}: {n_hdr} headers")
            for h in range(n_hdr):
                hk = length_at(p, &pos, rec_end, False)
                if keep and self.headers:
                    put(&self.b[HKEY_DATA], p + pos, hk)
                    put_i32(&self.b[HKEY_OFF], <int32_t>self.b[HKEY_DATA].n)
                pos += hk
                hv = length_at(p, &pos, rec_end, True)
                if keep and self.headers:
                    if hv >= 0:
                        put(&self.b[HVAL_DATA], p + pos, hv)
                    put_i32(&self.b[HVAL_OFF], <int32_t>self.b[HVAL_DATA].n)
                    put_u8(&self.b[HVAL_VALID], hv >= 0)
                    self.n_headers += 1
                if hv > 0:
                    pos += hv
            if keep and self.headers:
                put_i32(&self.b[HDR_OFF], <int32_t>self.n_headers)
            if pos != rec_end:
                raise CorruptRecordsError(f"record at offset {offset}: {rec_end - pos} bytes left over "
                                          "after its headers")
        return 0

    def take(self):
        """The columns so far as ``bytes`` (dict of buffers) and a fresh start."""
        out = {"count": self.count, "n_headers": self.n_headers,
               "offsets": as_bytes(&self.b[OFFSETS]), "timestamps": as_bytes(&self.b[STAMPS]),
               "value_offsets": as_bytes(&self.b[VAL_OFF]), "value_data": as_bytes(&self.b[VAL_DATA]), "value_valid": as_bytes(&self.b[VAL_VALID])}
        if self.keys:
            out.update(key_offsets=as_bytes(&self.b[KEY_OFF]), key_data=as_bytes(&self.b[KEY_DATA]), key_valid=as_bytes(&self.b[KEY_VALID]))
        if self.headers:
            out.update(header_offsets=as_bytes(&self.b[HDR_OFF]), header_key_offsets=as_bytes(&self.b[HKEY_OFF]),
                       header_key_data=as_bytes(&self.b[HKEY_DATA]), header_value_offsets=as_bytes(&self.b[HVAL_OFF]),
                       header_value_data=as_bytes(&self.b[HVAL_DATA]), header_value_valid=as_bytes(&self.b[HVAL_VALID]))
        self._reset()
        return out

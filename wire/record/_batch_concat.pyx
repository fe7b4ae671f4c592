# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Uncompressed RecordBatch v2 batches -> one batch, records copied, only their varint prefixes rewritten.

Built by setup.py (scripts/setup.sh); ferry.wire.record.batch_concat is the interface and
holds the pure-Python twin of this walk (same rules, same bytes, same counts), used when this is not built.

Why native: the mirror coalesces runs of small batches so that 5 batches in flight carry thousands of
records. Decoding every record into Python objects and re-encoding them cost ~1.5 µs a record, and the
audit walk on ack read every timestamp again (~0.4 µs). Here each record is walked once: its length,
attributes, timestampDelta (against the new base timestamp) and offsetDelta (the running index) are
written anew, the key, value and headers bytes are copied as they are, and the timestamps are counted per
audit bucket on the way.

The walk is strict: it accepts a subset of what aiokafka's reader accepts (whatever it accepts reads back
with the same key, value, headers and timestamp there) and raises ValueError on anything else, so that
the caller can fall back to its general path: a record that does not parse, a header key that is not
UTF-8, a null length other than -1, a timestamp below 0 (-1 is "no timestamp"), trailing bytes.
"""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.unicode cimport PyUnicode_DecodeUTF8

from batch_bytes cimport (  # wire/record/batch_bytes.h
    ferry_be32, ferry_be64, ferry_crc32c, ferry_crc32c_combine, ferry_crc32c_update, ferry_crc_init,
)

ferry_crc_init()

DEF HEADER = 61  # v2 batch header size
DEF CRC_POS = 17
DEF ATTRIBUTES_POS = 21
DEF BASE_TIMESTAMP_POS = 27
DEF COUNT_POS = 57
DEF MIN_RECORD = 7  # length, attributes, timestampDelta, offsetDelta, key, value, header count: a byte each
DEF MAX_PREFIX_GROWTH = 17  # a new prefix (5 + 1 + 10 + 5 bytes) minus the smallest old one (4)
DEF INT64_MAX = 0x7FFFFFFFFFFFFFFF


cdef struct Walk:
    int64_t max_ts
    int64_t bucket  # the bucket being counted (runs of one bucket cost no dict operation)
    int64_t in_bucket
    int64_t records


cdef inline Py_ssize_t read_varint(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, int64_t* out) noexcept:
    """Zigzag varint at ``pos`` (at most 10 bytes, all before ``end``): the position after it, or -1."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos >= end:
            return -1
        b = p[pos]
        pos += 1
        if shift == 63 and b > 1:
            return -1  # bits past 64: aiokafka would drop them, we refuse
        value |= (<uint64_t>(b & 0x7F)) << shift
        if not b & 0x80:
            break
        shift += 7
    out[0] = <int64_t>(value >> 1) ^ -<int64_t>(value & 1)
    return pos


cdef inline Py_ssize_t write_varint(uint8_t* p, Py_ssize_t pos, int64_t v) noexcept:
    cdef uint64_t z = ((<uint64_t>v) << 1) ^ <uint64_t>(v >> 63)
    while z >= 0x80:
        p[pos] = <uint8_t>((z & 0x7F) | 0x80)
        pos += 1
        z >>= 7
    p[pos] = <uint8_t>z
    return pos + 1


cdef inline int varint_size(int64_t v) noexcept:
    cdef uint64_t z = ((<uint64_t>v) << 1) ^ <uint64_t>(v >> 63)
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline void put_i64(uint8_t* p, int64_t v) noexcept:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(7, -1, -1):
        p[i] = <uint8_t>(u & 0xFF)
        u >>= 8


cdef inline void put_i32(uint8_t* p, int64_t v) noexcept:
    cdef uint32_t u = <uint32_t>v
    p[0] = <uint8_t>(u >> 24)
    p[1] = <uint8_t>(u >> 16)
    p[2] = <uint8_t>(u >> 8)
    p[3] = <uint8_t>u


cdef int fail(int64_t batch_offset, int64_t index, str what) except -1:
    raise ValueError(f"batch at offset {batch_offset}, record {index}: {what}")


cdef Py_ssize_t skip_bytes(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, int nullable, int64_t off,
                           int64_t i, str what) except -1:
    """Skip one length-prefixed field (-1: null if ``nullable``); the position after it."""
    cdef int64_t n = 0
    pos = read_varint(p, pos, end, &n)
    if pos < 0:
        fail(off, i, f"{what} length does not parse")
    if n < -1 or (n == -1 and not nullable):
        fail(off, i, f"{what} length {n}")
    if n > end - pos:
        fail(off, i, f"{what} of {n} bytes runs past the record's end")
    return pos + n if n > 0 else pos


cdef int flush_bucket(Walk* w, dict buckets) except -1:
    if w.in_bucket:
        buckets[w.bucket] = buckets.get(w.bucket, 0) + w.in_bucket
        w.in_bucket = 0
    return 0


cdef Py_ssize_t walk_batch(const uint8_t* src, Py_ssize_t size, int64_t new_base, uint8_t* dst, Py_ssize_t dpos,
                           Walk* w, dict buckets, int64_t bucket_ms) except -1:
    """Walk one whole uncompressed CreateTime batch's records; with ``dst``, write them re-prefixed from
    ``dpos`` on. Returns the position in ``dst`` after them."""
    if size < HEADER or src[16] != 2:
        fail(ferry_be64(src) if size >= 8 else -1, 0, "not a whole v2 batch")
    cdef int64_t off = ferry_be64(src)
    cdef int16_t attrs = <int16_t>((src[ATTRIBUTES_POS] << 8) | src[ATTRIBUTES_POS + 1])
    if attrs & 0x2F:  # a codec, LogAppendTime or a control batch
        fail(off, 0, f"attributes {attrs:#x}: only uncompressed CreateTime data batches are walked")
    cdef int64_t base_ts = ferry_be64(src + BASE_TIMESTAMP_POS)
    cdef int64_t count = ferry_be32(src + COUNT_POS)
    if count < 1 or count > (size - HEADER) // MIN_RECORD:
        fail(off, 0, f"{count} records cannot fit in {size - HEADER} bytes")
    cdef Py_ssize_t pos = HEADER, rest, rec_end, k
    cdef int64_t i, h, b, ts, new_len, length = 0, ts_delta = 0, ignored = 0, n = 0
    cdef uint8_t attr
    for i in range(count):
        pos = read_varint(src, pos, size, &length)
        if pos < 0 or length < MIN_RECORD - 1 or length > size - pos:
            fail(off, i, "record length does not parse or runs past the batch")
        rec_end = pos + length
        attr = src[pos]
        if attr & 0x80:
            fail(off, i, f"record attributes byte {attr:#x}")
        pos = read_varint(src, pos + 1, rec_end, &ts_delta)
        if pos < 0:
            fail(off, i, "timestampDelta does not parse")
        pos = read_varint(src, pos, rec_end, &ignored)
        if pos < 0:
            fail(off, i, "offsetDelta does not parse")
        rest = pos
        pos = skip_bytes(src, pos, rec_end, 1, off, i, "key")
        pos = skip_bytes(src, pos, rec_end, 1, off, i, "value")
        pos = read_varint(src, pos, rec_end, &n)
        if pos < 0 or n < 0:
            fail(off, i, "header count does not parse or is negative")
        for h in range(n):
            pos = read_varint(src, pos, rec_end, &length)
            if pos < 0 or length < 0 or length > rec_end - pos:
                fail(off, i, "a header key length does not parse, is negative or runs past the record")
            k = pos
            while k < pos + length and not src[k] & 0x80:
                k += 1
            if k < pos + length:  # not plain ASCII: the key must be UTF-8 (aiokafka's reader decodes it)
                try:
                    PyUnicode_DecodeUTF8(<const char*>src + pos, length, "strict")
                except UnicodeDecodeError:
                    fail(off, i, "a header key is not UTF-8")
            pos = skip_bytes(src, pos + length, rec_end, 1, off, i, "header value")
        if pos != rec_end:
            fail(off, i, f"{rec_end - pos} bytes left over in the record")
        if (ts_delta > 0 and base_ts > INT64_MAX - ts_delta) or (ts_delta < 0 and base_ts < 0):
            fail(off, i, "timestamp overflows or is below 0")
        ts = base_ts + ts_delta
        if ts < 0:
            fail(off, i, f"timestamp {ts} (none or before the epoch)")
        if ts > w.max_ts:
            w.max_ts = ts
        b = ts - ts % bucket_ms
        if b != w.bucket:
            flush_bucket(w, buckets)
            w.bucket = b
        w.in_bucket += 1
        if dst != NULL:
            new_len = 1 + varint_size(ts - new_base) + varint_size(w.records) + (rec_end - rest)
            dpos = write_varint(dst, dpos, new_len)
            dst[dpos] = attr
            dpos = write_varint(dst, dpos + 1, ts - new_base)
            dpos = write_varint(dst, dpos, w.records)
            memcpy(dst + dpos, src + rest, rec_end - rest)
            dpos += rec_end - rest
        w.records += 1
    if pos != size:
        fail(off, count, f"{size - pos} bytes after the last record")
    return dpos


cdef int check_crc(const uint8_t* src, Py_ssize_t size, object crc_error) except -1:
    """Raise ``crc_error`` unless ``src`` is a v2 batch of at least a header whose CRC-32C matches its bytes."""
    cdef uint32_t crc
    if size < HEADER:
        raise crc_error(f"a batch of {size} bytes is shorter than a batch header", -1)
    crc = ferry_crc32c(src + ATTRIBUTES_POS, <size_t>(size - ATTRIBUTES_POS))
    if crc != <uint32_t>ferry_be32(src + CRC_POS):
        raise crc_error(f"batch at offset {ferry_be64(src)}: CRC-32C {crc:#010x} != header "
                        f"{<uint32_t>ferry_be32(src + CRC_POS):#010x}", ferry_be64(src))
    return 0


def count(batch, int64_t bucket_ms):
    """(records, {bucket start: records}) of one whole uncompressed v2 batch; ValueError if it does not
    walk (see the module docstring)."""
    cdef Py_buffer view
    cdef Walk w
    cdef dict buckets = {}
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        w.max_ts = -1
        w.bucket = -1
        w.in_bucket = 0
        w.records = 0
        walk_batch(<const uint8_t*>view.buf, view.len, 0, NULL, 0, &w, buckets, bucket_ms)
        flush_bucket(&w, buckets)
    finally:
        PyBuffer_Release(&view)
    return w.records, buckets


def concat(bytearray out, list sources, int64_t producer_id, int producer_epoch, int32_t base_sequence,
           int64_t bucket_ms, object crc_error=None):
    """Append to ``out`` one batch holding the records of ``sources`` (whole uncompressed v2 batches);
    returns (records, max timestamp, {bucket start: records}). ``out`` is unchanged if it raises.

    With ``crc_error`` (an exception type taking a message and the batch's base offset), each source's
    CRC-32C is checked just before its records are walked, and a mismatch raises it: the batch is then in
    the cache for the walk, where a separate pass over a whole fetch answer first had to read it again."""
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(out), bound = HEADER, end
    cdef Py_buffer view
    cdef Walk w
    cdef dict buckets = {}
    cdef object src
    cdef int64_t new_base = 0, n
    cdef uint8_t* dst
    cdef Py_ssize_t written
    cdef uint32_t records_crc = 0  # of the records written so far, each source's while it is in the cache
    if not sources:
        raise ValueError("nothing to concatenate")
    cdef bint first = True
    for src in sources:
        PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)
        if view.len >= HEADER:
            # the walk writes exactly the header's count of records or fails first: a tight bound keeps
            # ``out`` from being re-allocated (and copied) at every run appended to it
            n = ferry_be32(<const uint8_t*>view.buf + COUNT_POS)
            bound += view.len - HEADER + MAX_PREFIX_GROWTH * (min(max(n, 0), (view.len - HEADER) // MIN_RECORD) + 1)
            if first:
                new_base = ferry_be64(<const uint8_t*>view.buf + BASE_TIMESTAMP_POS)  # the first batch's
        first = False
        PyBuffer_Release(&view)
    if new_base < 0:
        raise ValueError(f"base timestamp {new_base} (none or before the epoch)")
    # grown by half at least: the mirror appends run after run to one ``out``, and growing it by one run each
    # time re-allocated (copied) everything before it (shrinking back to ``end`` keeps the allocation)
    PyByteArray_Resize(out, max(start + bound, start + start // 2))
    w.max_ts = -1
    w.bucket = -1
    w.in_bucket = 0
    w.records = 0
    end = start + HEADER
    try:
        for src in sources:
            PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)
            try:
                if crc_error is not None:
                    check_crc(<const uint8_t*>view.buf, view.len, crc_error)
                dst = <uint8_t*>PyByteArray_AS_STRING(out)
                written = end
                end = walk_batch(<const uint8_t*>view.buf, view.len, new_base, dst, end, &w, buckets, bucket_ms)
                records_crc = ferry_crc32c_update(records_crc, dst + written, <size_t>(end - written))
            finally:
                PyBuffer_Release(&view)
        flush_bucket(&w, buckets)
        if w.records > 0x7FFFFFFF or end - start - 12 > 0x7FFFFFFF:
            raise ValueError(f"{w.records} records, {end - start} bytes: too many for one batch")
    except BaseException:
        PyByteArray_Resize(out, start)
        raise
    PyByteArray_Resize(out, end)
    dst = <uint8_t*>PyByteArray_AS_STRING(out) + start
    put_i64(dst, 0)  # baseOffset: the target assigns it
    put_i32(dst + 8, end - start - 12)  # batchLength
    put_i32(dst + 12, -1)  # partitionLeaderEpoch: the target's
    dst[16] = 2  # magic
    dst[21] = 0  # attributes: no codec, CreateTime, not transactional, not control
    dst[22] = 0
    put_i32(dst + 23, w.records - 1)  # lastOffsetDelta
    put_i64(dst + 27, new_base)
    put_i64(dst + 35, w.max_ts)
    put_i64(dst + 43, producer_id)
    dst[51] = <uint8_t>((producer_epoch >> 8) & 0xFF)
    dst[52] = <uint8_t>(producer_epoch & 0xFF)
    put_i32(dst + 53, base_sequence)
    put_i32(dst + 57, w.records)
    # the CRC of the header fields after it, joined to the records' (computed as they were written); it
    # keeps the GIL, as mirror/_forward_scan.pyx's does (it says why)
    put_i32(dst + 17, ferry_crc32c_combine(ferry_crc32c(dst + ATTRIBUTES_POS, HEADER - ATTRIBUTES_POS),
                                           records_crc, <size_t>(end - start - HEADER)))
    return w.records, w.max_ts, buckets

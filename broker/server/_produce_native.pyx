# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The common Produce request read natively (built by scripts/build_native.py; produce_parse.py is the pure-
Python twin and the fallback): the request's fields and its one record batch checked (header rules and CRC-32C)
in one call with no Python object per field.

Why native: at one message per request the fast path's struct calls, slices and the CRC call were a third of
the broker's CPU per request (bench/RESULTS.md). ``parse(frame)`` answers exactly what
``produce_parse.parse_py(frame)`` answers (tests compare them on good and bad input).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from ferry.wire.record.record_batch import RecordBatchHeader

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static uint32_t ferry_crc_table[256];
    static int ferry_crc_hw = -1;
    static void ferry_crc_init(void) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            ferry_crc_table[i] = c;
        }
    #if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        ferry_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    #else
        ferry_crc_hw = 0;
    #endif
    }
    #if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("sse4.2")))
    static uint32_t ferry_crc_sse42(uint32_t crc, const unsigned char *p, size_t n) {
        uint64_t c = crc;
        while (n >= 8) { uint64_t v; memcpy(&v, p, 8); c = __builtin_ia32_crc32di(c, v); p += 8; n -= 8; }
        uint32_t c32 = (uint32_t)c;
        while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
        return c32;
    }
    #endif
    static uint32_t ferry_crc32c(const unsigned char *p, size_t n) {
        uint32_t crc = 0xFFFFFFFFu;
    #if defined(__x86_64__) && defined(__GNUC__)
        if (ferry_crc_hw == 1) return ferry_crc_sse42(crc, p, n) ^ 0xFFFFFFFFu;
    #endif
        while (n--) crc = ferry_crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        return crc ^ 0xFFFFFFFFu;
    }
    """
    void ferry_crc_init()
    uint32_t ferry_crc32c(const unsigned char *p, size_t n)
    int ferry_crc_hw

ferry_crc_init()

DEF FIRST_VERSION = 3
DEF LAST_VERSION = 8
DEF HEADER_SIZE = 61  # a v2 batch's fixed header
DEF MIN_BATCH_LENGTH = 49
DEF REFUSED = 0x30  # control | transactional: not without a transactional id

cdef object _new_header = tuple.__new__
cdef object _Header = RecordBatchHeader


cdef inline int16_t be16(const unsigned char *p):
    return <int16_t>((p[0] << 8) | p[1])

cdef inline int32_t be32(const unsigned char *p):
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])

cdef inline int64_t be64(const unsigned char *p):
    return <int64_t>((<uint64_t><uint32_t>be32(p) << 32) | <uint32_t>be32(p + 4))


def crc32c(data) -> int:
    """CRC-32C (Castagnoli) of ``data``, as the ``crc32c`` package computes it (the tests compare)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return ferry_crc32c(<const unsigned char *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


def hardware_crc() -> bool:
    """True when the CRC-32C runs on the CPU's crc32 instruction (SSE 4.2)."""
    return ferry_crc_hw == 1


def parse(frame):
    """None when ``frame`` is not the fast path's shape (one topic, one partition, acks 1 or -1, no transactional
    id, Produce v3-8, the records filling the rest of the frame), else (version, correlation id, acks, timeout
    ms, topic name bytes, partition, records position, header): the header (RecordBatchHeader) only when the
    records are exactly one batch that passes validate_batches' checks with no size limit, else None (the
    log's general append then validates, and refuses with the precise error)."""
    cdef Py_buffer view
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        return _parse(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef object _parse(const unsigned char *b, Py_ssize_t end):
    cdef Py_ssize_t pos, name_len, size
    cdef int16_t version, client_len, acks
    cdef int32_t batch_length, records, last_delta
    cdef uint8_t magic
    cdef int16_t attributes
    if end < 12 or be16(b) != 0:
        return None
    version = be16(b + 2)
    if version < FIRST_VERSION or version > LAST_VERSION:
        return None
    correlation_id = be32(b + 4)
    client_len = be16(b + 8)
    pos = 10 + client_len if client_len > 0 else 10
    if end < pos + 14 or be16(b + pos) != -1:
        return None
    acks = be16(b + pos + 2)
    name_len = be16(b + pos + 12)
    if be32(b + pos + 8) != 1 or not (acks == 1 or acks == -1) or name_len <= 0 or end < pos + 14 + name_len + 12:
        return None
    topic = PyBytes_FromStringAndSize(<const char *>(b + pos + 14), name_len)
    timeout_ms = be32(b + pos + 4)
    pos += 14 + name_len
    size = be32(b + pos + 8)
    if be32(b + pos) != 1 or size <= 0 or pos + 12 + size != end:
        return None
    partition = be32(b + pos + 4)
    pos += 12
    head = None
    if size >= HEADER_SIZE:
        b += pos
        batch_length = be32(b + 8)
        magic = b[16]
        attributes = be16(b + 21)
        last_delta = be32(b + 23)
        records = be32(b + 57)
        if (magic == 2 and batch_length >= MIN_BATCH_LENGTH and <int64_t>batch_length + 12 == size
                and records > 0 and <int64_t>last_delta + 1 >= records and not attributes & REFUSED
                and ferry_crc32c(b + 21, size - 21) == <uint32_t>be32(b + 17)):
            head = _new_header(_Header, (be64(b), batch_length, be32(b + 12), magic, <uint32_t>be32(b + 17),
                                         attributes, last_delta, be64(b + 27), be64(b + 35), be64(b + 43),
                                         be16(b + 51), be32(b + 53), records))
    return (version, correlation_id, acks, timeout_ms, topic, partition, pos, head)

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The common Produce request read natively (built by setup.py; produce_parse.py is the pure-
Python twin and the fallback): the request's fields and its one record batch checked (header rules and CRC-32C)
in one call with no Python object per field.

Why native: at one message per request the fast path's struct calls, slices and the CRC call were a third of
the broker's CPU per request (bench/RESULTS.md). ``parse(frame)`` answers exactly what
``produce_parse.parse_py(frame)`` answers (tests compare them on good and bad input).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from ferry.wire.record.record_batch import RecordBatchHeader

from batch_bytes cimport (  # wire/record/batch_bytes.h
    ferry_be32, ferry_be64, ferry_crc32c, ferry_crc_init,
)

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


def frame_buffer(Py_ssize_t size):
    """A bytearray of ``size`` bytes left as allocated, not zeroed: a large request is received into it whole
    before anything reads it (``bytearray(size)`` wrote every byte twice, zeros first: ~4% of a broker's
    samples while it took the mirror's megabyte requests)."""
    return PyByteArray_FromStringAndSize(NULL, size)


def parse(frame):
    """None when ``frame`` is not the fast path's shape (one topic, one partition, no transactional id, Produce
    v3-8, the records filling the rest of the frame), else (version, correlation id, acks as sent, timeout ms,
    topic name bytes, partition, records position, header): the header (RecordBatchHeader) only when the
    records are exactly one batch that passes validate_batches' checks with no size limit, else None (the
    log's general append then validates, and refuses with the precise error). What acks means is not decided
    here (produce_rules.ack_mode)."""
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
    correlation_id = ferry_be32(b + 4)
    client_len = be16(b + 8)
    pos = 10 + client_len if client_len > 0 else 10
    if end < pos + 14 or be16(b + pos) != -1:
        return None
    acks = be16(b + pos + 2)
    name_len = be16(b + pos + 12)
    if ferry_be32(b + pos + 8) != 1 or name_len <= 0 or end < pos + 14 + name_len + 12:
        return None
    topic = PyBytes_FromStringAndSize(<const char *>(b + pos + 14), name_len)
    timeout_ms = ferry_be32(b + pos + 4)
    pos += 14 + name_len
    size = ferry_be32(b + pos + 8)
    if ferry_be32(b + pos) != 1 or size <= 0 or pos + 12 + size != end:
        return None
    partition = ferry_be32(b + pos + 4)
    pos += 12
    head = None
    if size >= HEADER_SIZE:
        b += pos
        batch_length = ferry_be32(b + 8)
        magic = b[16]
        attributes = be16(b + 21)
        last_delta = ferry_be32(b + 23)
        records = ferry_be32(b + 57)
        if (magic == 2 and batch_length >= MIN_BATCH_LENGTH and <int64_t>batch_length + 12 == size
                and records > 0 and <int64_t>last_delta + 1 >= records and not attributes & REFUSED
                and ferry_crc32c(b + 21, size - 21) == <uint32_t>ferry_be32(b + 17)):
            head = _new_header(_Header, (ferry_be64(b), batch_length, ferry_be32(b + 12), magic,
                                         <uint32_t>ferry_be32(b + 17), attributes, last_delta, ferry_be64(b + 27),
                                         ferry_be64(b + 35), ferry_be64(b + 43), be16(b + 51), ferry_be32(b + 53),
                                         records))
    return (version, correlation_id, acks, timeout_ms, topic, partition, pos, head)

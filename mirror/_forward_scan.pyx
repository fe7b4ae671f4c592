# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The batch walk of ``batch_rewrite.forward_batches`` in C: which fetched batches to forward, skip or coalesce.

Built by setup.py (scripts/setup.sh); ferry.mirror.batch_rewrite holds the Python loop it
mirrors and takes over wherever this one stops.

Why native: the mirror's one thread is the copy's critical path, and the Python loop spent ~3 µs on each
fetched batch (header tuple, properties, CRC call, read_committed filter, run bookkeeping): for a producer's
50-record batches, about a third of the mirror's CPU per message outside the kernel. Here each batch costs
a header read and its CRC-32C (for the batches of uncompressed runs, the concatenation's: ``defer_run_crcs``),
and Python sees one item per forwarded batch or coalesced run.

The rules are the Python loop's, for an answer without aborted transactions (the caller's check): stop at
anything that is not a valid v2 batch (fewer bytes than a header is "truncated"; bad magic, batchLength or
CRC-32C stop the walk where the batch starts, and the Python loop raises there), skip batches that end
below the wanted offset, control batches and empty ones; runs of dense CreateTime batches under
``max_source`` bytes, of one codec, up to ``coalesce_bytes`` together, become one item.

The CRC is computed in C with the GIL held (wire/record/batch_bytes.h, called directly): the ``crc32c``
package released the GIL for large buffers, letting the mirror's other threads take it while the stream
waited to get it back (py-spy: ~15% of the stream's samples in the hand-over), and a Python call per
fetched batch (a memoryview slice, argument parsing) cost more than the CRC of a producer's 12 KB batch.
"""

from libc.string cimport memcpy
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

from batch_bytes cimport ferry_be32, ferry_be64, ferry_crc32c, ferry_crc_init  # wire/record/batch_bytes.h

ferry_crc_init()

DEF HEADER = 61
DEF LOG_OVERHEAD = 12
DEF MAGIC_POS = 16
DEF CRC_POS = 17
DEF ATTRIBUTES_POS = 21
DEF LAST_OFFSET_DELTA_POS = 23
DEF COUNT_POS = 57
DEF COMPRESSION_MASK = 0x07
DEF TIMESTAMP_TYPE_MASK = 0x08
DEF CONTROL_MASK = 0x20


def scan(data, Py_ssize_t pos, int64_t next_offset, int64_t coalesce_bytes, int64_t max_source,
         bint defer_run_crcs=False):
    """Walk the batches of ``data`` from ``pos``, ``next_offset`` being the source offset wanted next.

    ``defer_run_crcs``: the CRC-32C of the uncompressed batches put into runs is left to the caller, who
    checks it while concatenating them (ferry.wire.record.batch_concat, check_crcs=True): one pass over
    their bytes instead of two. Every other batch is checked here, skipped ones included (a damaged header
    could otherwise pass data off as a control batch).

    Returns (items, pos, next_offset, skipped, truncated): ``items`` in order, each (resume, start, size) for
    a batch forwarded alone or a list [(resume, start, size), ...] for a run to coalesce, ``resume`` being
    the source offset to fetch again if that batch is not acknowledged; ``pos`` where the walk stopped (the end, a
    truncated batch, or a batch that is not valid: the caller's Python loop goes on from there);
    ``next_offset`` after everything walked; ``skipped`` batches passed over; ``truncated`` when the bytes
    end inside a batch."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    cdef const uint8_t* buf = <const uint8_t*>view.buf
    cdef Py_ssize_t total = view.len, size
    cdef int64_t base, nxt, last_delta, count, run_bytes = 0, resume
    cdef int32_t batch_length
    cdef int16_t attrs
    cdef int run_codec = 0
    cdef bint eligible, truncated = False
    cdef int skipped = 0
    cdef list items = [], run = []
    try:
        while pos < total:
            if total - pos < HEADER:
                truncated = True
                break
            base = ferry_be64(buf + pos)
            batch_length = ferry_be32(buf + pos + 8)
            if buf[pos + MAGIC_POS] != 2 or batch_length < HEADER - LOG_OVERHEAD:
                break  # the Python loop raises CorruptBatchError here
            size = <Py_ssize_t>batch_length + LOG_OVERHEAD
            if pos + size > total:
                truncated = True
                break
            last_delta = ferry_be32(buf + pos + LAST_OFFSET_DELTA_POS)
            nxt = base + last_delta + 1
            if nxt <= next_offset:
                skipped += 1  # already mirrored (the fetch started inside or before it)
                pos += size
                continue
            attrs = <int16_t>((buf[pos + ATTRIBUTES_POS] << 8) | buf[pos + ATTRIBUTES_POS + 1])
            count = ferry_be32(buf + pos + COUNT_POS)
            eligible = size < max_source and not attrs & TIMESTAMP_TYPE_MASK and count == last_delta + 1
            if not (defer_run_crcs and coalesce_bytes > 0 and eligible and count > 0
                    and not attrs & (CONTROL_MASK | COMPRESSION_MASK)) and \
                    ferry_crc32c(buf + pos + ATTRIBUTES_POS, <size_t>(size - ATTRIBUTES_POS)) != \
                    <uint32_t>ferry_be32(buf + pos + CRC_POS):
                break  # the Python loop raises CorruptBatchError here
            resume = next_offset
            next_offset = nxt
            if attrs & CONTROL_MASK or count == 0:
                skipped += 1
                pos += size
                continue
            if coalesce_bytes <= 0:
                items.append((resume, pos, size))
                pos += size
                continue
            if run and (not eligible or run_bytes + size > coalesce_bytes
                        or run_codec != attrs & COMPRESSION_MASK):
                items.append(run)
                run, run_bytes = [], 0
            if eligible:
                if not run:
                    run_codec = attrs & COMPRESSION_MASK
                run.append((resume, pos, size))
                run_bytes += size
            else:
                items.append((resume, pos, size))
            pos += size
        if run:
            items.append(run)
    finally:
        PyBuffer_Release(&view)
    return items, pos, next_offset, skipped, truncated


DEF BASE_OFFSET_POS = 0
DEF LEADER_EPOCH_POS = 12
DEF PRODUCER_ID_POS = 43
DEF PRODUCER_EPOCH_POS = 51
DEF BASE_SEQUENCE_POS = 53
DEF TRANSACTIONAL_MASK = 0x10
DEF SEQUENCE_MODULUS = 2147483648


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept:
    cdef int i
    for i in range(8):
        p[i] = <uint8_t>(v >> (56 - 8 * i))


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


def stamp_positions(data, int64_t next_offset, int64_t producer_id):
    """The embedded mirror's whole walk of one fetched answer in one pass (no aborted transactions in it).

    Each batch is checked (framing, magic, CRC-32C of the source bytes), passed over if it ends below
    ``next_offset``, is a control batch or is empty, else copied into the output and re-stamped: baseOffset 0,
    partitionLeaderEpoch -1, the transactional bit cleared, ``producer_id``, and producerEpoch/baseSequence
    spelling its live base offset (batch_rewrite.source_position); then its CRC-32C is computed anew.

    Returns (out, used, messages, next_offset, pos, truncated): the output bytearray (its first ``used``
    bytes are the re-stamped batches), the records in them, the live offset after everything walked, where
    the walk stopped and whether the bytes ended inside a batch. ``pos`` short of the end without
    ``truncated``: the batch there is not valid (the caller raises, from the Python walk's checks)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    cdef const uint8_t* buf = <const uint8_t*>view.buf
    cdef Py_ssize_t total = view.len, size, pos = 0, used = 0
    cdef int64_t base, nxt, last_delta, count, messages = 0
    cdef int32_t batch_length
    cdef int16_t attrs
    cdef bint truncated = False
    cdef bytearray out = bytearray(total)
    cdef uint8_t* dst = <uint8_t*>(<char*>out)
    cdef uint8_t* b
    try:
        while pos < total:
            if total - pos < HEADER:
                truncated = True
                break
            base = ferry_be64(buf + pos)
            batch_length = ferry_be32(buf + pos + 8)
            if buf[pos + MAGIC_POS] != 2 or batch_length < HEADER - LOG_OVERHEAD:
                break
            size = <Py_ssize_t>batch_length + LOG_OVERHEAD
            if pos + size > total:
                truncated = True
                break
            last_delta = ferry_be32(buf + pos + LAST_OFFSET_DELTA_POS)
            nxt = base + last_delta + 1
            if nxt <= next_offset:
                pos += size  # already copied (the fetch started inside or before it)
                continue
            if ferry_crc32c(buf + pos + ATTRIBUTES_POS, <size_t>(size - ATTRIBUTES_POS)) != \
                    <uint32_t>ferry_be32(buf + pos + CRC_POS):
                break
            next_offset = nxt
            attrs = <int16_t>((buf[pos + ATTRIBUTES_POS] << 8) | buf[pos + ATTRIBUTES_POS + 1])
            count = ferry_be32(buf + pos + COUNT_POS)
            if attrs & CONTROL_MASK or count == 0:
                pos += size
                continue
            b = dst + used
            memcpy(b, buf + pos, <size_t>size)
            _put64(b + BASE_OFFSET_POS, 0)
            _put32(b + LEADER_EPOCH_POS, <uint32_t>0xFFFFFFFF)
            b[ATTRIBUTES_POS + 1] = <uint8_t>(b[ATTRIBUTES_POS + 1] & ~TRANSACTIONAL_MASK)
            _put64(b + PRODUCER_ID_POS, <uint64_t>producer_id)
            b[PRODUCER_EPOCH_POS] = <uint8_t>((base // SEQUENCE_MODULUS) >> 8)
            b[PRODUCER_EPOCH_POS + 1] = <uint8_t>(base // SEQUENCE_MODULUS)
            _put32(b + BASE_SEQUENCE_POS, <uint32_t>(base % SEQUENCE_MODULUS))
            _put32(b + CRC_POS, ferry_crc32c(b + ATTRIBUTES_POS, <size_t>(size - ATTRIBUTES_POS)))
            used += size
            messages += count
            pos += size
    finally:
        PyBuffer_Release(&view)
    return out, used, messages, next_offset, pos, truncated

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

The CRC is computed in C (wire/record/batch_bytes.h, called directly): the ``crc32c`` package released the
GIL for each large buffer, letting the mirror's other threads take it while the stream waited to get it back
(py-spy: ~15% of the stream's samples in the hand-over), and a Python call per fetched batch (a memoryview
slice, argument parsing) cost more than the CRC of a producer's 12 KB batch. ``_walk`` releases the GIL once
per answer (one hand-over per 8 MiB, not one per batch).

One walk serves both mirrors: ``scan`` (the standalone mirror: items to forward or coalesce) and
``stamp_positions`` (the embedded mirror: the answer re-stamped in place) are ``_walk`` with its stamping flag
off and on.
"""

from libc.stdlib cimport free, malloc
from libc.string cimport memmove
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer

from batch_bytes cimport ferry_be32, ferry_be64, ferry_crc32c_update, ferry_crc_init  # wire/record/batch_bytes.h

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


DEF BASE_OFFSET_POS = 0
DEF LEADER_EPOCH_POS = 12
DEF PRODUCER_ID_POS = 43
DEF PRODUCER_EPOCH_POS = 51
DEF BASE_SEQUENCE_POS = 53
DEF TRANSACTIONAL_MASK = 0x10


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <uint8_t>(v >> (56 - 8 * i))


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef struct Walk:
    Py_ssize_t pos  # where the walk stopped: the end, a cut-off batch or one that is not valid
    int64_t next_offset  # the source offset after everything walked
    int64_t messages  # records in the batches kept
    Py_ssize_t used  # stamping: bytes of re-stamped batches at the buffer's start
    Py_ssize_t kept  # not stamping: entries written to ``kept``
    int skipped  # batches passed over (already copied, control, empty)
    bint truncated  # the bytes end inside a batch


cdef struct Kept:
    int64_t resume  # the source offset to fetch again if this batch is not acknowledged
    Py_ssize_t pos
    Py_ssize_t size
    int codec
    bint eligible  # may join a run to coalesce


cdef void _walk(uint8_t* buf, Py_ssize_t total, Walk* w, int64_t max_source, bint defer_run_crcs,
                bint stamp, int64_t producer_id, Kept* kept) noexcept nogil:
    """The one walk of a fetched answer from ``w.pos``: framing, magic, CRC-32C and the batches to pass over.

    ``stamp``: the embedded mirror's copy, in place: each kept batch moves down over the ones passed over and is
    re-stamped (baseOffset 0, partitionLeaderEpoch -1, the transactional bit cleared, ``producer_id``, and
    producerEpoch/baseSequence spelling its live base offset, // and % 2**31: batch_rewrite.source_position), then its CRC-32C
    computed anew; writes stay below ``w.pos``, so the batch the walk stopped at is left as it came. Else each
    kept batch is an entry of ``kept`` (the standalone mirror's scan builds its items from them);
    ``defer_run_crcs`` leaves the CRC of a batch that may be coalesced to the caller."""
    cdef Py_ssize_t pos = w.pos, size
    cdef int64_t base, nxt, last_delta, count
    cdef int32_t batch_length
    cdef int16_t attrs
    cdef bint eligible
    cdef uint8_t* b
    while pos < total:
        if total - pos < HEADER:
            w.truncated = True
            break
        base = ferry_be64(buf + pos)
        batch_length = ferry_be32(buf + pos + 8)
        if buf[pos + MAGIC_POS] != 2 or batch_length < HEADER - LOG_OVERHEAD:
            break  # the Python loop raises CorruptBatchError here
        size = <Py_ssize_t>batch_length + LOG_OVERHEAD
        if pos + size > total:
            w.truncated = True
            break
        last_delta = ferry_be32(buf + pos + LAST_OFFSET_DELTA_POS)
        nxt = base + last_delta + 1
        if nxt <= w.next_offset:
            w.skipped += 1  # already copied (the fetch started inside or before it)
            pos += size
            continue
        attrs = <int16_t>((buf[pos + ATTRIBUTES_POS] << 8) | buf[pos + ATTRIBUTES_POS + 1])
        count = ferry_be32(buf + pos + COUNT_POS)
        eligible = size < max_source and not attrs & TIMESTAMP_TYPE_MASK and count == last_delta + 1
        if not (defer_run_crcs and eligible and count > 0 and not attrs & (CONTROL_MASK | COMPRESSION_MASK)) and \
                ferry_crc32c_update(0, buf + pos + ATTRIBUTES_POS, <size_t>(size - ATTRIBUTES_POS)) != \
                <uint32_t>ferry_be32(buf + pos + CRC_POS):
            break  # the Python loop raises CorruptBatchError here
        if attrs & CONTROL_MASK or count == 0:
            w.next_offset = nxt
            w.skipped += 1
            pos += size
            continue
        if stamp:
            b = buf + w.used
            if b != buf + pos:
                memmove(b, buf + pos, <size_t>size)
            _put64(b + BASE_OFFSET_POS, 0)
            _put32(b + LEADER_EPOCH_POS, <uint32_t>0xFFFFFFFF)
            b[ATTRIBUTES_POS + 1] = <uint8_t>(b[ATTRIBUTES_POS + 1] & ~TRANSACTIONAL_MASK)
            _put64(b + PRODUCER_ID_POS, <uint64_t>producer_id)
            b[PRODUCER_EPOCH_POS] = <uint8_t>((base >> 31) >> 8)
            b[PRODUCER_EPOCH_POS + 1] = <uint8_t>(base >> 31)
            _put32(b + BASE_SEQUENCE_POS, <uint32_t>(base & 0x7FFFFFFF))
            _put32(b + CRC_POS, ferry_crc32c_update(0, b + ATTRIBUTES_POS, <size_t>(size - ATTRIBUTES_POS)))
            w.used += size
        else:
            kept[w.kept].resume = w.next_offset
            kept[w.kept].pos = pos
            kept[w.kept].size = size
            kept[w.kept].codec = attrs & COMPRESSION_MASK
            kept[w.kept].eligible = eligible
            w.kept += 1
        w.messages += count
        w.next_offset = nxt
        pos += size
    w.pos = pos


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
    cdef Walk w
    w.pos, w.next_offset, w.messages, w.used, w.kept, w.skipped, w.truncated = pos, next_offset, 0, 0, 0, 0, False
    cdef Kept* kept = NULL
    cdef Py_ssize_t i, run_bytes = 0
    cdef Kept k
    cdef int run_codec = 0
    cdef list items = [], run = []
    try:
        kept = <Kept*>malloc(sizeof(Kept) * <size_t>(max(view.len - pos, 0) // HEADER + 1))
        if kept == NULL:
            raise MemoryError()
        with nogil:
            _walk(<uint8_t*>view.buf, view.len, &w, max_source, defer_run_crcs and coalesce_bytes > 0, False, 0, kept)
        for i in range(w.kept):
            k = kept[i]
            if coalesce_bytes <= 0:
                items.append((k.resume, k.pos, k.size))
                continue
            if run and (not k.eligible or run_bytes + k.size > coalesce_bytes or run_codec != k.codec):
                items.append(run)
                run, run_bytes = [], 0
            if k.eligible:
                if not run:
                    run_codec = k.codec
                run.append((k.resume, k.pos, k.size))
                run_bytes += k.size
            else:
                items.append((k.resume, k.pos, k.size))
        if run:
            items.append(run)
    finally:
        free(kept)
        PyBuffer_Release(&view)
    return items, w.pos, w.next_offset, w.skipped, w.truncated


def stamp_positions(data, int64_t next_offset, int64_t producer_id):
    """The embedded mirror's whole walk of one fetched answer (no aborted transactions in it), in place.

    ``data`` must be writable: each batch is checked (framing, magic, CRC-32C of the source bytes), passed over
    if it ends below ``next_offset``, is a control batch or is empty, else moved down over what was passed over
    and re-stamped (_walk). No second buffer: the answer's own bytes become what is appended.

    Returns (used, messages, next_offset, pos, truncated): ``data``'s first ``used`` bytes are the re-stamped
    batches, ``messages`` the records in them, then the live offset after everything walked, where the walk
    stopped and whether the bytes ended inside a batch. ``pos`` short of the end without ``truncated``: the batch
    there is not valid and untouched (the caller raises, from the Python walk's checks)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
    cdef Walk w
    w.pos, w.next_offset, w.messages, w.used, w.kept, w.skipped, w.truncated = 0, next_offset, 0, 0, 0, 0, False
    try:
        with nogil:
            _walk(<uint8_t*>view.buf, view.len, &w, 0, False, True, producer_id, NULL)
    finally:
        PyBuffer_Release(&view)
    return w.used, w.messages, w.next_offset, w.pos, w.truncated

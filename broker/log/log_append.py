"""Writing batches to a segment file (LogSegment's writers; log_appender.py decides what to write).

``write_batches`` and ``write_run`` are the native writers (broker/log/_append_native.pyx, the native part
``append``) when it is built, else ``write_batches_py`` and ``write_run_py``, their pure-Python twins: the same
bytes at the same place (tests compare the files). ``FERRY_NATIVE_DISABLE=append`` forces the Python one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ferry.wire import native
from ferry.wire.record.record_batch import BASE_OFFSET_STRUCT, EPOCH_PREFIX_STRUCT

try:
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError, AttributeError):
    _IOV_MAX = 1024


def pwrite_all(fd: int, pieces: list, position: int) -> None:
    """Write every buffer in ``pieces`` (bytes or byte-format memoryviews) at ``position`` with as few
    pwritev() calls as possible: usually one, which writes everything."""
    if len(pieces) <= _IOV_MAX:
        total = 0
        for p in pieces:
            total += len(p)
        written = os.pwritev(fd, pieces, position)
        if written == total:
            return
    views = [memoryview(p).cast("B") for p in pieces]
    i = 0
    while i < len(views):
        chunk = views[i : i + _IOV_MAX]
        written = os.pwritev(fd, chunk, position)
        position += written
        # drop what was fully written, keep the unwritten rest of a partially written buffer
        while written and i < len(views):
            n = len(views[i])
            if written >= n:
                written -= n
                i += 1
            else:
                views[i] = views[i][written:]
                written = 0
        while i < len(views) and len(views[i]) == 0:
            i += 1


def write_batches_py(fd: int, items: list, leader_epoch: int, position: int) -> None:
    """Write the batches ``items`` — (buffer, position in it, size, baseOffset, batchLength) each — one after the
    other at ``position`` of ``fd``, each with its baseOffset (and partitionLeaderEpoch ``leader_epoch`` when
    >= 0): all of it or OSError. At most 512 batches."""
    if len(items) > 512:
        raise ValueError(f"{len(items)} batches in one write; at most 512")
    pieces: list = []
    for buf, pos, size, offset, batch_length in items:
        mv = memoryview(buf)
        n = 16 if leader_epoch >= 0 else 8
        if pos < 0 or pos + size > len(mv) or size < n:
            raise ValueError(f"batch of {size} bytes at {pos} is outside the {len(mv)}-byte buffer")
        if leader_epoch >= 0:
            pieces += (EPOCH_PREFIX_STRUCT.pack(offset, batch_length, leader_epoch), mv[pos + 16:pos + size])
        else:
            pieces += (BASE_OFFSET_STRUCT.pack(offset), mv[pos + 8:pos + size])
    if pieces:
        pwrite_all(fd, pieces, position)


def write_run_py(fd: int, buf: bytes | bytearray | memoryview, first_offset: int, leader_epoch: int,
                 position: int) -> int:
    """The whole buffer ``buf`` of consecutive batches written at ``position`` of ``fd``, each with its baseOffset
    from ``first_offset`` on (and partitionLeaderEpoch ``leader_epoch`` when >= 0), ``buf`` unchanged; the next
    offset. ValueError (nothing written) for a buffer that is not whole batches."""
    mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
    pieces: list = []
    pos, offset = 0, first_offset
    while pos < len(mv):
        if len(mv) - pos < 27:
            raise ValueError(f"the buffer is not whole record batches (at byte {pos})")
        batch_length = int.from_bytes(mv[pos + 8:pos + 12], "big", signed=True)
        size = batch_length + 12
        if size < 27 or size > len(mv) - pos:
            raise ValueError(f"the buffer is not whole record batches (at byte {pos})")
        if leader_epoch >= 0:
            pieces += (EPOCH_PREFIX_STRUCT.pack(offset, batch_length, leader_epoch), mv[pos + 16:pos + size])
        else:
            pieces += (BASE_OFFSET_STRUCT.pack(offset), mv[pos + 8:pos + size])
        offset += int.from_bytes(mv[pos + 23:pos + 27], "big", signed=True) + 1
        pos += size
    if pieces:
        pwrite_all(fd, pieces, position)
    return offset


BatchWriter = Callable[[int, list, int, int], None]
_append_part = native.load("append")  # None: not built, or switched off (FERRY_NATIVE_DISABLE=append)
native_write_batches: BatchWriter | None = _append_part.write_batches if _append_part is not None else None
write_batches: BatchWriter = native_write_batches if native_write_batches is not None else write_batches_py
RunWriter = Callable[[int, bytes | bytearray | memoryview, int, int, int], int]
native_write_run: RunWriter | None = _append_part.write_run if _append_part is not None else None
write_run: RunWriter = native_write_run if native_write_run is not None else write_run_py

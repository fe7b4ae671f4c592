"""A partition's segments on disk (Kafka 3.x's LocalLog): the ordered list of segment files, rolled, read,
cut and deleted. Offsets, producer state and epochs are the Log's; this class only knows files.

Reads find the segment by binary search on base offsets, then the batch through the segment's sparse offset
index. Segments leaving the log (retention, truncation, DeleteRecords) are renamed ``*.deleted`` at once and
closed ``file.delete.delay.ms`` later, so that a sendfile in flight still reads them.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ferry.broker.log.log_segment import LogSegment
from ferry.wire.atomic_file import fsync_dir
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import StorageError

logger = logging.getLogger("ferry.log")


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """Whole batches in one segment file, for ``os.sendfile(sock, fd, position, size)``.

    The fd belongs to the log: do not close it. It stays valid at least
    ``file_delete_delay_ms`` after retention removes the segment.
    """

    fd: int
    position: int
    size: int
    first_offset: int  # base offset of the first batch (may be below the offset asked for)

    def read_bytes(self) -> bytes:
        """The slice's bytes (for tests and callers that cannot sendfile)."""
        return os.pread(self.fd, self.size, self.position)


class LocalLog:
    """The segment list of one partition directory. Callers hold the Log's lock."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment], dir_dirty: bool) -> None:
        self.dir = directory
        self.name = directory.name
        self.config = config
        self.segments = segments  # replaced, never changed in place: a copy taken under the lock stays valid
        self.bases = [s.base_offset for s in segments]
        self.dir_dirty = dir_dirty  # a segment file was created or renamed since the directory's last fsync
        self._pending_deletes: list[tuple[int, LogSegment]] = []

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for s in self.segments:
            s.indexes.index_interval_bytes = config.index_interval_bytes

    # -- writing -------------------------------------------------------------------------------------

    def roll(self, end_offset: int, now: int) -> LogSegment:
        """Start a new active segment at ``end_offset`` (the log end)."""
        self.segments[-1].on_become_inactive()
        new = LogSegment(self.dir, end_offset, self.config, now)
        if new.size:
            new.close()
            raise StorageError(f"{new.log_path} already exists with {new.size} bytes; refusing to roll onto it")
        new.on_become_active()
        self.segments = self.segments + [new]
        self.bases = self.bases + [new.base_offset]
        self.dir_dirty = True
        logger.debug("%s: rolled segment %d", self.name, new.base_offset)
        return new

    def segments_from(self, offset: int) -> list[LogSegment]:
        """The segments holding ``offset`` and later ones (what a flush from ``offset`` must fsync)."""
        return self.segments[max(0, bisect.bisect_right(self.bases, offset) - 1):]

    def fsync_dir(self) -> None:
        fsync_dir(self.dir)

    # -- reading -------------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, bound: int) -> FetchSlice | None:
        """Whole batches from the one containing ``offset``, ending before ``bound``, at most ``max_bytes``
        unless the first batch alone is larger; None when there is nothing below ``bound``."""
        i = max(0, bisect.bisect_right(self.bases, offset) - 1)
        segments = self.segments
        while i < len(segments):
            seg = segments[i]
            if seg.base_offset >= bound:
                return None
            found = seg.find_batch(offset)
            if found is None:
                i += 1
                continue
            pos, h = found
            if h.next_offset > bound:
                return None
            if bound >= seg.next_offset:
                end = seg.size
            else:
                bound_batch = seg.find_batch(bound)
                end = bound_batch[0] if bound_batch is not None else seg.size
            if end - pos > max_bytes:
                end = max(pos + h.size, seg.boundary_before(pos + max(max_bytes, 0), pos))
            return FetchSlice(seg.fd, pos, end - pos, h.base_offset)
        return None

    def offset_for_timestamp(self, timestamp_ms: int, bound: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch with max_timestamp >= ``timestamp_ms`` below ``bound``."""
        for seg in self.segments:
            if seg.base_offset >= bound:
                return None
            if seg.max_timestamp >= timestamp_ms:
                return seg.find_timestamp(timestamp_ms, bound)
        return None

    def max_timestamp_offset(self, bound: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the batch holding the largest timestamp below ``bound`` (the first such
        batch on a tie), from each segment's kept maximum: ListOffsets' MAX_TIMESTAMP (-3, KIP-734)."""
        best: tuple[int, int] | None = None
        for seg in self.segments:
            if seg.base_offset >= bound:
                break
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best[1]):
                best = seg.find_timestamp(seg.max_timestamp, bound) or best
        return best

    # -- removing ------------------------------------------------------------------------------------

    def retire_first(self, n: int, now: int) -> None:
        """Take the ``n`` oldest segments out of the log (renamed ``*.deleted``, closed later)."""
        doomed = self.segments[:n]
        self.segments = self.segments[n:]
        self.bases = self.bases[n:]
        self._retire(doomed, now)

    def retire_below(self, offset: int, now: int) -> None:
        """Take out every whole segment below ``offset``; the active one stays."""
        n = 0
        while n < len(self.segments) - 1 and self.segments[n].next_offset <= offset:
            n += 1
        if n:
            self.retire_first(n, now)

    def retire(self, doomed: list[LogSegment], now: int) -> None:
        """Retire segments already taken out of ``segments`` (the cleaner's swap replaced them)."""
        self._retire(doomed, now)

    def _retire(self, doomed: list[LogSegment], now: int) -> None:
        """Rename now (an OSError propagates: the caller takes the log offline), close and delete later."""
        self._pending_deletes.extend((now + self.config.file_delete_delay_ms, seg) for seg in doomed)
        for seg in doomed:
            seg.mark_deleted()

    def delete_pending(self, now: int | None) -> None:
        """Delete the retired segments whose delay is over (all of them when ``now`` is None)."""
        keep = []
        for deadline, seg in self._pending_deletes:
            if now is None or deadline <= now:
                seg.delete()
            else:
                keep.append((deadline, seg))
        self._pending_deletes = keep

    def truncate_to(self, offset: int, now: int) -> tuple[int, int, int]:
        """Remove every batch at or after ``offset`` (whole batches; ``offset`` at least the first segment's
        base); the cut is fsync'd. Returns (the new end, bytes removed, segments removed)."""
        segments = self.segments
        i = bisect.bisect_right(self.bases, offset) - 1
        seg = segments[i]
        found = seg.find_batch(offset)
        end = found[1].base_offset if found is not None else seg.next_offset
        old_active = segments[-1]
        removed = 0
        if end == seg.base_offset and i > 0:
            keep, doomed = segments[:i], segments[i:]
        else:
            keep, doomed = segments[: i + 1], segments[i + 1 :]
            removed = seg.truncate_to(end)
        removed += sum(d.size for d in doomed)
        self.segments = keep
        self.bases = [s.base_offset for s in keep]
        self._retire(doomed, now)
        active = keep[-1]
        if active is not old_active:
            active.on_become_active()
        active.flush()  # the cut is durable: a power loss must not bring the removed batches back
        if doomed:
            self.fsync_dir()
        return end, removed, len(doomed)

    def restart_at(self, offset: int, now: int) -> int:
        """Retire every segment and start an empty one at ``offset``; returns how many were removed."""
        old = self.segments
        self._retire(old, now)
        new = LogSegment(self.dir, offset, self.config, now)
        new.on_become_active()
        self.segments = [new]
        self.bases = [offset]
        self.fsync_dir()
        return len(old)

    # -- closing -------------------------------------------------------------------------------------

    def flush_all(self) -> None:
        """Before a close: trim the active segment's indexes and fsync every file (OSError propagates)."""
        self.segments[-1].on_become_inactive()
        for seg in self.segments:
            seg.flush()

    def close_files(self) -> None:
        for seg in self.segments:
            seg.close()
        self.delete_pending(None)

    def close_without_writing(self) -> None:
        """Close the files of an offline log without writing anything (no flush, no index trim: the directory is
        not to be trusted; the next open recovers)."""
        for seg in self.segments + [s for _, s in self._pending_deletes]:
            try:
                seg.close()
            except OSError:
                pass
        self._pending_deletes = []

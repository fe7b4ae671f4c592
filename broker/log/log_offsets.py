"""A partition log's offsets and the order they keep: start <= high watermark <= end, flushed <= end."""

from __future__ import annotations


class LogOffsets:
    """log_start_offset, log_end_offset, flushed_offset (the recovery point) and the replication high
    watermark, with the clamps that keep them consistent (Kafka's UnifiedLog keeps the same four).

    Plain attributes: the append and fetch paths read them for every request. The owner's lock guards them.
    """

    __slots__ = ("start", "end", "flushed", "replication_hw", "see_unflushed")

    def __init__(self, start: int, end: int, see_unflushed: bool) -> None:
        self.start = start
        self.end = end
        self.flushed = end
        # None: unreplicated, no bound beyond flushing (see high_watermark); set by replication
        self.replication_hw: int | None = None
        self.see_unflushed = see_unflushed  # consumers.see.unflushed of the log's config

    @property
    def high_watermark(self) -> int:
        """The end of what a fetch may read (exclusive): flushed data (or all appended data with
        consumers.see.unflushed), and no further than the replication high watermark when there is one."""
        end = self.end if self.see_unflushed else self.flushed
        hw = self.replication_hw
        return end if hw is None or hw > end else hw

    def set_replication_hw(self, value: int | None) -> None:
        """Clamped to [start, end]; None removes the bound (an unreplicated log)."""
        self.replication_hw = None if value is None else min(max(value, self.start), self.end)

    def advance_start(self, offset: int) -> None:
        """Records below ``offset`` are gone (retention, DeleteRecords): a high watermark is never below the start."""
        self.start = max(self.start, offset)
        if self.replication_hw is not None and self.replication_hw < self.start:
            self.replication_hw = self.start

    def truncate_to(self, end: int) -> None:
        """After a truncation to ``end``: nothing may pass it."""
        self.end = end
        self.flushed = min(self.flushed, end)
        if self.replication_hw is not None:
            self.replication_hw = min(max(self.replication_hw, self.start), end)

    def restart_at(self, offset: int) -> None:
        """An emptied log that restarts at ``offset``."""
        self.start = offset
        self.truncate_to(offset)

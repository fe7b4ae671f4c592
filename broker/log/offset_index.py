"""Sparse offset index: (offset relative to the segment base u32, file position u32), every
``index_interval_bytes`` of log. A lookup is a binary search here, then a short header scan in
the log file from the position found."""

from __future__ import annotations

import struct

from ferry.broker.log.abstract_index import AbstractIndex

MAX_RELATIVE_OFFSET = 0x7FFFFFFF  # relative offsets must fit the index's u32 (Kafka keeps them < 2^31)


class OffsetIndex(AbstractIndex):
    ENTRY = struct.Struct(">II")
    WARM_ENTRIES = 256  # 2 KB: ~1 MB of log at the default index.interval.bytes, where consumers read

    def append(self, offset: int, position: int) -> None:
        """Index the batch whose base offset is ``offset`` at byte ``position``."""
        rel = offset - self.base_offset
        if self.entries:
            last_rel, last_pos = self.entry(self.entries - 1)
            if rel <= last_rel or position < last_pos:
                raise ValueError(
                    f"offset index {self.path}: entry ({offset}, {position}) does not follow "
                    f"({self.base_offset + last_rel}, {last_pos})"
                )
        self._append_raw(rel, position)

    def append_many(self, due: list[tuple[int, ...]]) -> None:
        """append() of each (offset, position, ...) in ``due`` (ascending), packed together; what does not fit
        a full index is left out (as SegmentIndexes leaves out an entry of a full index). Checked like
        append(), before any of them is added."""
        room = self.max_entries - self.entries
        if room <= 0:
            return
        base = self.base_offset
        last_rel, last_pos = self.entry(self.entries - 1) if self.entries else (-1, -1)
        pack = self.ENTRY.pack
        packed = []
        for entry in due[:room]:
            offset, position = entry[0], entry[1]
            rel = offset - base
            if rel <= last_rel or position < last_pos:
                raise ValueError(f"offset index {self.path}: entry ({offset}, {position}) does not follow "
                                 f"({base + last_rel}, {last_pos})")
            packed.append(pack(rel, position))
            last_rel, last_pos = rel, position
        self._extend(b"".join(packed), len(packed))

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``offset``; (base, 0) if none."""
        i = self._search(0, offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self.entry(i)
        return self.base_offset + rel, pos

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose position is <= ``position``; (base, 0) if none."""
        i = self._search(1, position)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self.entry(i)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets >= ``offset`` (the log was truncated there)."""
        self._truncate_below(0, offset - self.base_offset)

    def last_entry(self) -> tuple[int, int]:
        if not self.entries:
            return self.base_offset, 0
        rel, pos = self.entry(self.entries - 1)
        return self.base_offset + rel, pos

    def sanity_check(self, log_size: int) -> str | None:
        """A reason the index cannot be trusted, or None."""
        problem = self._entries_problem("relative offset")
        if problem is None and self.entries:
            _, last_pos = self.entry(self.entries - 1)
            if last_pos >= log_size:
                problem = f"last entry position {last_pos} is beyond the log size {log_size}"
        return problem

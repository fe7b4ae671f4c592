"""Sparse time index: (largest timestamp so far int64, relative offset u32 of the batch that
carried it). Timestamps only grow along the index, so "first batch with max_timestamp >= T" is a
binary search for the last entry below T followed by a short scan."""

from __future__ import annotations

import struct

from ferry.broker.log.abstract_index import AbstractIndex


class TimeIndex(AbstractIndex):
    ENTRY = struct.Struct(">qI")
    WARM_ENTRIES = 8  # lookups by time are rare; appends need only the last entry

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base) if empty."""
        if not self.entries:
            return -1, self.base_offset
        ts, rel = self.entry(self.entries - 1)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Drop the entries pointing at offsets >= ``offset`` (the log was truncated there)."""
        self._truncate_below(1, offset - self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        if self.entries:
            last_ts, last_rel = self.entry(self.entries - 1)
            if timestamp <= last_ts:
                return False
            if offset - self.base_offset < last_rel:
                raise ValueError(f"time index {self.path}: offset {offset} goes backwards")
        if self.is_full:
            return False
        self._append_raw(timestamp, offset - self.base_offset)
        return True

    def maybe_append_many(self, due: list[tuple[int, ...]]) -> None:
        """maybe_append() of each (..., timestamp, offset) in ``due`` (the last two fields), in order, packed
        together: the same entries, the same checks, before any of them is added."""
        base = self.base_offset
        last_ts, last_rel = self.entry(self.entries - 1) if self.entries else (None, -1)
        room = self.max_entries - self.entries
        pack = self.ENTRY.pack
        packed = []
        for entry in due:
            timestamp, rel = entry[-2], entry[-1] - base
            if last_ts is not None and timestamp <= last_ts:
                continue
            if rel < last_rel:
                raise ValueError(f"time index {self.path}: offset {entry[-1]} goes backwards")
            if len(packed) >= room:
                break
            packed.append(pack(timestamp, rel))
            last_ts, last_rel = timestamp, rel
        if packed:
            self._extend(b"".join(packed), len(packed))

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= ``timestamp``; (-1, base) if none.

        Every batch before that offset has max_timestamp <= the entry's, so a search for the
        first batch reaching ``timestamp`` can start at that offset.
        """
        i = self._search(0, timestamp)
        if i < 0:
            return -1, self.base_offset
        ts, rel = self.entry(i)
        return ts, self.base_offset + rel

    def sanity_check(self, max_offset: int) -> str | None:
        """A reason the index cannot be trusted, or None."""
        problem = self._entries_problem("timestamp")
        if problem is None and self.entries:
            last_offset = self.base_offset + self.entry(self.entries - 1)[1]
            if last_offset > max_offset:
                problem = f"last entry offset {last_offset} is beyond the segment's last offset {max_offset}"
        return problem

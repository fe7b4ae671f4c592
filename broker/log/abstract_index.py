"""A memory-mapped file of fixed-size entries, shared by the offset and time indexes.

The active segment's index is preallocated to ``max_index_bytes`` and mapped, so appending an
entry is a ``pack_into`` on page-cache memory; when the segment rolls the file is trimmed to
its entries. The mapping lives in the OS page cache (paper 3.1), not in the broker's heap, so
memory stays flat however many segments there are.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path


class AbstractIndex:
    ENTRY: struct.Struct  # set by subclasses

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._mm: mmap.mmap | None = None
        self._file_size = 0
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._file_size = os.fstat(fd).st_size
            self._map(fd)
        finally:
            os.close(fd)
        # A trimmed (inactive, or cleanly closed) index: every slot is an entry. A preallocated
        # one left by a crash is caught by sanity_check() or rebuilt by recovery.
        self.entries = self._file_size // self.entry_size

    # -- mapping ---------------------------------------------------------------------------------

    def _map(self, fd: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._file_size > 0:
            self._mm = mmap.mmap(fd, self._file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def resize(self, size: int) -> None:
        """Grow (preallocate, sparse) or shrink the file to ``size`` bytes, whole entries only."""
        size -= size % self.entry_size
        size = max(size, self.entries * self.entry_size)
        if size == self._file_size:
            return
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, size)
            self._file_size = size
            self._map(fd)
        finally:
            os.close(fd)

    def make_writable(self) -> None:
        """Preallocate room for max_entries (the segment becomes the active one)."""
        self.resize(self.max_entries * self.entry_size)

    def trim(self) -> None:
        """Shrink the file to its entries (the segment stops being active, or closes)."""
        self.resize(self.entries * self.entry_size)

    # -- entries ---------------------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def entry(self, i: int) -> tuple[int, ...]:
        assert self._mm is not None
        return self.ENTRY.unpack_from(self._mm, i * self.entry_size)

    def _append_raw(self, *values: int) -> None:
        if self.entries >= self.max_entries:
            raise IndexError(f"index {self.path} is full ({self.entries} entries)")
        if (self.entries + 1) * self.entry_size > self._file_size:
            self.make_writable()
        assert self._mm is not None
        self.ENTRY.pack_into(self._mm, self.entries * self.entry_size, *values)
        self.entries += 1

    def reset(self) -> None:
        self.entries = 0

    def _truncate_below(self, key_index: int, limit: int) -> None:
        """Keep only the entries whose field ``key_index`` is < ``limit`` (fields ascend); the slots of the
        dropped ones are zeroed so that a preallocated file never shows them again."""
        keep = self._search(key_index, limit - 1) + 1
        if keep >= self.entries:
            return
        if self._mm is not None:
            start, end = keep * self.entry_size, self.entries * self.entry_size
            self._mm[start:end] = bytes(end - start)
        self.entries = keep

    def _search(self, key_index: int, target: int) -> int:
        """Index of the last entry whose field ``key_index`` is <= target, or -1 (fields ascend)."""
        lo, hi = 0, self.entries - 1
        found = -1
        mm = self._mm
        unpack = self.ENTRY.unpack_from
        size = self.entry_size
        while lo <= hi:
            mid = (lo + hi) >> 1
            if unpack(mm, mid * size)[key_index] <= target:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    # -- lifecycle -------------------------------------------------------------------------------

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = Path(path)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

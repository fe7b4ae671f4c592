"""A memory-mapped file of fixed-size entries, shared by the offset and time indexes.

The active segment's index is preallocated to ``max_index_bytes`` and mapped, so appending an
entry is a ``pack_into`` on page-cache memory; when the segment rolls the file is trimmed to
its entries. The mapping lives in the OS page cache (paper 3.1), not in the broker's heap, so
memory stays flat however many segments there are.

The preallocated file is sparse, and storing into a page of a hole makes the kernel find a block
for it: on a full filesystem it cannot, and the process gets SIGBUS (the broker dies, no error
to answer with). So no entry is ever written through the map into a hole: the blocks ahead of
the entries are allocated for real with ``posix_fallocate``, ``ALLOCATION_CHUNK`` bytes at a time,
before anything is stored there (``reserve``, called by the segment before it writes a batch).
An allocation that fails is an ordinary OSError (ENOSPC) raised before the batch is written,
which the log turns into a storage error. Allocating chunk by chunk, not the whole
``max_index_bytes``, keeps the files as cheap as sparse ones (tmpfs would spend memory on it).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

ALLOCATION_CHUNK = 16 * 1024  # index bytes given real blocks at a time (2048 offset-index entries)


class AbstractIndex:
    ENTRY: struct.Struct  # set by subclasses

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._mm: mmap.mmap | None = None
        self._file_size = 0
        self._allocated = 0  # bytes from the start known to have real blocks: safe to store into via the map
        self.allocated_entries = 0  # the same in entries (the segment's cheap check before each append)
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
            self._allocated = min(self._allocated, size)
            self.allocated_entries = self._allocated // self.entry_size
            self._map(fd)
        finally:
            os.close(fd)

    def reserve(self, count: int) -> None:
        """Give real blocks to the room of the next ``count`` entries (at most up to max_entries), so that
        storing them through the map cannot fault; OSError (ENOSPC ...) when the filesystem has none."""
        need = min(self.entries + count, self.max_entries) * self.entry_size
        if need > self._allocated:
            self._allocate(need)

    def _allocate(self, need: int) -> None:
        if need > self._file_size:
            self.make_writable()
        end = min(self._file_size, -(-need // ALLOCATION_CHUNK) * ALLOCATION_CHUNK)
        if end <= self._allocated:
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, self._allocated, end - self._allocated)
        finally:
            os.close(fd)
        self._allocated = end
        self.allocated_entries = end // self.entry_size

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
        if (self.entries + 1) * self.entry_size > self._allocated:
            self._allocate((self.entries + 1) * self.entry_size)  # never store into a hole: see the module
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
            # pwrite, not the map: should the slots be a hole after all, a full disk is ENOSPC, not SIGBUS
            start, end = keep * self.entry_size, self.entries * self.entry_size
            fd = os.open(self.path, os.O_RDWR)
            try:
                os.pwrite(fd, bytes(end - start), start)
            finally:
                os.close(fd)
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

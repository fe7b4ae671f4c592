"""A file of fixed-size entries, shared by the offset and time indexes: entries appended in memory and written
in bulk, lookups near the end answered from memory, the rest read with ``pread``.

The file always holds whole entries and nothing else (the format Kafka trims its indexes to): no
preallocation, no memory map, no file descriptor kept open. An index costs the broker a few KB of memory
however many segments and partitions there are, and nothing in the kernel while idle.

Why not a memory map, as Kafka does: a map of a preallocated (sparse) file costs a page fault on every new
page, and a fault reads ahead over the holes (zero-filling up to ``read_ahead_kb`` of page cache per fault:
8 MB per index on the reference machine, 89% of the broker's time at 1000 partitions, bench/RESULTS.md);
Python's ``mmap`` keeps a duplicate of the file descriptor for as long as the map lives (two per segment:
10,000 partitions would need 30,000 open files); and storing through a map into a hole of a full
filesystem is SIGBUS, not an error (tests/broker/test_log_dir_failure.py).

Writes: ``append`` packs the entry into the memory tail; the entries not yet in the file are written with
one ``pwrite`` when ``WRITE_BATCH`` of them are pending (the segment does it *before* it writes the next batch,
so a full disk fails that append with nothing written), when the segment stops being active (``trim``), and
when it is flushed. A crash loses at most the pending entries: an index is derived data, and opening the
log finds an index shorter than its segment (the scan from its last entry covers the rest) or rebuilds it
(segments past the recovery point are recovered anyway; a damaged index fails ``sanity_check``).

Reads: the newest ``WARM_ENTRIES`` entries stay in memory (Kafka's "warm section": consumers and followers
read near the end); a lookup below them is a binary search with ``pread`` on the file (a few small reads,
then one read of the last 4 KB window).
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

WRITE_BATCH = 128  # pending entries written together (one pwrite)
_WINDOW_BYTES = 4096  # a file search reads the last window this wide at once


class AbstractIndex:
    ENTRY: struct.Struct  # set by subclasses
    WARM_ENTRIES = 256  # newest entries kept in memory after a write (subclasses tune it)

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._file_size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        # Every slot of the file is an entry; a file that is not whole entries fails sanity_check().
        self.entries = self._file_size // self.entry_size
        self.written = self.entries  # entries [0, written) are in the file
        self._mem = bytearray()  # entries [_mem_start, entries), packed
        self._mem_start = self.entries
        self._unsynced = False  # written since the last fsync

    # -- entries ---------------------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def backlog(self) -> bool:
        """Enough entries wait in memory that they should be written before the segment's next batch."""
        return self.entries - self.written >= WRITE_BATCH

    def _entries_problem(self, key: str) -> str | None:
        """Why the entries cannot be trusted (a partial entry, keys not increasing), or None; the subclass's
        sanity_check adds its own bound on the last entry."""
        if self._file_size % self.entry_size:
            return f"size {self._file_size} is not a multiple of {self.entry_size}"
        if self.entries > 1:
            first, last = self.entry(0)[0], self.entry(self.entries - 1)[0]
            if last <= first:
                return f"last {key} {last} is not after the first {first}"
        return None

    def entry(self, i: int) -> tuple[int, ...]:
        j = i - self._mem_start
        if j >= 0:
            return self.ENTRY.unpack_from(self._mem, j * self.entry_size)
        return self.ENTRY.unpack(self._read(i * self.entry_size, self.entry_size))

    def _append_raw(self, *values: int) -> None:
        if self.entries >= self.max_entries:
            raise IndexError(f"index {self.path} is full ({self.entries} entries)")
        self._mem += self.ENTRY.pack(*values)
        self.entries += 1

    def _extend(self, packed: bytes, count: int) -> None:
        """``count`` entries packed in order, which the subclass checked and fitted to the room left."""
        self._mem += packed
        self.entries += count

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds the index); the file is emptied now."""
        os.truncate(self.path, 0)
        self._file_size = 0
        self.entries = self.written = self._mem_start = 0
        self._mem = bytearray()

    def _truncate_below(self, key_index: int, limit: int) -> None:
        """Keep only the entries whose field ``key_index`` is < ``limit`` (fields ascend)."""
        keep = self._search(key_index, limit - 1) + 1
        if keep >= self.entries:
            return
        if keep < self.written:
            os.truncate(self.path, keep * self.entry_size)  # shrinking needs no space: never ENOSPC
            self._file_size = keep * self.entry_size
            self.written = keep
            self._unsynced = True
        if keep >= self._mem_start:
            del self._mem[(keep - self._mem_start) * self.entry_size:]
        else:
            self._mem = bytearray()
            self._mem_start = keep
        self.entries = keep

    def _search(self, key_index: int, target: int) -> int:
        """Index of the last entry whose field ``key_index`` is <= target, or -1 (fields ascend)."""
        n = self.entries
        start = self._mem_start
        size = self.entry_size
        unpack = self.ENTRY.unpack_from
        if start < n:
            mem = self._mem
            if unpack(mem, 0)[key_index] <= target:  # in the warm tail: no file access
                lo, hi = 1, n - start - 1
                found = 0
                while lo <= hi:
                    mid = (lo + hi) >> 1
                    if unpack(mem, mid * size)[key_index] <= target:
                        found = mid
                        lo = mid + 1
                    else:
                        hi = mid - 1
                return start + found
        if start == 0:
            return -1
        return self._search_file(key_index, target, start)

    def _search_file(self, key_index: int, target: int, count: int) -> int:
        """The same over entries [0, count) of the file: single-entry reads down to a 4 KB window, then one read."""
        size = self.entry_size
        unpack = self.ENTRY.unpack_from
        window = max(1, _WINDOW_BYTES // size)
        found = -1
        lo, hi = 0, count - 1
        fd = os.open(self.path, os.O_RDONLY)
        try:
            while hi - lo + 1 > window:
                mid = (lo + hi) >> 1
                if unpack(self._pread(fd, mid * size, size), 0)[key_index] <= target:
                    found = mid
                    lo = mid + 1
                else:
                    hi = mid - 1
            if lo <= hi:
                data = self._pread(fd, lo * size, (hi - lo + 1) * size)
                base = lo
                lo, hi = 0, hi - lo
                while lo <= hi:
                    mid = (lo + hi) >> 1
                    if unpack(data, mid * size)[key_index] <= target:
                        found = base + mid
                        lo = mid + 1
                    else:
                        hi = mid - 1
        finally:
            os.close(fd)
        return found

    def _read(self, position: int, size: int) -> bytes:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return self._pread(fd, position, size)
        finally:
            os.close(fd)

    def _pread(self, fd: int, position: int, size: int) -> bytes:
        data = os.pread(fd, size, position)
        if len(data) < size:
            raise OSError(errno.EIO, f"index {self.path} ends at {position + len(data)}, before its entries end "
                                     f"({position + size})")
        return data

    # -- writing ---------------------------------------------------------------------------------

    def write_pending(self) -> None:
        """Write the entries that are only in memory to the file (one pwrite), then keep just the warm tail
        in memory. OSError (ENOSPC ...) when the filesystem refuses: nothing is counted as written then."""
        size = self.entry_size
        if self.entries > self.written:
            data = bytes(self._mem[(self.written - self._mem_start) * size:])
            position = self.written * size
            fd = os.open(self.path, os.O_WRONLY)
            try:
                view = memoryview(data)
                while view:
                    n = os.pwrite(fd, view, position)
                    position += n
                    view = view[n:]
            finally:
                os.close(fd)
            self.written = self.entries
            self._file_size = max(self._file_size, position)
            self._unsynced = True
        keep = max(1, self.WARM_ENTRIES)
        if self.entries - self._mem_start > keep:
            drop = self.entries - keep - self._mem_start
            self._mem = self._mem[drop * size:]  # a new, right-sized buffer (del would keep the capacity)
            self._mem_start += drop

    def trim(self) -> None:
        """The segment stops being active (or closes cleanly): every entry goes to the file, which then holds
        exactly its entries."""
        self.write_pending()
        if self._file_size > self.entries * self.entry_size:  # a partial entry left by a crash
            os.truncate(self.path, self.entries * self.entry_size)
            self._file_size = self.entries * self.entry_size
            self._unsynced = True

    # -- lifecycle -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write pending entries and fsync the file (when anything was written since the last fsync)."""
        self.write_pending()
        if self._unsynced:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = Path(path)

    def close(self) -> None:
        """Nothing stays open; pending entries are dropped (as a crash would: ``trim`` or ``flush`` first)."""
        self._mem = bytearray()
        self._mem_start = self.entries = self.written

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

"""Helpers of the disk-failure tests: a real small tmpfs (a full filesystem without filling the machine's
disk) and a filler file that takes every free block of it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tmpfs(path: Path, size: str = "2m") -> None:
    """Mount a tmpfs of ``size`` at ``path`` (root only); pytest.skip with the reason when impossible."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the disk-full tests run on a real full filesystem)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {path}: {r.stderr.strip() or r.returncode}")


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "2m") -> Iterator[Path]:
    mount_tmpfs(path, size)
    try:
        yield path
    finally:
        unmount(path)


def fill(directory: Path, name: str = "filler") -> Path:
    """Write a file in ``directory`` until the filesystem has no block left; returns it (delete it to free
    the space)."""
    st = os.statvfs(directory)
    if st.f_blocks * st.f_frsize > 64 << 20:  # never fill a real disk: only the small tmpfs of these tests
        pytest.fail(f"refusing to fill {directory}: its filesystem is {st.f_blocks * st.f_frsize} bytes, "
                    "not the small tmpfs the test mounted")
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, bytes(chunk))
            except OSError:
                pass
    finally:
        os.close(fd)
    return path


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize

"""Helpers of the disk-failure tests: a real small tmpfs (a full filesystem without filling the machine's
disk), a filler file that takes every free block of it, and an fdatasync that fails on demand in a broker
process (a fault a tmpfs cannot produce)."""

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
        st = os.statvfs(path)
        if not os.path.ismount(path) or st.f_blocks * st.f_frsize > 64 << 20:  # tests fill it: never a real disk
            pytest.fail(f"{path} is not the small tmpfs just mounted")
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


# Loaded by a broker process through PYTHONPATH (``sitecustomize`` runs at interpreter start-up): from the
# moment the trigger file exists, every os.fdatasync fails with EIO, as a failing device's would. The fault
# lives in the test's file layer, not in the broker's code.
FAILING_FDATASYNC = """
import errno, os
_trigger = os.environ.get("FERRY_TEST_FDATASYNC_EIO_WHEN")
_real = os.fdatasync

def fdatasync(fd):
    if _trigger and os.path.exists(_trigger):
        raise OSError(errno.EIO, "Input/output error (injected)")
    return _real(fd)

os.fdatasync = fdatasync
"""


def failing_fdatasync_env(directory: Path, trigger: Path) -> dict[str, str]:
    """Environment for a broker whose fdatasync fails with EIO while ``trigger`` exists."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(FAILING_FDATASYNC)
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(directory) + (os.pathsep + path if path else ""),
            "FERRY_TEST_FDATASYNC_EIO_WHEN": str(trigger)}

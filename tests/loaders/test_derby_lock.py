"""The embedded Derby metastore's lock check: a lock let go within the wait is not an error (the JVM of a
load that has just ended releases it a moment after its Python process exits); one held past it is, in one
line. The lock is a real POSIX record lock on dbex.lck held by another process, as Derby's JVM holds it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.loaders.sql_metastore import MetastoreError, derby_in_use

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold(db: Path, seconds: float) -> subprocess.Popen:
    (db / "dbex.lck").touch()
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(db / "dbex.lck"), str(seconds)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_a_lock_released_within_the_wait_is_waited_for(tmp_path: Path) -> None:
    p = _hold(tmp_path, 1.0)
    try:
        t0 = time.monotonic()
        derby_in_use(tmp_path, wait_s=10.0)
        assert 0.5 < time.monotonic() - t0 < 9.0
    finally:
        p.kill()
        p.wait()


def test_a_lock_held_past_the_wait_is_a_one_line_error(tmp_path: Path) -> None:
    p = _hold(tmp_path, 30.0)
    try:
        t0 = time.monotonic()
        with pytest.raises(MetastoreError, match="in use by another process") as e:
            derby_in_use(tmp_path, wait_s=1.0)
        assert 1.0 <= time.monotonic() - t0 < 5.0 and "\n" not in str(e.value)
    finally:
        p.kill()
        p.wait()


def test_no_lock_file_means_not_in_use(tmp_path: Path) -> None:
    derby_in_use(tmp_path, wait_s=0.0)

"""No command leaves state in the working directory unless told to: the loads' state lives where --state-dir,
$FERRY_STATE_DIR or the per-user default says, and `ferry sql` without a warehouse says so in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def ferry(*args: str, cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("FERRY_STATE_DIR", "FERRY_METASTORE",
                                                                  "XDG_STATE_HOME")}
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**environ, "HOME": str(home), **env})


def test_sql_without_a_warehouse_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    p = ferry("sql", "-e", "SELECT 1", cwd=work, home=home)
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no warehouse at" in lines[0] and str(home / ".local/state/ferry") in lines[0], lines
    assert not any(work.iterdir()) and not (home / ".local/state/ferry").exists()


@pytest.mark.slow
def test_a_failed_load_leaves_nothing_in_the_working_directory(tmp_path: Path) -> None:
    work, home, state = tmp_path / "work", tmp_path / "home", tmp_path / "state"
    work.mkdir()
    p = ferry("load", "--zookeeper", "127.0.0.1:1/x", "--topics", "t", cwd=work, home=home)
    assert p.returncode != 0 and "Traceback" not in p.stderr and "cannot connect to ZooKeeper" in p.stderr
    assert not any(work.iterdir()), sorted(x.name for x in work.iterdir())
    # $FERRY_STATE_DIR decides where the state goes when --state-dir is not given (checked before anything runs:
    # one that cannot be made is named in the one line, and nothing is created anywhere)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = ferry("load", "--zookeeper", "127.0.0.1:1/x", "--topics", "t", cwd=work, home=home,
              FERRY_STATE_DIR=str(blocker / "state"))
    assert p.returncode == 1 and str(blocker / "state") in p.stderr and not any(work.iterdir()), p.stderr
    assert not state.exists() and not home.exists() or not any(home.rglob("ledger.json"))


def test_sql_on_an_empty_state_dir_is_one_line_without_spark(tmp_path: Path) -> None:
    """A state directory no load has used yet (it exists, it is empty): one line naming it, exit 1, and no
    embedded metastore made in it (spark-sql would create an empty one and fail with a Java stack trace)."""
    work, home, state = tmp_path / "work", tmp_path / "home", tmp_path / "state"
    work.mkdir()
    state.mkdir()
    p = ferry("sql", "-e", "SELECT 1", "--state-dir", str(state), cwd=work, home=home)
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ferry sql: error: no warehouse in {state}"), lines
    assert "run a load first" in lines[0] and "Exception" not in p.stderr
    assert not any(state.iterdir()) and not any(work.iterdir())

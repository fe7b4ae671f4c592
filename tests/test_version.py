"""`ferry version` / `ferry --version`: ferry's, Python's, Java's, Spark's and ZooKeeper's versions and every
native part on or off with its reason."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ferry import cli, version_cmd
from ferry.wire import native


def _rows(out: str) -> dict[str, str]:
    """'native crc32c   on' -> {'native crc32c': 'on'} (the columns are two or more spaces apart)."""
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())


@pytest.mark.parametrize("argv", [["version"], ["--version"]])
def test_versions_and_native_parts(argv: list[str], capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "append")
    try:
        assert cli.main(argv) == 0
    finally:
        monkeypatch.undo()
        native.load_all()
    rows = _rows(capsys.readouterr().out)
    assert rows["ferry"] == version_cmd.ferry_version() != ""
    assert rows["python"].startswith(platform.python_version())
    assert rows["java"] == version_cmd.java_version()
    assert rows["spark"] == version_cmd.spark_version()
    assert rows["zookeeper"] == version_cmd.zookeeper_version()
    assert rows["native append"] == "off (disabled by FERRY_NATIVE_DISABLE)"
    assert [k for k in rows if k.startswith("native ")] == [f"native {p}" for p in native.PARTS]


def test_detection_on_this_machine() -> None:
    """The test machine has Debian's JRE and zookeeper package and the warehouse extra (scripts/setup.sh)."""
    assert version_cmd.java_version()[:2].isdigit()
    assert version_cmd.zookeeper_version()[0].isdigit()
    assert version_cmd.spark_version()[0].isdigit()


def test_zookeeper_from_the_jar_name(tmp_path: Path) -> None:
    assert version_cmd.zookeeper_version(tmp_path) == version_cmd.NOT_FOUND
    for name in ("zookeeper.jar", "zookeeper-3.8.0.jar", "zookeeper-jute-3.8.0.jar"):
        (tmp_path / name).touch()
    assert version_cmd.zookeeper_version(tmp_path) == "3.8.0"


def test_the_console_script_answers_without_starting_anything() -> None:
    out = subprocess.run([sys.executable, "-m", "ferry.cli", "--version"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.startswith("ferry ") and "native crc32c" in out

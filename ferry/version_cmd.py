"""`ferry version` (and `ferry --version`): what a bug report needs to say about this machine.

ferry's own version, Python's, the Java, Spark and ZooKeeper it would run with, and each native part on or
off and why. Detection stays cheap: package metadata for PySpark (no import, no Spark session),
`java -version`, and the ZooKeeper jar's name under /usr/share/java (Debian's zookeeper package).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ferry.wire import native
from ferry.wire.release import ferry_version

JAVA_LIBS = Path("/usr/share/java")
NOT_FOUND = "not found"


def spark_version() -> str:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return "not installed (pip install ferry[warehouse])"


def java_version() -> str:
    java = shutil.which("java")
    if java is None:
        return NOT_FOUND
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{NOT_FOUND} ({e})"
    first = (out.stderr or out.stdout).strip().splitlines()[:1]
    m = re.search(r'version "([^"]+)"', first[0]) if first else None
    return m.group(1) if m else (first[0] if first else NOT_FOUND)


def zookeeper_version(libs: Path = JAVA_LIBS) -> str:
    jars = sorted(libs.glob("zookeeper-[0-9]*.jar"))
    return jars[-1].stem.removeprefix("zookeeper-") if jars else NOT_FOUND


def report() -> list[tuple[str, str]]:
    """(what, version or state) rows, native parts last."""
    rows = [("ferry", ferry_version()),
            ("python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"),
            ("java", java_version()), ("spark", spark_version()), ("zookeeper", zookeeper_version())]
    for part, state in native.load_all().items():
        rows.append((f"native {part}", "on" if state.on else f"off ({state.reason})"))
    return rows


def run(args: argparse.Namespace) -> int:
    rows = report()
    width = max(len(what) for what, _ in rows)
    for what, value in rows:
        print(f"{what:<{width}}  {value}")
    return 0


DESCRIPTION = "Print the versions of ferry, Python, Java, Spark and ZooKeeper, and whether each native part is on."


def add_arguments(_parser: argparse.ArgumentParser) -> None:
    """No flags."""

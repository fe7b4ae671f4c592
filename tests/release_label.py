"""Run a real ferry process as another release: the same code under another version string.

A process reports the version its installed distribution's metadata gives (ferry.wire.release); a directory
holding a ``ferry-<version>.dist-info`` put first on PYTHONPATH is what such a process finds, exactly as
on a host where another wheel is installed (tests/infra/test_ansible.py relabels a real wheel for the
containers; here only the metadata is needed, the code stays the checkout's). No product switch is involved.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path


def relabelled_release(where: Path, version: str) -> Path:
    """A directory to put first on PYTHONPATH: ferry's installed metadata with ``version`` instead (from an
    egg-info's PKG-INFO when the checkout's ferry.egg-info is what the test process finds first)."""
    installed = importlib.metadata.distribution("ferry")
    dist_info = where / f"ferry-{version}.dist-info"
    dist_info.mkdir(parents=True)
    lines = [f"Version: {version}" if line.startswith("Version:") else line
             for line in (installed.read_text("METADATA") or installed.read_text("PKG-INFO") or "").splitlines()]
    (dist_info / "METADATA").write_text("\n".join(lines) + "\n")
    return where


def pythonpath_first(directory: Path) -> str:
    """PYTHONPATH with ``directory`` ahead of what the environment has."""
    rest = os.environ.get("PYTHONPATH", "")
    return f"{directory}{os.pathsep}{rest}" if rest else str(directory)

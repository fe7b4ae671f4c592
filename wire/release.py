"""ferry's own version, as the installed distribution's metadata says (the wheel a deployment installed).

In the lowest layer so that every component can say which release it runs: `ferry version`, and each broker in
its ZooKeeper registration (``/brokers/ids/<id>``), where `ferry topics describe` and the dashboard compare them.
"""

from __future__ import annotations

import importlib.metadata

UNKNOWN = "unknown (not installed)"


def ferry_version() -> str:
    """The installed ferry's version, or UNKNOWN when ferry runs from a tree that was never installed."""
    try:
        return importlib.metadata.version("ferry")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN

"""Where the loads keep their state (ledger, lock, embedded metastore, default warehouse) when no --state-dir is
given: $FERRY_STATE_DIR, else a per-user directory ($XDG_STATE_HOME/ferry, ~/.local/state/ferry). Never the
working directory: a command run from anywhere must not leave state where it happened to run."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "FERRY_STATE_DIR"


def default_state_dir() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser() / "ferry"


def state_dir(given: str | None) -> Path:
    """The state directory a command uses: the one given, else the default above (absolute)."""
    return (Path(given).expanduser() if given else default_state_dir()).resolve()

"""The load ledger: committed end offsets per topic partition, and the redo log of the warehouse.

Paper, section 4: "Both data and offsets are stored in HDFS only on the successful completion of the
job." The ledger is ONE JSON file replaced atomically (write temp, fsync, rename, fsync the directory),
so a reader sees either the previous or the next state, never a mix. Writing it is the commit point of a
load run: the run record it gains lists the partition versions (Hive partition locations) that become
visible, and applying those to the metastore is a redo step that the next run repeats if the process died
in between (see docs/loaders.md, "Commit protocol").

The file also tracks runs in flight (their files are garbage if they never commit), superseded partition
versions waiting to be deleted, data lost to retention that a run was told to skip, the hours the DAGs
published, how far each partition was ever loaded (``loaded_to``: a run whose ranges all start there
or later cannot meet rows it replaces, so it needs no search for them), and the runs that failed (start,
end, the error in one line, the hours they attempted: ``failed``, ``failed_total``). A failure record is
only a note for people and alerts: it moves no offset and never counts as loaded; the failed run stays
in flight until the next run's recovery removes its files.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ferry.wire.atomic_file import atomic_write

LEDGER_VERSION = 1
HISTORY_KEEP = 200
ERROR_CHARS = 300  # a failed run's error, as one line


class LedgerError(RuntimeError):
    """The ledger is unreadable, locked by another run, or asked to do something inconsistent."""


def _empty() -> dict[str, Any]:
    return {"version": LEDGER_VERSION, "seq": 0, "source": None, "offsets": {}, "in_flight": {},
            "pending": [], "garbage": [], "history": [], "lost": [], "published": {},
            "revisions": {}, "loaded_to": {}, "failed": [], "failed_total": 0}


def error_line(exc: BaseException, limit: int = ERROR_CHARS) -> str:
    """``Type: message`` on one line; for a wrapped (Py4J) error whose text spans lines, the line of its root
    cause (the Python worker's exception) instead."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1:
        for marker in ("SplitReadError:", "BadRecordsError:", "SchemaMappingError:", "Error:"):
            for line in lines[1:]:
                if marker in line:
                    return " ".join(line.split())[:limit]
    first = " ".join(lines[0].split()) if lines else ""
    return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:limit]


def atomic_write_json(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True).encode())


class Ledger:
    """The ledger of one state directory. Mutations must happen under :meth:`lock`."""

    FILE = "ledger.json"
    LOCK = "ledger.lock"

    def __init__(self, state_dir: str | os.PathLike) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.path = self.state_dir / self.FILE
        self._lock_fd: int | None = None

    # ---- locking: one load run per state directory (the embedded Derby metastore admits one JVM anyway)
    @contextlib.contextmanager
    def lock(self, timeout: float = 600.0, poll: float = 0.5) -> Iterator[Ledger]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LedgerError(f"another load holds {self.state_dir / self.LOCK}{_holder(fd)} "
                                          f"(waited {timeout:g} s)") from None
                    time.sleep(poll)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self._lock_fd = fd
            yield self
        finally:
            self._lock_fd = None
            os.close(fd)  # closing releases the flock

    @property
    def held(self) -> bool:
        """True while this object holds the lock (inside :meth:`lock`)."""
        return self._lock_fd is not None

    def lock_unless_held(self, timeout: float = 600.0) -> contextlib.AbstractContextManager[Ledger]:
        """:meth:`lock`, or nothing when this object holds it already (work done inside a locked run)."""
        return contextlib.nullcontext(self) if self.held else self.lock(timeout)

    def _require_lock(self) -> None:
        if not self.held:
            raise LedgerError("ledger mutations need Ledger.lock()")

    # ---- reading
    def read(self) -> dict[str, Any]:
        """The current state (a fresh copy; an empty ledger if the file does not exist yet)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _empty()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise LedgerError(f"{self.path} is not valid JSON ({e}); refusing to guess committed offsets") from None
        if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
            raise LedgerError(f"{self.path}: unknown ledger format (version {data.get('version')!r})")
        base = _empty()
        base.update(data)
        if "loaded_to" not in data:  # a ledger from before loaded_to: the committed offsets are the best guess
            base["loaded_to"] = copy.deepcopy(base["offsets"])
        return base

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        """Next offset to load per (topic, partition): the end of the last committed range."""
        out: dict[tuple[str, int], int] = {}
        for topic, parts in self.read()["offsets"].items():
            for p, off in parts.items():
                out[(topic, int(p))] = int(off)
        return out

    def loaded_to(self) -> dict[tuple[str, int], int]:
        """The highest end offset ever committed per (topic, partition): rows below it may be in the tables
        even after ``reset_offsets`` moved the committed offset back."""
        out: dict[tuple[str, int], int] = {}
        for topic, parts in self.read()["loaded_to"].items():
            for p, off in parts.items():
                out[(topic, int(p))] = int(off)
        return out

    def committed_offsets_topics(self) -> list[str]:
        return sorted(self.read()["offsets"])

    def pending(self) -> list[dict[str, Any]]:
        """Committed runs whose partition versions may not be in the metastore yet."""
        return self.read()["pending"]

    def in_flight(self) -> dict[str, dict[str, Any]]:
        return self.read()["in_flight"]

    def history(self) -> list[dict[str, Any]]:
        return self.read()["history"]

    def failed_runs(self) -> list[dict[str, Any]]:
        """Runs that raised, oldest first (the last HISTORY_KEEP): run_id, started, ended, error, stage, hours."""
        return self.read()["failed"]

    def published_hours(self, table: str) -> dict[str, int]:
        """``{"YYYY-MM-DDTHH": rows when published}`` of a table (a changed count means re-publish)."""
        got = self.read()["published"].get(table, {})
        return dict(got) if isinstance(got, dict) else {h: -1 for h in got}

    # ---- mutating (each one is a single atomic file replacement)
    def _write(self, state: dict[str, Any]) -> None:
        self._require_lock()
        state["seq"] = int(state.get("seq", 0)) + 1
        atomic_write_json(self.path, state)

    def check_source(self, source: str, allow_change: bool = False) -> None:
        """Offsets only make sense for one cluster: refuse a ledger written against another one."""
        state = self.read()
        if state["source"] in (None, source) or allow_change:
            if state["source"] != source:
                state["source"] = source
                self._write(state)
            return
        raise LedgerError(f"{self.path} holds offsets of cluster {state['source']!r}, not {source!r} "
                          "(use another --state-dir, or --allow-source-change if the cluster moved)")

    def begin(self, run_id: str, roots: list[str]) -> None:
        """Record that ``run_id`` may write files under ``roots`` (garbage unless it commits)."""
        state = self.read()
        state["in_flight"][run_id] = {"started": time.time(), "roots": sorted(set(roots))}
        self._write(state)

    def commit(self, record: dict[str, Any]) -> None:
        """THE commit point: offsets advance and the run's partition versions become due, atomically."""
        state = self.read()
        run_id = record["run_id"]
        for r in record.get("ranges", []):
            parts = state["offsets"].setdefault(r["topic"], {})
            parts[str(r["partition"])] = int(r["end"])
            high = state["loaded_to"].setdefault(r["topic"], {})
            high[str(r["partition"])] = max(int(r["end"]), int(high.get(str(r["partition"]), 0)))
        for lost in record.get("lost", []):
            state["lost"].append({**lost, "run_id": run_id})
        record = copy.deepcopy(record)
        record["committed_at"] = time.time()
        state["pending"].append(record)
        began = state["in_flight"].pop(run_id, None) or {}
        summary = {k: record[k] for k in ("run_id", "committed_at", "rows") if k in record}
        started = record.get("started", began.get("started"))
        if started is not None:
            summary["started"] = started
        summary["ranges"] = len(record.get("ranges", []))
        summary["partitions"] = len(record.get("partitions", []))
        summary["hours"] = record.get("hours", {})
        state["history"] = (state["history"] + [summary])[-HISTORY_KEEP:]
        self._write(state)

    def fail(self, run_id: str, error: str, *, started: float, stage: str = "",
             hours: dict[str, list] | None = None, topics: list[str] | None = None, messages: int = 0) -> dict:
        """Note that ``run_id`` raised ``error`` (one line) in ``stage`` after starting at ``started``, while
        loading ``hours`` (``{table: [[dt, hr], ...]}``, what it attempted). Moves no offset and leaves the run
        in flight (the next run's recovery deletes its files): a failed run never counts as loaded. A run
        that failed after its commit (while publishing) is marked ``committed``: the next run re-applies it."""
        state = self.read()
        committed = any(r.get("run_id") == run_id for r in state["history"]) or any(
            r.get("run_id") == run_id for r in state["pending"])
        entry = {"run_id": run_id, "started": started, "ended": time.time(), "error": " ".join(error.split()),
                 "stage": stage, "hours": hours or {}, "topics": sorted(topics or []), "messages": int(messages),
                 "committed": committed}
        state["failed"] = (state["failed"] + [entry])[-HISTORY_KEEP:]
        state["failed_total"] = int(state.get("failed_total", 0)) + 1
        self._write(state)
        return entry

    def mark_applied(self, run_id: str, superseded: list[str]) -> None:
        """The run's versions are in the metastore; the versions they replaced become garbage."""
        state = self.read()
        state["pending"] = [r for r in state["pending"] if r["run_id"] != run_id]
        now = time.time()
        state["garbage"].extend({"path": p, "since": now} for p in superseded)
        self._write(state)

    def abandon(self, run_id: str) -> None:
        state = self.read()
        state["in_flight"].pop(run_id, None)
        self._write(state)

    def take_garbage(self, older_than_s: float) -> list[str]:
        """Remove and return superseded paths older than ``older_than_s`` (readers had time to finish)."""
        state = self.read()
        cutoff = time.time() - older_than_s
        due = [g for g in state["garbage"] if g["since"] <= cutoff]
        if not due:
            return []
        state["garbage"] = [g for g in state["garbage"] if g["since"] > cutoff]
        self._write(state)
        return [g["path"] for g in due]

    def revision(self, table: str, hour: str) -> int:
        """How many times ``hour`` of ``table`` was published again with another row count (0: once or never)."""
        return int(self.read()["revisions"].get(table, {}).get(hour, 0))

    def mark_published(self, table: str, hours: dict[str, int]) -> dict[str, int]:
        """Record a publication; returns the revision number of each hour (0 for a first publication)."""
        state = self.read()
        done = self.published_hours(table)
        revs = dict(state["revisions"].get(table, {}))
        out = {}
        for hour, rows in hours.items():
            if hour in done and done[hour] != rows:
                revs[hour] = int(revs.get(hour, 0)) + 1
            out[hour] = int(revs.get(hour, 0))
        done.update(hours)
        state["published"][table] = dict(sorted(done.items()))
        state["revisions"][table] = dict(sorted(revs.items()))
        self._write(state)
        return out

    def reset_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        """Operator tool: move committed offsets (re-loading a range never duplicates rows)."""
        state = self.read()
        for (topic, p), off in offsets.items():
            state["offsets"].setdefault(topic, {})[str(p)] = int(off)
        self._write(state)


def _holder(fd: int) -> str:
    """" (pid N)" from the lock file, which its holder writes once it has the lock; "" if unreadable."""
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""

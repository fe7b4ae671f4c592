"""A PostgreSQL server of our own for the Hive metastore: ``initdb`` + ``pg_ctl`` of Debian's ``postgresql``
package, one cluster under a directory, listening on 127.0.0.1 only, trust authentication.

Why: the embedded Derby admits one process, so while ``ferry demo`` (or a test) holds it no analyst can
query. With a PostgreSQL metastore any number of loads and ``ferry sql`` sessions run at once
(sql_metastore.py). ``ferry demo`` starts one of these under its directory; the tests use the same class.

PostgreSQL refuses to run as root: when we are root the server runs as the ``postgres`` user, and its data
lives where that user can reach it (a directory under /tmp named after the owner's when the owner's is not
reachable, e.g. under a 0700 home or pytest's temp dir).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ENV_PG_BIN = "FERRY_PG_BIN"
RUN_AS = "postgres"


class LocalPostgresError(RuntimeError):
    """The local PostgreSQL could not be set up or started; the message is one line for the user."""


def pg_bin() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``: $FERRY_PG_BIN, else Debian's newest /usr/lib/postgresql/N/bin,
    else the one on $PATH; None when PostgreSQL is not installed."""
    candidates = [Path(os.environ[ENV_PG_BIN])] if os.environ.get(ENV_PG_BIN) else []
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name), reverse=True)
    candidates += versions
    if on_path := shutil.which("initdb"):
        candidates.append(Path(on_path).parent)
    for d in candidates:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    return None


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in name.split(".") if p.isdigit())


class LocalPostgres:
    """One PostgreSQL cluster: data in ``<home>/data``, log ``<home>/log``, socket in ``<home>``."""

    def __init__(self, home: str | os.PathLike, port: int, *, user: str = "ferry", database: str = "metastore",
                 bin_dir: Path | None = None) -> None:
        self.port = port
        self.user = user
        self.database = database
        found = bin_dir or pg_bin()
        if found is None:
            raise LocalPostgresError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        self.bin = found
        self._as = ["runuser", "-u", RUN_AS, "--"] if os.geteuid() == 0 else []
        self.home = self._reachable_home(Path(home).resolve())

    @property
    def url(self) -> str:
        """The metastore spec for --metastore / $FERRY_METASTORE."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    @property
    def data(self) -> Path:
        return self.home / "data"

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: int = 60) -> LocalPostgres:
        """initdb (first time), start (unless it already runs, e.g. left over by a killed run), create the
        database if missing."""
        if not (self.data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "--no-sync", "-E", "UTF8")
        if not self.running():
            self._run("pg_ctl", "-D", str(self.data), "-l", str(self.home / "log"), "-w", "-t", str(timeout_s),
                      "-o", f"-h 127.0.0.1 -p {self.port} -k {self.home} -c fsync=off", "start",
                      timeout=timeout_s + 30)
        proc = self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", "postgres",
                         "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'")
        if proc.stdout.strip() != "1":
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, self.database)
        return self

    def running(self) -> bool:
        proc = subprocess.run([*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "status"],
                              capture_output=True, text=True, timeout=30, cwd="/tmp")
        return proc.returncode == 0

    def stop(self, timeout_s: int = 60) -> None:
        """Fast shutdown (open sessions are rolled back); nothing to do when it is not running."""
        if self.data.exists():
            subprocess.run([*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                            "-t", str(timeout_s), "stop"], capture_output=True, timeout=timeout_s + 30, cwd="/tmp")

    # ------------------------------------------------------------------ helpers
    def _run(self, program: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run([*self._as, str(self.bin / program), *args], capture_output=True, text=True,
                                  timeout=timeout, cwd="/tmp")
        except (OSError, subprocess.TimeoutExpired) as e:
            raise LocalPostgresError(f"PostgreSQL {program} failed: {e}") from None
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()] or ["?"]
            raise LocalPostgresError(f"PostgreSQL {program} failed: {lines[-1][:300]} (log: {self.home / 'log'})")
        return proc

    def _reachable_home(self, home: Path) -> Path:
        """``home`` itself when the server's user can use it, else a stable directory under /tmp."""
        if not self._as:
            home.mkdir(parents=True, exist_ok=True)
            return home
        home.mkdir(parents=True, exist_ok=True)
        shutil.chown(home, RUN_AS)
        probe = subprocess.run([*self._as, "test", "-w", str(home), "-a", "-x", str(home)], capture_output=True,
                               timeout=30, cwd="/tmp")
        if probe.returncode == 0:
            return home
        tag = hashlib.sha1(str(home).encode()).hexdigest()[:12]
        alt = Path("/tmp") / f"ferry-pg-{tag}"
        alt.mkdir(mode=0o700, exist_ok=True)
        shutil.chown(alt, RUN_AS)
        (home / "WHERE").write_text(f"this PostgreSQL's data lives in {alt} (the {RUN_AS} user cannot reach here)\n")
        return alt

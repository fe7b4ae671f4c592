"""The demo's Hive metastore: its own PostgreSQL when PostgreSQL is installed, so that `ferry sql` answers while
the demo loads or holds its metastore (`--keep-running`); the embedded Derby otherwise (one process at a time).

Order: $FERRY_METASTORE when set (the user's choice); else the one the demo directory already uses (a
PostgreSQL named in ``warehouse-state/metastore.url``, or Derby when an earlier run left ``metastore_db``:
switching would lose its tables); else a new local PostgreSQL under ``DIR/postgres`` on a free loopback port,
kept in ``DIR/ports.json``. Its URL is written to ``warehouse-state/metastore.url``, where ``ferry sql
--state-dir DIR/warehouse-state`` (and ``ferry load``) find it.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path

from ferry.demo_steps import DemoProgress
from ferry.embedded import free_port
from ferry.loaders.local_postgres import LocalPostgres, pg_bin
from ferry.loaders.sql_metastore import ENV_METASTORE, STATE_FILE, name_for_state_dir


def start_demo_metastore(root: Path, state_dir: Path, stack: ExitStack, progress: DemoProgress) -> str:
    """Pick (and start) the demo's metastore; returns the `ferry sql` options that reach it."""
    sql_opts = f"--state-dir {state_dir}"
    if spec := os.environ.get(ENV_METASTORE, "").strip():
        progress.say(f"metastore: $FERRY_METASTORE ({spec.split('@')[-1]})")
        return sql_opts
    named = state_dir / STATE_FILE
    if not named.exists() and (state_dir / "metastore_db").exists():
        progress.say("metastore: embedded Derby (this directory's earlier runs used it; --clean for PostgreSQL); "
                     "`ferry sql` waits until the demo ends")
        return sql_opts
    if pg_bin() is None:
        progress.say("metastore: embedded Derby (PostgreSQL is not installed); `ferry sql` waits until the demo ends")
        return sql_opts
    pg = LocalPostgres(root / "postgres", _port(root))
    if named.exists() and named.read_text().strip() != pg.url:
        progress.say(f"metastore: the one named in {named}")  # someone else's choice: use it as it is
        return sql_opts
    progress.say(f"metastore: PostgreSQL on 127.0.0.1:{pg.port} (data {pg.data}), so readers query while loads run")
    stack.callback(pg.stop)
    pg.start()
    name_for_state_dir(state_dir, pg.url)
    os.environ[ENV_METASTORE] = pg.url  # the DAG's loads (spark-submit: the JDBC driver on the driver's path)
    return sql_opts


def _port(root: Path) -> int:
    """The PostgreSQL port of this demo directory (reused by later runs, like the brokers' ports)."""
    ports_file = root / "ports.json"
    ports = json.loads(ports_file.read_text()) if ports_file.exists() else {}
    if "postgres" not in ports:
        ports["postgres"] = free_port()
        ports_file.write_text(json.dumps(ports))
    return ports["postgres"]

"""Analysts' SQL while loads run (issue 22): a real PostgreSQL metastore (initdb/pg_ctl in a temp dir, loopback),
real `ferry load` processes, `ferry sql -e`, the Thrift JDBC server queried with PyHive, DuckDB and
pyarrow.dataset over the reader tree; and one clear line for a wrong, stopped or locked metastore.

One PostgreSQL, one committed load and one Thrift server are shared by the module (each costs seconds to
tens of seconds of JVM start-up here)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ferry.zk.local_process import free_port

# the first test's set-up is a PostgreSQL, a real load and the Thrift server's JVM: minutes on a busy machine
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]
HERE = Path(__file__).resolve().parent


def _loader_helpers():
    """tests/loaders/conftest.py's producers (importlib mode: no package imports between test files)."""
    name = "ferry_loader_test_helpers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def _ferry(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL on 127.0.0.1 (loaders/local_postgres.py, as `ferry demo` starts its own)."""
    from ferry.loaders.local_postgres import LocalPostgres, pg_bin

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (scripts/setup.sh installs it)")
    home = Path(tempfile.mkdtemp(prefix="ferry-pg-", dir="/tmp"))
    pg = LocalPostgres(home, free_port()).start()
    yield pg
    pg.stop()
    shutil.rmtree(pg.home, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def loaded(postgres, offline, tmp_path_factory):
    """A topic with events in two past hours, loaded once through the PostgreSQL metastore."""
    h = _loader_helpers()
    root = tmp_path_factory.mktemp("sql")
    topic = h.create_topic(offline, partitions=2, prefix="pv")
    hours = [h.past_hour(3), h.past_hour(2)]
    h.produce(offline, topic, h.spread(hours[0], 120) + h.spread(hours[1], 80))
    env = {"state": str(root / "state"), "warehouse": str(root / "warehouse"), "database": "sqltest",
           "topic": topic, "hours": [h.label(ms) for ms in hours], "hours_ms": hours, "zk": offline.zk, "metastore": postgres.url}
    proc = _ferry("load", "--zookeeper", offline.zk, "--topics", topic, "--state-dir", env["state"],
                  "--warehouse", env["warehouse"], "--database", "sqltest", "--metastore", postgres.url)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def thrift(loaded):
    """`ferry sql serve` on a free loopback port (the Thrift JDBC/ODBC server of the pyspark distribution)."""
    import socket

    port = free_port()
    log = open(Path(loaded["state"]).parent / "thrift.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "sql", "serve", "--listen", f"127.0.0.1:{port}",
                             "--metastore", loaded["metastore"], "--state-dir", loaded["state"],
                             "--database", loaded["database"], "--master", "local[1]"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, Path(log.name).read_text()[-3000:]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(1)
    else:
        pytest.fail("the Thrift server did not listen within 300 s")
    yield port
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def thrift_counts(port: int, table: str, database: str) -> dict[tuple[str, str], int]:
    from pyhive import hive

    conn = hive.connect(host="127.0.0.1", port=port, username="analyst", auth="NONE", database=database)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT dt, hr, count(*) FROM {table} GROUP BY dt, hr")
        return {(d, h): n for d, h, n in cur.fetchall()}
    finally:
        conn.close()


def beeline_counts(port: int, table: str, database: str) -> dict[tuple[str, str], int]:
    """The same query through beeline, the JDBC client the pyspark distribution ships (bin/beeline)."""
    from ferry.loaders.sql_cli import spark_home

    proc = subprocess.run([str(spark_home() / "bin" / "beeline"), "-u", f"jdbc:hive2://127.0.0.1:{port}/{database}",
                           "-n", "analyst", "--silent=true", "--outputformat=tsv2", "--showHeader=false",
                           "-e", f"SELECT dt, hr, count(*) FROM {table} GROUP BY dt, hr"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "SPARK_HOME": str(spark_home())})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = {}
    for m in re.finditer(r"(\d{4}-\d\d-\d\d)\t(\d\d)\t(\d+)$", proc.stdout, re.M):  # the 1st row follows a prompt
        out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def sql_counts(env: dict, table: str) -> dict[tuple[str, str], int]:
    proc = _ferry("sql", "--metastore", env["metastore"], "--state-dir", env["state"], "--database", env["database"],
                  "-e", f"SELECT dt, hr, count(*) FROM {table} GROUP BY dt, hr")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for line in proc.stdout.splitlines():
        d, h, n = line.split("\t")
        out[(d, h)] = int(n)
    return out


def direct_counts(env: dict, table: str) -> tuple[dict, dict]:
    """(DuckDB, pyarrow.dataset) counts per hour over the reader tree ``<warehouse>/<db>.current/<table>``."""
    import duckdb
    import pyarrow.dataset as ds

    tree = Path(env["warehouse"]) / f"{env['database']}.current" / table
    con = duckdb.connect()
    rows = con.execute(f"SELECT dt, hr, count(*) FROM read_parquet('{tree}/*/*/*.parquet', hive_partitioning=true, "
                       "hive_types_autocast=false) GROUP BY dt, hr").fetchall()
    duck = {(str(d), str(h)): n for d, h, n in rows}
    table_ = ds.dataset(tree, format="parquet", partitioning="hive").to_table(columns=["dt", "hr"])
    arrow: dict[tuple[str, str], int] = {}
    for d, h in zip(table_.column("dt").to_pylist(), table_.column("hr").to_pylist(), strict=True):
        key = (f"{d}" if isinstance(d, str) else str(d), f"{int(h):02d}" if not isinstance(h, str) else h)
        arrow[key] = arrow.get(key, 0) + 1
    return duck, arrow


def audit_counts(env: dict) -> dict[tuple[str, str], int]:
    """The warehouse tier of `ferry audit report` for the topic, per hour."""
    proc = _ferry("audit", "report", "--zookeeper", env["zk"], "--offline-only", "--topic", env["topic"],
                  "--hours", "6", "--json")
    assert proc.returncode == 0, proc.stderr
    out = {}
    for h in json.loads(proc.stdout)["hours"]:
        d, hr = h["hour"][:10], h["hour"][11:13]
        if h.get("loaded"):
            out[(d, hr)] = h["loaded"]
    return out


PAUSED_LOAD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ferry.loaders.load_config import LoadConfig
    from ferry.loaders.load_job import LoadJob
    zk, topic, state, warehouse, db, metastore, flag, release = sys.argv[1:9]

    class PausedLoad(LoadJob):
        def source(self, ranges, bootstrap):  # the run has begun and its Spark session holds the metastore
            Path(flag).write_text("loading")
            deadline = time.monotonic() + 600
            while not Path(release).exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            return super().source(ranges, bootstrap)

    cfg = LoadConfig(zookeeper=zk, topics=[topic], state_dir=state, warehouse=warehouse, database=db,
                     metastore_uris=metastore, quiet=True)
    result = PausedLoad(cfg).run()
    print("committed", result.committed, result.rows)
""")


def test_readers_during_a_load_see_the_committed_rows_once(loaded, thrift, offline, tmp_path):
    from ferry.loaders.naming import table_for_topic

    table = table_for_topic(loaded["topic"])
    committed = {loaded["hours"][0]: 120, loaded["hours"][1]: 80}
    assert audit_counts(loaded) == committed

    # more events for the first hour: the next load replaces that hour's version (old rows + new ones)
    d, h = loaded["hours"][0]
    helpers = _loader_helpers()
    helpers.produce(offline, loaded["topic"], helpers.spread(loaded["hours_ms"][0], 30))
    flag, release = tmp_path / "loading", tmp_path / "release"
    load = subprocess.Popen([sys.executable, "-c", PAUSED_LOAD, offline.zk, loaded["topic"], loaded["state"],
                             loaded["warehouse"], loaded["database"], loaded["metastore"], str(flag), str(release)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    try:
        deadline = time.monotonic() + 300
        while not flag.exists():
            assert load.poll() is None, load.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the load never reached its read"
            time.sleep(0.5)
        # the load is running (its JVM holds a metastore connection, its run is in the ledger): readers go on
        assert sql_counts(loaded, table) == committed
        assert thrift_counts(thrift, table, loaded["database"]) == committed
        assert beeline_counts(thrift, table, loaded["database"]) == committed
        assert direct_counts(loaded, table) == (committed, committed)
        assert audit_counts(loaded) == committed
        assert load.poll() is None, "the load ended while the readers ran: they did not run during it"
    finally:
        release.write_text("go")
    out, _ = load.communicate(timeout=400)
    assert load.returncode == 0 and "committed True 30" in out, out[-3000:]

    after = {loaded["hours"][0]: 150, loaded["hours"][1]: 80}
    assert audit_counts(loaded) == after
    assert thrift_counts(thrift, table, loaded["database"]) == after
    # right after the replaced hour: its old version is still on disk (kept for readers on it), but not in
    # the reader tree; a scan of the table's own directory would count it twice
    duck, arrow = direct_counts(loaded, table)
    assert duck == after and arrow == after
    versions = list((Path(loaded["warehouse"]) / loaded["database"] / table).glob(f"dt={d}/hr={h}/ferry_run=*"))
    assert len(versions) == 2


def test_wrong_metastore_url_and_stopped_postgres_give_one_line(loaded, postgres, thrift):
    closed = f"postgresql://ferry@127.0.0.1:{free_port()}/metastore"
    for args in (["sql", "--metastore", closed, "-e", "SELECT 1"],
                 ["sql", "--metastore", loaded["metastore"].replace("/metastore", "/nosuchdb"), "-e", "SELECT 1"],
                 ["sql", "--metastore", "mysql://x@y/z", "-e", "SELECT 1"],
                 ["load", "--zookeeper", loaded["zk"], "--topics", loaded["topic"], "--state-dir",
                  str(Path(loaded["state"]).parent / "other-state"), "--metastore", closed]):
        proc = _ferry(*args, timeout=120)
        assert proc.returncode != 0, (args, proc.stdout)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(("ferry sql: ", "ferry load: ")), proc.stderr
        assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr
    postgres.stop()
    try:
        proc = _ferry("sql", "--metastore", loaded["metastore"], "-e", "SELECT 1", timeout=120)
        assert proc.returncode == 1
        assert proc.stderr.strip().count("\n") == 0 and "is not reachable" in proc.stderr, proc.stderr
    finally:
        postgres.start()


HOLD_DERBY = """
import sys, time
from ferry.loaders.session import build_session
spark = build_session(sys.argv[1], master="local[1]")
spark.sql("SHOW DATABASES").collect()
print("booted", flush=True)
time.sleep(300)
"""


def test_a_locked_embedded_derby_gives_one_line(tmp_path: Path):
    """Another process (a load, a demo) has the embedded Derby of a state directory booted: `ferry sql` on the
    same directory is refused in one line instead of failing after 30 s with Derby's XSDB6 stack trace."""
    state = tmp_path / "state"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "FERRY_METASTORE": ""}
    holder = subprocess.Popen([sys.executable, "-c", HOLD_DERBY, str(state)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "booted"
        assert (state / "metastore_db" / "dbex.lck").exists()
        proc = _ferry("sql", "--state-dir", str(state), "-e", "SELECT 1", timeout=60, env={"FERRY_METASTORE": ""})
        assert proc.returncode == 1
        assert proc.stderr.startswith("ferry sql: error: the embedded metastore") and proc.stderr.count("\n") == 1, \
            proc.stderr
    finally:
        holder.kill()
        holder.wait(30)


def test_metastore_spellings():
    from ferry.loaders.sql_metastore import MetastoreError, parse

    ms = parse("postgresql://ferry:s3cret@db1:5433/meta")
    assert (ms.kind, ms.location, ms.user, ms.password) == ("postgresql", "jdbc:postgresql://db1:5433/meta", "ferry",
                                                            "s3cret")
    assert "s3cret" not in ms.describe()
    assert parse("jdbc:postgresql://db1/meta?user=u&password=p").spark_conf()[
        "spark.hadoop.javax.jdo.option.ConnectionUserName"] == "u"
    assert parse("thrift://h:9083").spark_conf() == {"spark.hadoop.hive.metastore.uris": "thrift://h:9083"}
    assert parse(None, "/tmp/st").location.endswith("/tmp/st/metastore_db")
    with pytest.raises(MetastoreError, match=r"\*\*\*"):
        parse("mysql://u:pw@h/db")


def test_a_state_dir_names_its_metastore(tmp_path: Path, monkeypatch):
    """`ferry demo` writes its PostgreSQL into STATE_DIR/metastore.url: readers of that state dir use it, an
    explicit setting still wins, and a bad spec is refused when written."""
    from ferry.loaders.sql_metastore import MetastoreError, name_for_state_dir, parse

    monkeypatch.delenv("FERRY_METASTORE", raising=False)
    name_for_state_dir(tmp_path, "postgresql://ferry@127.0.0.1:5999/metastore")
    ms = parse(None, tmp_path)
    assert (ms.kind, ms.location) == ("postgresql", "jdbc:postgresql://127.0.0.1:5999/metastore")
    assert str(tmp_path / "metastore.url") in ms.describe()
    assert parse("derby:/x/db", tmp_path).kind == "derby"
    monkeypatch.setenv("FERRY_METASTORE", "thrift://h:9083")
    assert parse(None, tmp_path).kind == "thrift"
    with pytest.raises(MetastoreError):
        name_for_state_dir(tmp_path, "mysql://x@y/z")

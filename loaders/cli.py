"""``ferry load``: load offset ranges of the offline cluster into the hourly warehouse tables."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from ferry.audit.completeness import HourStatus
from ferry.loaders import native as loader_native
from ferry.loaders import sql_metastore, steps
from ferry.loaders.cluster_offsets import ClusterOffsetsError
from ferry.loaders.ledger import LedgerError
from ferry.loaders.load_config import BadRecordsError, LoadConfig
from ferry.loaders.load_metrics import LoadMetrics
from ferry.loaders.offsets import parse_offsets_json
from ferry.loaders.planner import DataLossError, PlanError, StartPosition
from ferry.loaders.sql_metastore import MetastoreError
from ferry.loaders.state_dir import state_dir
from ferry.wire import native
from ferry.wire.client_config import ENV_CLIENT_CONFIG
from ferry.wire.native import NativeRequiredError
from ferry.zk import RegistryError
from ferry.zk import cli_args as cli
from ferry.zk import connect as zk_connect
from ferry.zk.cli_args import UsageError
from ferry.zk.zk_connect import ZkConnect

DESCRIPTION = """\
Load new messages of the offline cluster into hourly Hive tables (Parquet, partitioned by event dt/hr),
one table per topic, with PySpark (local mode by default). Offsets are committed to the load ledger in
--state-dir only when a run succeeds; a failed or repeated run never loses or duplicates rows. After the
load the audit books are balanced and written to ferry_completeness.

examples:
  ferry load --zookeeper 127.0.0.1:2181/ferry/offline --topics 'page_view|click'
  ferry load --zookeeper ZK --topics page_view --start 2024-05-01T00:00:00Z --max-per-split 200000
  ferry load --zookeeper ZK --topics page_view --step plan          # show what would be read
  ferry load --zookeeper ZK --topics '.*' --command-config /etc/ferry/loader.properties   # TLS/SASL
  spark-submit --master yarn loaders/cli.py --zookeeper ZK --topics '.*' --warehouse hdfs:///warehouse
"""


class LoadFailedError(RuntimeError):
    """A load step that failed while running (exit 1), as opposed to bad flags (exit 2)."""


def add_arguments(p: argparse.ArgumentParser, default_master: str | None = "local[2]") -> None:
    cli.add_zookeeper_argument(p, "the offline cluster's ZooKeeper")  # required: checked in _run
    p.add_argument("--topics", required=True, metavar="T[,T...]|REGEX",
                   help="topics: a comma-separated list, one name, or a regular expression (whole name)")
    cli.add_state_dir_argument(p, "ledger, lock and (by default) the embedded Derby metastore")
    p.add_argument("--warehouse", default=None, metavar="DIR|URI",
                   help="warehouse root: a directory or a Hadoop URI (hdfs://, s3a://); default STATE_DIR/warehouse")
    p.add_argument("--database", default="ferry", metavar="NAME", help="Hive database of the tables (default: ferry)")
    p.add_argument("--master", default=default_master, metavar="MASTER",
                   help="Spark master (default: local[2]; under spark-submit the master spark-submit was given)")
    p.add_argument("--metastore", "--metastore-uris", dest="metastore_uris", default=None, metavar="URL",
                   help="the Hive metastore: postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (loads and analysts at "
                        "once), thrift://HOST:9083 (a metastore service) or derby:DIR; default $FERRY_METASTORE, "
                        "else the embedded Derby in STATE_DIR (one process at a time)")
    cli.add_conf_argument(p)
    p.add_argument("--start", default="earliest", metavar="earliest|latest|TIME",
                   help="where partitions never loaded before start: earliest, latest or an ISO time")
    p.add_argument("--max-per-split", type=int, default=1_000_000, metavar="N",
                   help="at most this many offsets per Spark input partition (default 1000000)")
    p.add_argument("--parquet-writer", choices=("auto", "arrow", "spark"), default="auto",
                   help="who writes Parquet: arrow = the executors with pyarrow (fast; local paths, and hdfs:// "
                        "or s3:// where pyarrow reaches them), spark = Spark's writer (any Hadoop URI); auto "
                        "(default) = arrow for a local warehouse, spark otherwise")
    cli.add_switches(p, {
        "--progress": "a progress bar per topic (messages, rows/s, ETA) while the executors load; only on a terminal",
        "--skip-lost-data": "load what is left when committed offsets were deleted by retention (recorded)",
        "--skip-bad-records": "drop records that cannot be decoded instead of failing (they are counted and shown)",
        "--no-audit": "do not load _audit nor reconcile (warehouse counts are still published)",
        "--allow-source-change": "accept a ledger written against another ZooKeeper connect string",
    })
    p.add_argument("--until-offsets", default=None, metavar="JSON",
                   help='cap end offsets, {"topic": {"0": 42}} (the DAG passes its plan here)')
    p.add_argument("--step", choices=("all", "plan", "load", "reconcile"), default="all",
                   help="all (default) = load then reconcile; or just one step")
    p.add_argument("--hours", default="", metavar="HOURS", help="reconcile these hours too: YYYY-MM-DDTHH[,...] (UTC)")
    p.add_argument("--since", type=float, default=None, metavar="EPOCH_S",
                   help="reconcile: also every hour loaded by runs committed since this time (epoch seconds)")
    cli.add_live_zookeeper_argument(p, "a live cluster whose producers' counts decide completeness (one per live "
                                    "datacenter); while one is unreachable its hours are 'unknown', never complete",
                                    dest="live_zookeepers")
    p.add_argument("--json", dest="json_out", default=None, metavar="FILE",
                   help="write the step's result as JSON to FILE (for the DAG; stdout stays for people)")
    p.add_argument("--metrics-file", metavar="PATH",
                   help="after each load run write Prometheus metrics (rows, bad records, failures per topic, "
                        "duration) to PATH for node_exporter's textfile collector; counters carry over across runs")
    cli.add_metrics_argument(p, "the run's metrics while it lasts")
    cli.add_http_security_arguments(p, "/metrics")
    cli.add_client_config_argument(p, "the offline cluster's brokers (the driver and the split readers on the "
                                   "executors; a path, shipped to executors in cluster mode)")
    cli.add_client_config_argument(p, "the live clusters' brokers (--live-zookeeper's producer counts)",
                                   flag="--live-command-config", dest="live_command_config")
    p.add_argument("--lock-timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="seconds to wait for another load holding the state directory (default 1800)")


def build_parser(default_master: str | None = "local[2]") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="load_job.py", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, default_master)
    p.set_defaults(func=run)
    return p


def parse_hours(text: str) -> list[tuple[str, str]]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            t = dt.datetime.strptime(item[:13], "%Y-%m-%dT%H")
        except ValueError:
            raise UsageError(f"--hours {item!r}: expected YYYY-MM-DDTHH") from None
        out.append((t.strftime("%Y-%m-%d"), t.strftime("%H")))
    return out


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    conf = cli.parse_key_values(args.conf, "--conf", "spark.executor.memory=2g")
    if args.max_per_split <= 0:
        raise UsageError("--max-per-split must be positive")
    topics = args.topics
    if "," in topics:
        topics = [t.strip() for t in topics.split(",") if t.strip()]
    return LoadConfig(
        zookeeper=args.zookeeper, topics=topics, state_dir=str(state_dir(args.state_dir)),
        warehouse=args.warehouse, database=args.database, master=args.master, metastore_uris=args.metastore_uris,
        start=args.start, max_per_split=args.max_per_split, parquet_writer=args.parquet_writer, progress=args.progress,
        skip_lost_data=args.skip_lost_data,
        skip_bad_records=args.skip_bad_records, include_audit=not args.no_audit,
        until=parse_offsets_json(args.until_offsets, "--until-offsets") if args.until_offsets else None,
        allow_source_change=args.allow_source_change, lock_timeout_s=args.lock_timeout, spark_conf=conf,
        live_zookeepers=list(args.live_zookeepers), client_config=_client_file(args, "command_config"),
        live_client_config=_client_file(args, "live_command_config", env=False))


def _client_file(args: argparse.Namespace, dest: str, env: bool = True) -> str | None:
    """The client properties file a flag (else $FERRY_CLIENT_CONFIG) names, checked here (a usage error in one
    line); its path is what the load carries, so executors read the same file."""
    path = getattr(args, dest, None) or (os.environ.get(ENV_CLIENT_CONFIG) if env else None)
    if not path:
        return None
    cli.client_config(args, dest, environ={ENV_CLIENT_CONFIG: path})
    return str(Path(path).resolve())


def run(args: argparse.Namespace) -> int:
    """Run the step; a load (or all) also records its metrics when --metrics-file/--metrics-listen ask."""
    cli.quiet_zookeeper_logs()
    cli.require_zookeeper(args)  # usage errors first: exit 2, and no metrics recorded for a run that never began
    StartPosition.parse(args.start)
    cfg = config_from_args(args)
    hours = parse_hours(args.hours)
    if args.step in ("load", "all"):
        try:  # loads batch_records and avro_columns (one warning when they are not built)
            loader_native.available()
        except NativeRequiredError as e:  # FERRY_REQUIRE_NATIVE=1 and a decoder not built: refuse before Spark
            raise RuntimeError(str(e)) from None
        _preflight(cfg)
        _say_native_parts()
    metrics = None
    if args.step in ("load", "all") and (args.metrics_file or cli.metrics_listen(args)):
        metrics = LoadMetrics(args.metrics_file)
        if listen := cli.metrics_listen(args):
            metrics.serve(*listen, cli.http_security(args, cfg.zookeeper))
    try:
        _run(args, cfg, hours, metrics)
    except BaseException:
        if metrics is not None:
            metrics.failed(cfg.topics if isinstance(cfg.topics, list) else [cfg.topics])
        raise
    return 0


def _preflight(cfg: LoadConfig) -> None:
    """Before the load's first line on stderr: a state dir that cannot be made or written, a ZooKeeper or a
    metastore that does not answer are one error line (exit 1), as for the broker. Nothing is created in the
    state dir (a PostgreSQL metastore gets its Hive schema here rather than later in the run)."""
    cli.check_writable_dir(Path(cfg.state_dir), "--state-dir")
    with cli.zookeeper_logs_quiet():
        client = zk_connect(ZkConnect.parse(cfg.zookeeper).hosts, timeout=10.0)
        client.stop()
        client.close()
    metastore = sql_metastore.parse(cfg.metastore_uris, cfg.state_dir)
    if metastore.kind != "derby":  # a server (the embedded Derby is checked once the load holds its lock)
        metastore.check()  # MetastoreError: one line, exit 1


def _say_native_parts() -> None:
    """The start-up line the broker and the mirror log too, for the decoders this load runs (on stderr: stdout
    carries the plan and the books). Spark's Python workers load the same installed ferry."""
    print(f"ferry load: native parts: {native.describe()}", file=sys.stderr, flush=True)


def _run(args: argparse.Namespace, cfg: LoadConfig, hours: list[tuple[str, str]], metrics: LoadMetrics | None) -> None:
    """The step; a failure is raised (ferry/cli_runner.py prints it in one line: exit 1 for a run that failed)."""
    try:
        out: dict = {}
        if args.step == "plan":
            plan = steps.plan(cfg)
            print(f"{plan.total} messages in {len(plan.splits)} splits")
            if plan.total:
                print(plan.describe())
            out = plan.to_dict()
        elif args.step == "load":
            _, result = steps.load(cfg)
            out = result.to_dict()
        elif args.step == "reconcile":
            _, statuses = steps.reconcile(cfg, hours, since=args.since)
            _print_books(statuses)
            out = {"hours": [s.to_dict() for s in statuses]}
        else:
            started = time.time()
            job, result = steps.load(cfg)
            out = result.to_dict()
            if cfg.include_audit:
                _, statuses = steps.reconcile(cfg, result.hours() + hours, since=started,
                                              spark=job.spark)
                _print_books(statuses)
                out["hours"] = [s.to_dict() for s in statuses]
        if args.json_out:
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(json.dumps(out, indent=1, sort_keys=True))
        if metrics is not None:
            metrics.succeeded(out)
    except (DataLossError, PlanError, BadRecordsError, LedgerError, ClusterOffsetsError, MetastoreError, RegistryError,
            OSError):
        raise  # the run's own failures, each fit to show (a bad connect string: exit 2; the rest: exit 1)
    except ValueError as e:  # found while running (a record, a schema), not in the flags: the run failed
        raise LoadFailedError(str(e)) from e
    except Exception as e:  # Spark/Py4J failures carry the Python worker's error deep inside
        if os.environ.get("FERRY_DEBUG"):
            raise
        raise LoadFailedError(f"run failed ({type(e).__name__}): {_root_cause(e)}. Nothing uncommitted is visible; "
                              "the next run cleans up (or re-applies a committed run); FERRY_DEBUG=1 shows the "
                              "traceback") from e


def _root_cause(e: BaseException) -> str:
    """The most useful line of a (possibly Py4J-wrapped) exception."""
    text = str(e)
    for marker in ("SplitReadError:", "BadRecordsError:", "SchemaMappingError:", "Error:"):
        for line in text.splitlines():
            if marker in line:
                return line.strip()[:1000]
    return text.strip().splitlines()[0][:1000] if text.strip() else type(e).__name__


def _print_books(statuses: list[HourStatus]) -> None:
    if not statuses:
        return
    print("hour books (ferry_completeness):")
    for s in statuses:
        print("  " + s.describe())


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point (same flags as ``ferry load``; the master comes from spark-submit)."""
    args = build_parser(default_master=None).parse_args(argv)
    try:
        return run(args)
    except Exception as e:  # as `ferry load` fails (ferry/cli_runner.py): one line, 2 for usage, 1 at run time
        if os.environ.get("FERRY_DEBUG"):
            raise
        print(f"load_job.py: error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return 2 if isinstance(e, UsageError | ValueError) else 1


if __name__ == "__main__":
    sys.exit(main())

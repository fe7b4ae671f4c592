"""`ferry demo`: the whole two-datacenter pipeline on one machine (paper section 4, Figure 3).

One ZooKeeper with a chroot per datacenter, two live brokers (topics replicated on both), one offline
broker that copies the live topics through a mirror link (or a standalone mirror process: --mirror standalone), Avro schemas in the registry, a realistic stream from several frontend hosts
spread over the last hours, the hourly Airflow DAG run in-process for those hours (PySpark loads), then
the books: the audit per topic and hour, the mirror's lag and an analyst's query over the warehouse.
Everything stops on exit or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import time
from contextlib import ExitStack
from pathlib import Path

from ferry.dashboard.cli import parse_listen
from ferry.dashboard.process import start_dashboard
from ferry.demo_chaos import chaos_summary, publish_under_chaos
from ferry.demo_dag import run_hourly_dag
from ferry.demo_metastore import start_demo_metastore
from ferry.demo_mirror import KINDS, LINK, demo_mirror, keep_kind, wait_mirrored
from ferry.demo_report import print_report
from ferry.demo_secure import DemoSecurity
from ferry.demo_steps import DemoCluster, DemoProgress
from ferry.embedded import free_port
from ferry.zk import cli_args as cli

TOPICS = ("page_view", "click", "search")


DESCRIPTION = (
    "Start ZooKeeper (chroots /ferry/live and /ferry/offline), two live brokers (every live topic "
    "and _audit with replication factor 2, min.insync.replicas 1), one offline "
    "broker as local processes, a mirror link on the offline cluster (its broker pulls from the live one; "
    "--mirror standalone: a `ferry mirror` process instead); register Avro schemas; publish a realistic activity "
    "stream from simulated frontend hosts over the last hours; run the hourly Airflow DAG for "
    "those hours (PySpark into Parquet/Hive tables); print the audit, mirror lag and an analyst "
    "query. The tables' metastore is a PostgreSQL the demo starts under --dir when PostgreSQL is "
    "installed (so `ferry sql --state-dir DIR/warehouse-state` answers while it runs), else the "
    "embedded Derby. Everything listens on 127.0.0.1 and stops on exit or Ctrl-C.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=".demo", type=Path,
                   help="directory for all data and logs (default: ./.demo); reused by a second run")
    p.add_argument("--clean", action="store_true", help="delete --dir first and start from nothing")
    p.add_argument("--events", type=int, default=60_000, help="events to publish (default 60000)")
    p.add_argument("--hours", type=int, default=3, help="event times spread over the last N full hours (default 3)")
    p.add_argument("--hosts", type=int, default=4, help="simulated frontend hosts (default 4)")
    p.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4)")
    p.add_argument("--short", action="store_true",
                   help="a quick run for tests: 3000 events over 2 hours, smaller Spark settings")
    p.add_argument("--keep-running", action="store_true",
                   help="leave ZooKeeper, brokers and mirror running at the end until Ctrl-C")
    p.add_argument("--seed", type=int, default=None, help="seed of the event generator (default: time-based)")
    p.add_argument("--mirror", choices=KINDS, default=LINK,
                   help="how live is copied to offline: 'link' (default) a mirror link on the offline cluster, its "
                        "broker pulling from the live brokers (the embedded mirror); 'standalone' a `ferry mirror` "
                        "process (docs/mirror.md)")
    p.add_argument("--chaos", type=int, nargs="?", const=3, default=0, metavar="N",
                   help="kill what copies with -9 N times (default 3: the offline broker running the link, or the "
                        "standalone mirror) while the events are published and copied, starting it again each "
                        "time; the books must still be complete with 0 duplicates")
    p.add_argument("--secure", action="store_true",
                   help="TLS + SCRAM-SHA-512 + ACLs end to end: a CA and certificates under --dir/security, a user "
                        "per role with least privilege, the mirror, loads, books and dashboard over SASL_SSL "
                        "(docs/demo.md)")
    p.add_argument("--dashboard-listen", default="127.0.0.1:8500", metavar="HOST:PORT",
                   help="with --keep-running: where `ferry dashboard` serves (default 127.0.0.1:8500; port 0: any)")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.short:
        args.events, args.hours = min(args.events, 3000), min(args.hours, 2)
    if args.events < 1 or args.hours < 1 or args.hosts < 1 or args.partitions < 1 or args.chaos < 0:
        raise cli.UsageError("--events, --hours, --hosts and --partitions must be positive (--chaos not negative)")
    parse_listen(args.dashboard_listen)  # a ValueError now (exit 2), not after the whole run
    root: Path = args.dir.resolve()
    if args.clean and root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    keep_kind(root, args.mirror)  # before anything starts
    progress = DemoProgress()
    now_ms = int(time.time() * 1000)
    end_ms = now_ms // 3_600_000 * 3_600_000            # the last full hour ends at the top of this hour
    start_ms = end_ms - args.hours * 3_600_000
    hosts = [f"fe-{socket.gethostname()[:12]}-{i:02d}" for i in range(1, args.hosts + 1)]
    seed = args.seed if args.seed is not None else now_ms
    with ExitStack() as stack:
        security = DemoSecurity(root, TOPICS) if args.secure else None
        cluster = stack.enter_context(DemoCluster(root, progress, partitions=args.partitions, security=security))
        mirror = demo_mirror(args.mirror, cluster)
        try:
            cluster.start()
            cluster.create_topics(TOPICS)
            cluster.register_schemas(TOPICS)
            mirror.start()
            if args.chaos:
                produced = publish_under_chaos(mirror, args.chaos, args.events, start_ms, end_ms, hosts, seed)
            else:
                produced = cluster.publish(args.events, start_ms, end_ms, hosts, seed)
            wait_mirrored(mirror, produced)
            if args.chaos:
                progress.say(chaos_summary(mirror))
            hours = [start_ms + h * 3_600_000 for h in range(args.hours)]
            sql_opts = start_demo_metastore(root, root / "warehouse-state", stack, progress)
            run_hourly_dag(cluster, hours, short=args.short)
            report = print_report(cluster, mirror, TOPICS, hours)
            (root / "last-report.json").write_text(json.dumps(report, indent=2, default=str))
            if args.keep_running:
                url = _start_dashboard(stack, cluster, root, args.dashboard_listen)
                progress.say(f"dashboard: {url}")
                progress.say(f"query the warehouse: ferry sql {sql_opts} -e \"SELECT hr, count(*) FROM ferry.page_view "
                             "GROUP BY hr\"")
                progress.say("everything is still running (Ctrl-C to stop): "
                             f"live ZooKeeper {cluster.live_zk}, offline {cluster.offline_zk}")
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            progress.say("interrupted: shutting down")
            return 130
    return 0 if report.get("complete") else 1


def _start_dashboard(stack: ExitStack, cluster: DemoCluster, root: Path, listen: str) -> str:
    """`ferry dashboard` over the demo's clusters and loads' ledger; stopped when the demo stops."""
    host, port = parse_listen(listen)
    port = port or free_port()
    files = {}
    if cluster.security is not None:  # the monitor user on each side, as files
        files = {"command_config": cluster.security.client_file("offline", "monitor"),
                 "live_command_config": cluster.security.client_file("live", "monitor")}
    proc = start_dashboard(root / "dashboard.out", cluster.offline_zk, [cluster.live_zk],
                           root / "warehouse-state", host, port, **files)
    stack.callback(proc.stop)
    return f"http://{host}:{port}/"

"""`ferry dashboard --zookeeper OFFLINE_ZK (--live-zookeeper LIVE_ZK ... | --offline-only) [--state-dir DIR]
--listen HOST:PORT`."""

from __future__ import annotations

import argparse
import sys

from ferry.dashboard.sources import NoLiveClusterError, Sources
from ferry.zk.cli_args import add_zookeeper_argument, quiet_zookeeper_logs


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dashboard", help="serve the pipeline's console in the browser",
        description="Serve the completeness grid, flow, loads and clusters pages and their JSON endpoints "
        "(docs/dashboard.md). Point --zookeeper at the offline cluster (all tiers' audit counts meet there) and "
        "--live-zookeeper at each live cluster: the producers' counts as the live side knows them decide "
        "completeness, exactly as in `ferry audit report`.")
    add_zookeeper_argument(p, "ZooKeeper of the offline cluster")
    p.add_argument("--live-zookeeper", metavar="HOST:PORT/CHROOT", action="append", default=[],
                   help="a live cluster (repeatable): its producer counts, mirror lag and health")
    p.add_argument("--offline-only", action="store_true",
                   help="no live cluster: judge completeness from the counts that reached the offline cluster "
                        "alone (a stopped mirror then makes a partial hour look complete; every answer says so)")
    p.add_argument("--state-dir", metavar="DIR", help="the loads' state directory (its ledger.json)")
    p.add_argument("--listen", metavar="HOST:PORT", default="127.0.0.1:8500",
                   help="where to serve (default 127.0.0.1:8500)")
    p.add_argument("--mirror-group", default="ferry-mirror", help="the mirror's group (default ferry-mirror)")
    p.add_argument("--prometheus-url", metavar="URL", help="link the pages to this Prometheus")
    p.add_argument("--timeout-s", type=float, default=5.0, metavar="S",
                   help="give up on a cluster read after S seconds (the page then says it is unreachable)")
    p.set_defaults(func=run)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT")
    return host or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    # FastAPI and uvicorn only when serving: `ferry demo` imports this module for parse_listen
    import uvicorn

    from ferry.dashboard.app import create_app  # FastAPI's app: only when serving (above)

    quiet_zookeeper_logs()
    if not args.zookeeper:
        print("ferry dashboard: give --zookeeper HOST:PORT/CHROOT of the offline cluster", file=sys.stderr)
        return 2
    try:
        host, port = parse_listen(args.listen)
    except ValueError as e:
        print(f"ferry dashboard: {e}", file=sys.stderr)
        return 2
    try:
        sources = Sources(args.zookeeper, args.live_zookeeper, args.state_dir, offline_only=args.offline_only,
                          timeout_s=args.timeout_s, mirror_group=args.mirror_group)
    except NoLiveClusterError as e:
        print(f"ferry dashboard: {e}", file=sys.stderr)
        return 2
    if args.live_zookeeper:
        sources.start_lag_sampler()
    app = create_app(sources, args.prometheus_url)
    print(f"ferry dashboard: http://{host}:{port}/", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0

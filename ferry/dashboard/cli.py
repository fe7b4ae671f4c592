"""`ferry dashboard --zookeeper OFFLINE_ZK (--live-zookeeper LIVE_ZK ... | --offline-only) [--state-dir DIR]
--listen HOST:PORT`."""

from __future__ import annotations

import argparse

from ferry.dashboard.sources import NoLiveClusterError, Sources
from ferry.zk import cli_args as cli
from ferry.zk.cli_args import UsageError

DESCRIPTION = (
    "Serve the completeness grid, flow, loads and clusters pages and their JSON endpoints "
    "(docs/dashboard.md). Point --zookeeper at the offline cluster (all tiers' audit counts meet there) and "
    "--live-zookeeper at each live cluster: the producers' counts as the live side knows them decide "
    "completeness, exactly as in `ferry audit report`.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    cli.add_zookeeper_argument(p, "ZooKeeper of the offline cluster")
    cli.add_live_zookeeper_argument(p, "a live cluster: its producer counts, mirror lag and health")
    p.add_argument("--offline-only", action="store_true",
                   help="no live cluster: judge completeness from the counts that reached the offline cluster "
                        "alone (a stopped mirror then makes a partial hour look complete; every answer says so)")
    cli.add_state_dir_argument(p, "the loads' state directory (its ledger.json)")
    p.add_argument("--listen", metavar="HOST:PORT", default="127.0.0.1:8500",
                   help="where to serve (default 127.0.0.1:8500)")
    p.add_argument("--mirror-group", default="ferry-mirror", help="the mirror's group (default ferry-mirror)")
    p.add_argument("--prometheus-url", metavar="URL", help="link the pages to this Prometheus")
    cli.add_timeout_argument(p, "give up on a cluster read after SECONDS (the page then says it is unreachable)",
                             default=5.0)
    cli.add_http_security_arguments(p, "the dashboard")
    cli.add_client_config_argument(p, "the offline cluster's brokers (its `_audit`, the mirror's offline ends)")
    cli.add_client_config_argument(p, "the live clusters' brokers (producer counts, mirror lag); default: "
                                   "plaintext", flag="--live-command-config", dest="live_command_config")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT")
    return host or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    # FastAPI and uvicorn only when serving: `ferry demo` imports this module for parse_listen
    import uvicorn

    from ferry.dashboard.app import create_app  # FastAPI's app: only when serving (above)

    cli.quiet_zookeeper_logs()
    cli.require_zookeeper(args)
    host, port = parse_listen(args.listen)  # ValueError: exit 2 (ferry/cli_runner.py)
    security = cli.http_security(args, args.zookeeper)
    try:
        sources = Sources(args.zookeeper, args.live_zookeeper, args.state_dir, offline_only=args.offline_only,
                          timeout_s=args.timeout_s, mirror_group=args.mirror_group,
                          offline_client=cli.client_config(args),
                          live_client=cli.client_config(args, "live_command_config", environ={}))
    except NoLiveClusterError as e:  # neither --live-zookeeper nor --offline-only (or both): a usage error
        raise UsageError(str(e)) from None
    if args.live_zookeeper:
        sources.start_lag_sampler()
    app = create_app(sources, args.prometheus_url)
    print(f"ferry dashboard: {security.scheme}://{host}:{port}/", flush=True)
    uvicorn.run(security.asgi(app), host=host, port=port, log_level="warning", timeout_graceful_shutdown=5,
                **security.uvicorn_options())
    return 0

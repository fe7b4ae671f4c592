"""`ferry mirror`: run a mirror process, or `ferry mirror status` to see lag and ownership."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading

from ferry.mirror.link_cmd import LINK_ACTIONS, format_links, run_link
from ferry.mirror.link_status import links_status
from ferry.mirror.mirror_limits import COALESCE_BYTES, MAX_IN_FLIGHT
from ferry.mirror.mirror_maker import (
    ASSIGNMENT_STRATEGIES,
    DEFAULT_ASSIGNMENT_STRATEGY,
    DEFAULT_GROUP,
    MirrorConfig,
    MirrorMaker,
)
from ferry.mirror.status import format_status, mirror_status
from ferry.mirror.status_kafka import mirror_status_over_kafka
from ferry.wire.client_config import ClientConfig
from ferry.zk import cli_args as cli
from ferry.zk.cli_args import UsageError

DESCRIPTION = """\
Mirror topics of a live cluster into the offline cluster (paper section 4).

  ferry mirror --source-zookeeper ZK --target-zookeeper ZK --include REGEX [options]
      runs one mirror process: a member of consumer group --group on the LIVE ZooKeeper. Several
      processes with the same group share the partitions (round-robin over all matching partitions, or
      the paper's Algorithm 1 per topic with --assignment-strategy range). Record batches are
      copied as bytes to the same partition number of the offline cluster (keys, values, headers,
      timestamps and compression unchanged); missing offline topics are created with the live
      partition count and config (less min.insync.replicas and unclean.leader.election.enable) and
      --target-replication-factor; new topics and partitions are picked up without a restart. Copying
      is exactly once: a partition's new owner (after a crash, a rebalance, a lost ZooKeeper session)
      resumes where the offline log says the copy ends; nothing is lost or copied twice (docs/mirror.md).
      `_audit` is always mirrored (unless excluded), and the mirror publishes its own audit counts (tier
      "mirror", each message once) to the offline `_audit`.

  ferry mirror status [--source-zookeeper ZK] --target-zookeeper|--zookeeper ZK [--group NAME] [--json]
  ferry mirror status --bootstrap-server LIVE_HOST:PORT [--command-config FILE] [--zookeeper ZK] [--json]
      one table for both mirror kinds, per partition: live end, copied to (the standalone group's committed
      offset), lag in messages and in seconds, messages per second, owner or leader, and state (copying,
      paused, waiting for the live leader or an owner, failed with the error); for the standalone mirror
      group with --source-zookeeper, and for each of the offline cluster's mirror links (the embedded
      mirror) with the link's state. With --bootstrap-server (the live cluster) the standalone group's rows are
      read over the Kafka protocol (its owners and members are in the live ZooKeeper only); the links are in
      the offline ZooKeeper: --zookeeper.

  ferry mirror link create NAME --zookeeper OFFLINE_ZK --source-zookeeper LIVE_ZK --include REGEX
                    [--exclude REGEX] [--source-config FILE]
  ferry mirror link alter NAME --zookeeper OFFLINE_ZK [--source-zookeeper LIVE_ZK] [--include REGEX]
                    [--exclude REGEX|''] [--source-config FILE|'']
  ferry mirror link list|describe NAME|pause NAME|resume NAME|delete NAME --zookeeper OFFLINE_ZK
      the embedded mirror (no process to run): a link stored in the offline cluster's ZooKeeper makes
      the leader of each offline partition pull its live partition itself, exactly once; `describe`
      shows per partition the live end, the live offset copied to, the lag, the leader and its state.
"""


STATUS_FLAGS = ("--source-zookeeper", "--bootstrap-server", "--target-zookeeper", "--zookeeper", "--source-config",
                "--target-config",
                "--include", "--exclude", "--group", "--json", "--log-level", "--rate-interval")


class _Help(argparse.Action):
    """-h/--help: `ferry mirror status --help` shows only the flags status reads (the positional action is parsed
    before the flag, so the namespace already says which); `ferry mirror --help` shows everything."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show this help (`ferry mirror status --help`: the status flags) and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        if getattr(namespace, "action", None) == "status":
            parser = _status_parser(parser)
        parser.print_help()
        parser.exit()


def _status_parser(full: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A parser for help only, holding the mirror parser's status flags (same help texts: one definition)."""
    p = argparse.ArgumentParser(prog=f"{full.prog} status", add_help=False,
                                description="Print per partition of the standalone mirror group and of each "
                                "mirror link: live end, copied to, lag in messages and seconds, messages per "
                                "second, owner or leader, state; exit 0. Give --zookeeper OFFLINE_ZK (the links; with "
                                "--source-zookeeper LIVE_ZK the standalone group too) or --bootstrap-server LIVE "
                                "(the standalone group over the Kafka protocol; its owners are in ZooKeeper only).")
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    for action in full._actions:
        if set(action.option_strings) & set(STATUS_FLAGS):
            p._add_action(action)
    return p


LINKS_NEED_ZOOKEEPER = ("mirror links not shown: they, their state and their progress are in the offline "
                        "cluster's ZooKeeper (add --zookeeper OFFLINE_ZK)")
RATE_INTERVAL_S = 2.0  # status: twice the mirror's default commit interval
ADD_HELP = False  # its own -h/--help (_Help): `ferry mirror status --help` shows the status flags


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-h", "--help", action=_Help)
    p.add_argument("action", nargs="?", choices=["run", "status", "link"], default="run",
                   help="'run' (the default) mirrors; 'status' prints lag and owners and exits; 'link' manages "
                        "the embedded mirror's links (`ferry mirror link create|alter|list|describe|pause|resume|delete "
                        "[NAME] --zookeeper OFFLINE_ZK`)")
    p.add_argument("link_action", nargs="?", choices=LINK_ACTIONS, metavar="LINK_ACTION",
                   help=f"with 'link': {'|'.join(LINK_ACTIONS)}")
    p.add_argument("name", nargs="?", metavar="NAME", help="with 'link': the link's name")
    p.add_argument("--source-zookeeper", metavar="HOST:PORT/CHROOT",
                   help="ZooKeeper of the live cluster (the consumer group and its offsets live here; for `link "
                        "create`: the live cluster the link pulls from); required to run; for status: the "
                        "standalone group's lag (without it, status shows the mirror links only)")
    p.add_argument("--target-zookeeper", metavar="HOST:PORT/CHROOT",
                   help="ZooKeeper of the offline cluster (topics are created here; the mirror links are read "
                        "here for status); required to run, and for status unless --bootstrap-server is given")
    p.add_argument("--zookeeper", metavar="HOST:PORT/CHROOT",
                   help="`ferry mirror link` (and status): ZooKeeper of the offline cluster, where the links are "
                        "stored")
    cli.add_bootstrap_argument(p, "status: a broker of the LIVE cluster: the standalone mirror group's rows over "
                               "the Kafka protocol (OffsetFetch, ListOffsets, Fetch; TLS/SASL from --command-config), "
                               "instead of --source-zookeeper (owners and members then unknown); the mirror links "
                               "still need --zookeeper OFFLINE_ZK")
    cli.add_client_config_argument(p, "the live cluster's brokers (the mirror's user there: Read on the topics "
                                   "and the group; for `link create`: stored in the link and read on the offline "
                                   "brokers; --command-config: the same, Kafka's tools' spelling)",
                                   flag="--source-config", dest="source_config", aliases=("--command-config",))
    cli.add_client_config_argument(p, "the offline cluster's brokers (the mirror's user there: Read, Write and "
                                   "Create on the topics; Read: a resumed partition reads the offline log's end)", flag="--target-config", dest="target_config")
    cli.add_zk_tls_argument(p)
    p.add_argument("--source-zk-tls-config-file", metavar="FILE",
                   help="`link create`: the live ZooKeeper's TLS settings (zookeeper.ssl.client.enable, "
                        "zookeeper.ssl.truststore.location, ...; Kafka's --zk-tls-config-file), stored in the link "
                        "and read on the offline brokers")
    p.add_argument("--include", metavar="REGEX",
                   help="mirror topics whose whole name matches REGEX (required to run; for status: also "
                        "list matching partitions nobody committed yet)")
    p.add_argument("--exclude", metavar="REGEX", help="skip topics whose whole name matches REGEX")
    p.add_argument("--streams", type=int, default=1, metavar="N",
                   help="worker threads; the owned partitions are spread over them (default 1)")
    p.add_argument("--group", default=DEFAULT_GROUP, metavar="NAME",
                   help=f"consumer group of the mirror processes (default {DEFAULT_GROUP})")
    p.add_argument("--assignment-strategy", choices=ASSIGNMENT_STRATEGIES, default=DEFAULT_ASSIGNMENT_STRATEGY,
                   help="how the group's members split the partitions: roundrobin (default) deals all "
                        "matching partitions over the members, range is Algorithm 1 per topic; the group uses "
                        "roundrobin only once every member asks for it")
    p.add_argument("--consumer-id", metavar="ID",
                   help="this process's member id in the group (default: group_host-time-random)")
    cli.add_metrics_argument(p, "lag, throughput, errors, data lost")
    cli.add_http_security_arguments(p, "/metrics")
    p.add_argument("--datacenter", metavar="NAME",
                   help="datacenter named in the mirror's audit events (default: the offline brokers')")
    p.add_argument("--commit-interval", type=float, default=1.0, metavar="SECONDS",
                   help="how often each partition's checkpoint and committed offset are written to the live "
                        "ZooKeeper (default 1)")
    p.add_argument("--audit-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often the mirror tier's audit counts are published (default 5)")
    p.add_argument("--coalesce-bytes", type=int, default=COALESCE_BYTES, metavar="BYTES",
                   help=f"re-build consecutive small batches (each under 16 KiB) into one of up to BYTES before "
                        f"producing them offline (default {COALESCE_BYTES}; 0: copy every batch as it is). Keep "
                        f"it at or below the offline brokers' message.max.bytes")
    p.add_argument("--max-in-flight", type=int, default=MAX_IN_FLIGHT, metavar="N",
                   help=f"produce batches per partition sent to the offline cluster and not yet acknowledged, "
                        f"over as many rounds as it takes (1-{MAX_IN_FLIGHT}, default {MAX_IN_FLIGHT}: the offline "
                        f"broker dedupes that many; Kafka's max.in.flight.requests.per.connection)")
    p.add_argument("--target-replication-factor", type=int, metavar="N",
                   help="replication factor of the topics created offline (MirrorMaker 2's replication.factor; "
                        "default: the smaller of 3 and the number of offline brokers registered when the topic "
                        "is created). With fewer offline brokers than N, creating is retried until they are up")
    cli.add_switches(p, {
        "--no-audit": "do not publish the mirror tier's audit counts (they are on by default)",
        "--no-schemas": "do not copy the live schema registry into the offline one (copied by default: mirrored "
                        "messages keep their live schema ids)",
    })
    p.add_argument("--rate-interval", type=float, default=RATE_INTERVAL_S, metavar="SECONDS",
                   help=f"status: read the standalone group's committed offsets twice this far apart for its "
                        f"messages per second (default {RATE_INTERVAL_S}; above the mirror's --commit-interval; "
                        f"0: no rate, '-')")
    cli.add_json_argument(p, "status: print JSON instead of a table")
    cli.add_log_level_argument(p)


def run(args: argparse.Namespace) -> int:
    cli.configure_logging(args)
    cli.quiet_zookeeper_logs()  # until the mirror runs: a ZooKeeper that does not answer is one error line
    if args.action == "link":
        return run_link(args)
    if args.link_action is not None or args.name is not None:
        raise UsageError(f"unexpected argument {args.link_action or args.name!r} (only `ferry mirror link` takes "
                         "an action and a NAME)")
    if args.action == "status":
        return _status(args)
    for flag in ("source_zookeeper", "target_zookeeper"):
        if not getattr(args, flag):
            raise UsageError(f"--{flag.replace('_', '-')} HOST:PORT/CHROOT is required to run a mirror")
    return _run(args)


def _client_configs(args: argparse.Namespace) -> tuple[ClientConfig, ClientConfig]:
    """Each side's client settings: its flag's file, else $FERRY_CLIENT_CONFIG, else plaintext."""
    return cli.client_config(args, "source_config"), cli.client_config(args, "target_config")


def _status(args: argparse.Namespace) -> int:
    """The standalone mirror group's status (with --source-zookeeper) and the offline cluster's mirror links
    (the embedded mirror), one report for both kinds."""
    offline = args.target_zookeeper or args.zookeeper
    if args.bootstrap and args.source_zookeeper:
        raise UsageError("give --bootstrap-server or --source-zookeeper (the live cluster), not both")
    if not offline and not args.bootstrap:
        raise UsageError("`ferry mirror status` needs --bootstrap-server LIVE_HOST:PORT (the standalone mirror over "
                         "the Kafka protocol) or --zookeeper OFFLINE_ZK (the mirror links; with --source-zookeeper "
                         "LIVE_ZK the standalone mirror too)")
    if args.target_zookeeper and args.zookeeper and args.target_zookeeper != args.zookeeper:
        raise UsageError("--zookeeper and --target-zookeeper name two different offline clusters")
    if args.rate_interval < 0:
        raise UsageError(f"--rate-interval {args.rate_interval}: must be 0 or more seconds")
    source_client, target_client = _client_configs(args)
    status = None
    if args.bootstrap:
        status = mirror_status_over_kafka(args.bootstrap, args.group, args.include, args.exclude,
                                          client=source_client, rate_interval_s=args.rate_interval)
    elif args.source_zookeeper:
        status = mirror_status(args.source_zookeeper, offline, args.group, args.include, args.exclude,
                               source_client=source_client, target_client=target_client,
                               rate_interval_s=args.rate_interval)
    links = links_status(offline) if offline else None
    if args.json:
        doc = {**(status.to_dict() if status is not None else {}), "links": links}
        if links is None:
            doc["links_note"] = LINKS_NEED_ZOOKEEPER
        print(json.dumps(doc, indent=2))
        return 0
    if status is not None:
        print(format_status(status))
    if links is None:
        print(f"\nembedded mirror: {LINKS_NEED_ZOOKEEPER}")
    elif links or status is None:
        print(("\nembedded mirror:\n" if status is not None else "") + format_links(links))
    return 0


def _run(args: argparse.Namespace) -> int:
    if not args.include:
        raise UsageError("--include REGEX is required to run a mirror")
    listen = cli.metrics_listen(args)  # served below, on any host (MirrorConfig.metrics_port binds loopback)
    security = cli.http_security(args, args.target_zookeeper)  # the offline cluster's users
    source_client, target_client = _client_configs(args)
    config = MirrorConfig(
        source_zookeeper=args.source_zookeeper, target_zookeeper=args.target_zookeeper, include=args.include,
        exclude=args.exclude, streams=args.streams, group=args.group, consumer_id=args.consumer_id,
        metrics_port=None, datacenter=args.datacenter, commit_interval_s=args.commit_interval,
        audit_interval_s=args.audit_interval, assignment_strategy=args.assignment_strategy,
        audit=not args.no_audit, schemas=not args.no_schemas, coalesce_bytes=args.coalesce_bytes,
        max_in_flight=args.max_in_flight,
        target_replication_factor=args.target_replication_factor, source_client=source_client,
        target_client=target_client)
    config.validate()
    stop = threading.Event()

    def on_signal(_signum, _frame) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    mm = MirrorMaker(config)
    try:
        if listen is not None:
            mm.metrics.serve(listen[1], listen[0], security)
        mm.start()
    except BaseException:
        mm.stop()
        raise  # one line from ferry/cli_runner.py: exit 1 (ZooKeeper or the offline cluster unreachable)
    logging.getLogger("kazoo").setLevel(logging.WARNING)  # running: session chatter stays out, its warnings show
    try:
        while not stop.wait(1.0):
            pass
    finally:
        mm.stop()
    return 0

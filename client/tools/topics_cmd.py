"""`ferry topics create|list|describe|alter|delete|elect-leaders|reassign`: topics of one cluster, straight from
ZooKeeper, or with `--bootstrap-server` through the brokers' admin APIs (topics_bootstrap.py).

Topics live in the cluster registry (``/brokers/topics/<topic>`` under the cluster's chroot, with each
partition's leader, leader epoch and ISR in ``partitions/<p>/state``), so this tool talks to ZooKeeper,
not to a broker: it works while brokers are down, and brokers pick a new topic up through their watch.
Errors go to stderr in one line (ferry/cli_runner.py): exit status 2 for bad input, 1 when ZooKeeper does
not answer. `elect-leaders` (elect_leaders_cmd.py) and `reassign` /
`alter --replication-factor` (reassign_cmd.py) hand requests to the controller through ``/admin`` znodes.
"""

from __future__ import annotations

import argparse
import json
import sys

from ferry.client.tools import elect_leaders_cmd, reassign_cmd, topics_bootstrap
from ferry.client.tools.broker_description import describe_brokers, version_mismatch
from ferry.client.tools.topic_description import describe_topics, filter_partitions, print_topics
from ferry.wire.log_config import LogConfig
from ferry.zk import ClusterRegistry, TopicExistsError, UnknownTopicError
from ferry.zk import cli_args as cli
from ferry.zk.group_offsets import delete_topic_offsets

PLACEMENT = (
    "Replicas are spread over the live brokers as Kafka does: leaders round-robin from a broker picked by a "
    "hash of the topic name, followers shifted so that no broker holds two replicas of a partition."
)


DESCRIPTION = (
    "Manage the topics of one cluster. Topics are kept in ZooKeeper under the cluster's "
    "chroot: give --zookeeper, or --bootstrap-server to go through the brokers' admin APIs alone (Kafka 4's way; "
    "reassign needs ZooKeeper). " + PLACEMENT)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = cli.add_actions(parser)

    create = actions.add_parser(
        "create", help="create a topic",
        description="Create a topic and its partitions' initial state (leader = first replica, ISR = all "
        "replicas). " + PLACEMENT + " Refused when fewer brokers than --replication-factor are registered.",
    )
    create.add_argument("name", metavar="NAME", help="topic name: ASCII letters, digits, '.', '_', '-'; at most 249")
    create.add_argument("--partitions", type=int, metavar="N",
                        help="number of partitions (>= 1); required unless --replica-assignment is given")
    create.add_argument(
        "--replication-factor", type=int, metavar="R",
        help="copies of each partition, on R different live brokers (default 1: this tool talks to ZooKeeper, "
        "not to a broker, so the brokers' default.replication.factor does not apply; Kafka's CreateTopics "
        "with -1 uses it)",
    )
    create.add_argument(
        "--replica-assignment", metavar="B:B,B:B",
        help="explicit replica lists instead of --partitions/--replication-factor, as kafka-topics takes them: "
        "one entry per partition (comma-separated), brokers of a partition separated by ':', preferred leader "
        "first, e.g. 1:2,2:3,3:1",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config override, e.g. retention.ms=86400000, segment.bytes=104857600 or "
        "min.insync.replicas=2 (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed (exit 0) without changes if the topic already exists"
    )

    lst = actions.add_parser("list", help="list topic names", description="Print the cluster's topics, one per line.")

    describe = actions.add_parser(
        "describe",
        help="show partitions: leader, replicas, in-sync replicas",
        description="For each partition, as kafka-topics prints it: Topic, Partition, Leader (none when the "
        "partition has no leader), Replicas, Isr; then the leader's host:port and whether it is registered.",
    )
    describe.add_argument("name", metavar="NAME", nargs="?", help="the topic (default: every topic)")
    describe.add_argument("--under-replicated", "--under-replicated-partitions", dest="under_replicated",
                          action="store_true",
                          help="only the partitions whose ISR is shorter than their replica list")
    describe.add_argument("--unavailable", "--unavailable-partitions", dest="unavailable", action="store_true",
                          help="only the partitions without a leader or whose leader is not registered")

    alter = actions.add_parser(
        "alter", help="add partitions to a topic, or change its replication factor",
        description="Grow a topic to N partitions (they cannot shrink; the new partitions get the topic's "
        "replication factor), or change its replication factor: a reassignment over every registered broker "
        "in which each partition keeps its current replicas first (`ferry topics reassign --generate "
        "--replication-factor R` shows the same plan), a dry run unless --execute.",
    )
    alter.add_argument("name", metavar="NAME", help="the topic")
    alter.add_argument("--partitions", type=int, metavar="N", help="the new total partition count")
    alter.add_argument("--replication-factor", type=int, metavar="R",
                       help="the new replication factor (the controller copies the data, then switches)")
    alter.add_argument("--execute", action="store_true",
                       help="with --replication-factor: start the reassignment (default: print the plan only)")

    delete = actions.add_parser(
        "delete", help="delete topics",
        description="Delete topics: their partitions' logs are removed from every broker, their committed offsets "
        "go with them (kafka-topics --delete). No dry run.")
    delete.add_argument("names", metavar="NAME", nargs="+", help="the topics")
    extra = elect_leaders_cmd.add_parsers(actions) + reassign_cmd.add_parsers(actions)
    for sub in (create, lst, describe, alter, delete, *extra):
        cli.add_zookeeper_argument(sub, "the cluster's ZooKeeper connect string, e.g. 127.0.0.1:2181/ferry/live",
                                   with_timeout=True)
        cli.add_bootstrap_argument(sub)
        cli.add_client_config_argument(sub, "the brokers (with --bootstrap-server)")
    for sub in (lst, describe):
        cli.add_json_argument(sub)


def run(args: argparse.Namespace) -> int:
    cli.quiet_zookeeper_logs()
    cli.require_one_cluster(args)
    _check_usage(args)
    config = _parse_configs(getattr(args, "config", []))
    if args.bootstrap:  # Kafka 4's way: the brokers' admin APIs alone
        assignment = getattr(args, "replica_assignment", None)
        return topics_bootstrap.run(args, config, _parse_assignment(assignment) if assignment else None)
    read_only = args.action not in ("create", "alter")  # never create a mistyped chroot
    with ClusterRegistry(args.zookeeper, timeout=args.timeout, create=not read_only) as registry:
        return _ACTIONS[args.action](registry, args, config)


def _check_usage(args: argparse.Namespace) -> None:
    """What the flags alone tell, before ZooKeeper is asked anything."""
    if args.action == "create":
        if args.replica_assignment is not None and (args.partitions is not None or args.replication_factor is not None):
            raise cli.UsageError("--replica-assignment cannot be combined with --partitions or --replication-factor")
        if args.replica_assignment is None and args.partitions is None:
            raise cli.UsageError("--partitions N is required (or --replica-assignment)")
    if args.action == "alter" and (args.partitions is None) == (args.replication_factor is None):
        raise cli.UsageError("give one of --partitions N and --replication-factor R")


def _delete(registry: ClusterRegistry, args: argparse.Namespace, _config: dict[str, str]) -> int:
    for name in args.names:
        if registry.topic(name) is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
    for name in args.names:
        registry.delete_topic(name)
        delete_topic_offsets(registry.client, name)  # as DeleteTopics does: the groups' offsets go with it
    return 0


def _create(registry: ClusterRegistry, args: argparse.Namespace, config: dict[str, str]) -> int:
    assignment = _parse_assignment(args.replica_assignment) if args.replica_assignment is not None else None
    try:
        if assignment is not None:
            info = registry.create_topic_with_assignment(args.name, assignment, config)
        else:
            rf = 1 if args.replication_factor is None else args.replication_factor
            info = registry.create_topic(args.name, args.partitions, config, replication_factor=rf)
    except TopicExistsError:
        if not args.if_not_exists:
            raise
        print(f"Topic {args.name} already exists.")
        return 0
    rf = len(info.replicas[0])
    print(f"Created topic {info.name} with {info.partition_count} partitions, replication factor {rf}.")
    return 0


def _list(registry: ClusterRegistry, args: argparse.Namespace, _config: dict[str, str]) -> int:
    names = sorted(registry.topics())
    if args.json:
        print(json.dumps(names))
    else:
        for name in names:
            print(name)
    return 0


def _describe(registry: ClusterRegistry, args: argparse.Namespace, _config: dict[str, str]) -> int:
    topics = None
    if args.name:
        info = registry.topic(args.name)
        if info is None:
            raise UnknownTopicError(f"topic {args.name!r} does not exist")
        topics = {args.name: info}
    brokers = registry.brokers()
    docs = describe_topics(registry, topics, brokers)
    if args.name and not docs:
        raise UnknownTopicError(f"topic {args.name!r} does not exist")
    filtered = filter_partitions(docs, args.under_replicated, args.unavailable)
    mismatch = version_mismatch(brokers)
    if mismatch:  # on stderr: the listing on stdout keeps kafka-topics' shape for scripts
        print(f"ferry topics describe: warning: {mismatch}", file=sys.stderr)
    print_topics(docs, filtered=filtered, as_json=args.json, one=bool(args.name))
    if not filtered and not args.json:  # then the cluster's live brokers and what each runs
        for b in describe_brokers(brokers):
            print(f"BrokerId: {b['id']}\tAddress: {b['address']}\tDatacenter: {b['datacenter'] or '-'}"
                  f"\tVersion: {b['ferry_version']}\tNative: {b['native']}")
    return 0


def _alter(registry: ClusterRegistry, args: argparse.Namespace, config: dict[str, str]) -> int:
    if args.replication_factor is not None:
        return reassign_cmd.alter_replication_factor(registry, args, config)
    before = registry.topic(args.name)
    info = registry.add_partitions(args.name, args.partitions)
    old = before.partition_count if before else "?"
    print(f"Topic {info.name}: {old} -> {info.partition_count} partitions.")
    return 0


_ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete,
            "elect-leaders": elect_leaders_cmd.elect_leaders, "reassign": reassign_cmd.reassign}


def _parse_configs(items: list[str]) -> dict[str, str]:
    out = cli.parse_key_values(items, "--config", "retention.ms=86400000")
    LogConfig.from_topic_config(out)  # ValueError naming the setting: refused before anything is written
    return out


def _parse_assignment(text: str) -> dict[int, list[int]]:
    """kafka-topics' ``--replica-assignment``: ``1:2,2:3`` -> {0: [1, 2], 1: [2, 3]} (checked by the registry)."""
    out: dict[int, list[int]] = {}
    for p, entry in enumerate(text.split(",")):
        try:
            out[p] = [int(b) for b in entry.split(":")]
        except ValueError:
            raise cli.UsageError(f"--replica-assignment {text!r}: partition {p} ({entry!r}) must be broker ids "
                             "separated by ':' (e.g. 1:2,2:3)") from None
    return out

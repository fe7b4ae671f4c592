"""`ferry topics create|list|describe|alter`: topics of one cluster, straight from ZooKeeper.

Topics live in the cluster registry (``/brokers/topics/<topic>`` under the cluster's chroot), so this
tool talks to ZooKeeper, not to a broker: it works while brokers are down, and brokers pick a new
topic up through their watch. Errors go to stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ferry.wire.log_config import LogConfig
from ferry.zk import ClusterRegistry, RegistryError, TopicExistsError, UnknownTopicError
from ferry.zk.cli_args import UsageError, add_zookeeper_argument, quiet_zookeeper_logs, require_zookeeper


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "topics",
        help="create, list, describe and alter topics",
        description="Manage the topics of one cluster. Topics are kept in ZooKeeper under the cluster's chroot; "
        "partitions are placed round-robin over the live brokers (replication factor 1).",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser(
        "create", help="create a topic", description="Create a topic; its partitions go round-robin over live brokers."
    )
    create.add_argument("name", metavar="NAME", help="topic name: ASCII letters, digits, '.', '_', '-'; at most 249")
    create.add_argument("--partitions", type=int, required=True, metavar="N", help="number of partitions (>= 1)")
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config override, e.g. retention.ms=86400000 or segment.bytes=104857600 (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed (exit 0) without changes if the topic already exists"
    )

    lst = actions.add_parser("list", help="list topic names", description="Print the cluster's topics, one per line.")

    describe = actions.add_parser(
        "describe",
        help="show partitions, leaders and their brokers",
        description="For each partition: its leader broker, that broker's host:port and whether it is alive.",
    )
    describe.add_argument("name", metavar="NAME", nargs="?", help="the topic (default: every topic)")

    alter = actions.add_parser(
        "alter", help="add partitions to a topic", description="Grow a topic to N partitions (they cannot shrink)."
    )
    alter.add_argument("name", metavar="NAME", help="the topic")
    alter.add_argument("--partitions", type=int, required=True, metavar="N", help="the new total partition count")

    for sub in (create, lst, describe, alter):
        add_zookeeper_argument(sub, "the cluster's ZooKeeper connect string, e.g. 127.0.0.1:2181/ferry/live",
                               with_timeout=True)
    for sub in (lst, describe):
        sub.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    quiet_zookeeper_logs()
    try:
        require_zookeeper(args)
        config = _parse_configs(getattr(args, "config", []))
        read_only = args.action in ("list", "describe")
        with ClusterRegistry(args.zookeeper, timeout=args.timeout, create=not read_only) as registry:
            return _ACTIONS[args.action](registry, args, config)
    except (UsageError, RegistryError, ValueError) as exc:
        print(f"ferry topics {args.action}: error: {exc}", file=sys.stderr)
        return 2


def _create(registry: ClusterRegistry, args: argparse.Namespace, config: dict[str, str]) -> int:
    try:
        info = registry.create_topic(args.name, args.partitions, config)
    except TopicExistsError:
        if not args.if_not_exists:
            raise
        print(f"Topic {args.name} already exists.")
        return 0
    print(f"Created topic {info.name} with {info.partition_count} partitions.")
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
    if args.name:
        info = registry.topic(args.name)
        if info is None:
            raise UnknownTopicError(f"topic {args.name!r} does not exist")
        topics = {args.name: info}
    else:
        topics = registry.topics()
    brokers = registry.brokers()
    docs: list[dict[str, Any]] = []
    for name, info in sorted(topics.items()):
        parts = []
        for p, leader in sorted(info.partitions.items()):
            broker = brokers.get(leader)
            parts.append(
                {
                    "partition": p,
                    "leader": leader,
                    "broker": broker.address if broker else None,
                    "datacenter": broker.datacenter if broker else None,
                    "alive": broker is not None,
                }
            )
        docs.append({"topic": name, "partitions": parts, "config": info.config})
    if args.json:
        print(json.dumps(docs if not args.name else docs[0], indent=2))
        return 0
    for doc in docs:
        config = ",".join(f"{k}={v}" for k, v in sorted(doc["config"].items())) or "-"
        print(f"Topic: {doc['topic']}\tPartitionCount: {len(doc['partitions'])}\tConfig: {config}")
        for part in doc["partitions"]:
            where = part["broker"] or "unknown"
            alive = "yes" if part["alive"] else "NO (broker not registered)"
            print(f"\tPartition: {part['partition']}\tLeader: {part['leader']}\tBroker: {where}\tAlive: {alive}")
    return 0


def _alter(registry: ClusterRegistry, args: argparse.Namespace, _config: dict[str, str]) -> int:
    before = registry.topic(args.name)
    info = registry.add_partitions(args.name, args.partitions)
    old = before.partition_count if before else "?"
    print(f"Topic {info.name}: {old} -> {info.partition_count} partitions.")
    return 0


_ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter}


def _parse_configs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--config {item!r} must look like KEY=VALUE (e.g. retention.ms=86400000)")
        if key.strip() in out:
            raise UsageError(f"--config {key.strip()} given twice")
        out[key.strip()] = value
    LogConfig.from_topic_config(out)  # ValueError naming the setting: refused before anything is written
    return out

"""`ferry topics ... --bootstrap-server`: the same actions as over ZooKeeper (topics_cmd.py), through the brokers'
admin APIs (CreateTopics, DeleteTopics, CreatePartitions, Metadata, DescribeConfigs), as Kafka 4's kafka-topics.

Printing is kafka-topics' and the same as the ZooKeeper path's (topic_description.py); what only ZooKeeper
knows (each broker's ferry release, a leader's epoch) is left out. `reassign` and `alter --replication-factor`
hand plans to the controller through ZooKeeper and stay there.
"""

from __future__ import annotations

import argparse
import json
import sys

from ferry.client.cluster_admin import ClusterAdmin
from ferry.client.errors import KafkaResponseError
from ferry.client.tools.topic_description import filter_partitions, print_topics
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk.cli_args import UsageError

ZOOKEEPER_ONLY = ("reassign", "elect-leaders")


def open_admin(args: argparse.Namespace) -> ClusterAdmin:
    """The admin client of --bootstrap-server. Client settings (TLS, SASL) from `--command-config FILE` join here,
    as the settings dict, once that flag exists on the command (zk/cli_args.py)."""
    return ClusterAdmin(args.bootstrap, settings=getattr(args, "client_settings", None) or {},
                        timeout_s=args.timeout)


def run(args: argparse.Namespace, config: dict[str, str], assignment: dict[int, list[int]] | None) -> int:
    if args.action in ZOOKEEPER_ONLY or (args.action == "alter" and args.replication_factor is not None):
        what = "alter --replication-factor" if args.action == "alter" else args.action
        raise UsageError(f"{what} hands its plan to the controller through ZooKeeper: give --zookeeper "
                         "HOST:PORT/CHROOT instead of --bootstrap-server")
    admin = open_admin(args)
    if args.action == "create":
        return _create(admin, args, config, assignment)
    if args.action == "list":
        names = admin.topic_names()
        for line in [json.dumps(names)] if args.json else names:
            print(line)
        return 0
    if args.action == "describe":
        docs = admin.describe_topics([args.name] if args.name else None)
        filtered = filter_partitions(docs, args.under_replicated, args.unavailable)
        print_topics(docs, filtered=filtered, as_json=args.json, one=bool(args.name))
        return 0
    if args.action == "delete":
        admin.delete_topics(args.names)
        return 0
    if args.action == "alter":
        before = admin.describe_topics([args.name])[0]
        admin.create_partitions(args.name, args.partitions)
        print(f"Topic {args.name}: {len(before['partitions'])} -> {args.partitions} partitions.")
        return 0
    raise UsageError(f"{args.action} is not available with --bootstrap-server")


def _create(admin: ClusterAdmin, args: argparse.Namespace, config: dict[str, str],
            assignment: dict[int, list[int]] | None) -> int:
    try:
        admin.create_topic(args.name, args.partitions, args.replication_factor, assignment, config)
    except KafkaResponseError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS or not args.if_not_exists:
            raise
        print(f"Topic {args.name} already exists.", file=sys.stderr)
        return 0
    print(f"Created topic {args.name}.")
    return 0

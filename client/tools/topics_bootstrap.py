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
from ferry.client.tools.bootstrap_admin import open_admin
from ferry.client.tools.topic_description import filter_partitions, print_topics
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk.cli_args import UsageError

ZOOKEEPER_ONLY = ("reassign",)


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
    if args.action == "elect-leaders":
        return _elect_leaders(admin, args)
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


def _elect_leaders(admin: ClusterAdmin, args: argparse.Namespace) -> int:
    """kafka-leader-election --election-type preferred: one line per outcome; exit 1 when a partition could not
    be moved (its preferred replica is out of the ISR, or the controller did not act in time)."""
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition goes with --topic")
    partitions = None
    if args.topic is not None:
        doc = admin.describe_topics([args.topic])[0]
        known = [p["partition"] for p in doc["partitions"]]
        if args.partition is not None and args.partition not in known:
            raise UsageError(f"topic {args.topic!r} has no partition {args.partition}")
        partitions = [(args.topic, p) for p in known if args.partition is None or p == args.partition]
    admin.timeout_s = max(admin.timeout_s, args.election_timeout)
    results = admin.elect_preferred_leaders(partitions)
    elected = [tp for tp, err in sorted(results.items()) if err is None]
    already = [tp for tp, err in sorted(results.items()) if err is not None and err.name() == "ELECTION_NOT_NEEDED"]
    failed = {tp: err for tp, err in sorted(results.items()) if err is not None and tp not in already}
    if elected:
        print(f"Successfully completed leader election (PREFERRED) for partitions {_names(elected)}")
    if already:
        print(f"Valid replica already elected for partitions {_names(already)}")
    for (t, p), err in failed.items():
        print(f"Error completing leader election (PREFERRED) for partition: {t}-{p}: {err.name()} ({err.str()})",
              file=sys.stderr)
    return 1 if failed else 0


def _names(partitions: list[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions)

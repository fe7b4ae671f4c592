"""`ferry consume`: the console consumer — all partitions directly, or as one member of a group."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ferry.client.broker_metadata import quiet_librdkafka
from ferry.client.consumer_connector import ConsumerConnector
from ferry.client.errors import BrokerUnavailableError, UnknownTopicError
from ferry.client.leader_lookup import check_login
from ferry.client.message import MessageAndMetadata
from ferry.client.simple_consumer import SimpleConsumer
from ferry.zk import ClusterRegistry
from ferry.zk import cli_args as cli
from ferry.zk.cli_args import UsageError

DESCRIPTION = (
    "Print messages of a topic, one per line. Without --group it reads every partition "
    "directly (no offsets are stored). With --group it joins that consumer group as one member: it gets "
    "its share of the partitions (the paper's Algorithm 1, through ZooKeeper), starts at the group's "
    "committed offsets and commits what it printed when it stops. Exit 2 on bad input (or a topic that "
    "does not exist), 1 when no broker answers.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True, metavar="T", help="topic to read")
    cli.add_cluster_arguments(p, "the cluster's ZooKeeper",
                              "without --group: brokers to read from instead of looking them up in ZooKeeper")
    cli.add_client_config_argument(p, aliases=("--consumer.config",))
    p.add_argument("--group", metavar="G", help="join consumer group G (offsets stored in ZooKeeper)")
    p.add_argument("--assignment-strategy", choices=["range", "roundrobin"], default="range",
                   help="how the group divides partitions: range (the paper's Algorithm 1, per topic) or "
                        "roundrobin (dealt across all topics; every member must use it, else the group uses "
                        "range)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset (default: only new messages). With --group this applies "
                   "only to partitions the group has no committed offset for")
    p.add_argument("--max-messages", type=int, metavar="N", help="stop after N messages")
    p.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"), default="read_committed",
                   help="read_committed (default): only committed transactions' records, up to the last stable "
                   "offset; read_uncommitted: every record up to the high watermark, aborted ones too "
                   "(kafka-console-consumer's --isolation-level)")
    cli.add_timeout_argument(p, "stop after SECONDS without a message (default: wait for ever)")
    p.add_argument("--value-format", choices=("raw", "avro"), default="raw",
                   help="raw (default): values as they are; avro: values in the registry's framing decoded with "
                   "the writer's schema from the registry (in --zookeeper's cluster) and printed as one JSON "
                   "object per line, like kafka-avro-console-consumer (bytes as base64)")
    p.add_argument("--print-offsets", action="store_true", help="prefix each line with 'partition<TAB>offset<TAB>'")
    p.add_argument("--print-keys", action="store_true", help="prefix each value with 'key<TAB>' (after offsets)")


Write = Callable[[MessageAndMetadata], None]


def _formatter(args: argparse.Namespace, decode: Callable[[bytes | None], bytes] | None = None) -> Write:
    """The line writer; ``decode`` turns a value into its printed form (avro -> JSON)."""
    out = sys.stdout.buffer

    def write(m: MessageAndMetadata) -> None:
        parts = []
        if args.print_offsets:
            parts.append(f"{m.partition}\t{m.offset}\t".encode())
        if args.print_keys:
            parts.append((m.key or b"") + b"\t")
        parts.append((decode(m.value) if decode else (m.value or b"")) + b"\n")
        out.write(b"".join(parts))
    return write


def run(args: argparse.Namespace) -> int:
    cli.quiet_zookeeper_logs()
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be at least 1")
    if args.timeout_s is not None and args.timeout_s <= 0:
        raise UsageError("--timeout must be positive")
    if args.group and not args.zookeeper:
        raise UsageError(f"--group needs --zookeeper {cli.ZK_METAVAR} (or ${cli.ENV_ZOOKEEPER})")
    cli.require_cluster(args)
    if args.value_format == "avro":
        cli.require_registry(args)
    args.client_config = cli.client_config(args)
    check_login(args.client_config, args.bootstrap, None if args.bootstrap else args.zookeeper)
    n = 0
    registry = None
    try:
        decode = None
        if args.value_format == "avro":  # ferry/cli.py hands in ferry.schemas.console_formats
            registry = args.value_formats.open_registry(args.zookeeper)
            decode = args.value_formats.json_decoder(registry)
        write = _formatter(args, decode)
        if args.group:
            n = _consume_group(args, write)
        else:
            n = _consume_direct(args, write)
    finally:
        if registry is not None:
            registry.close()
        try:
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass
    print(f"ferry consume: {n} message(s)", file=sys.stderr)
    return 0


def _consume_direct(args: argparse.Namespace, write: Write) -> int:
    n = 0
    with SimpleConsumer(args.bootstrap, None if args.bootstrap else args.zookeeper,
                        isolation_level=args.isolation_level, client_config=args.client_config) as consumer:
        try:
            consumer.partitions(args.topic)  # UnknownTopicError (or BrokerUnavailableError) before anything else
        except BrokerUnavailableError:
            with quiet_librdkafka():
                consumer.close()  # librdkafka hands over its queued connect failures when closed: quiet too
            raise
        start = "earliest" if args.from_beginning else "latest"
        try:
            for m in consumer.read(args.topic, start, until_end=False, max_messages=args.max_messages,
                                   idle_timeout_s=args.timeout_s):
                write(m)
                n += 1
        except KeyboardInterrupt:
            pass
    return n


def _consume_group(args: argparse.Namespace, write: Write) -> int:
    with ClusterRegistry(args.zookeeper, create=False) as registry:
        if registry.topic(args.topic) is None:
            raise UnknownTopicError(f"topic {args.topic!r} does not exist (create it with `ferry topics create`)")
    connector = ConsumerConnector(args.group, args.zookeeper,
                                  auto_offset_reset="earliest" if args.from_beginning else "latest",
                                  consumer_timeout_s=args.timeout_s,
                                  assignment_strategy=args.assignment_strategy,
                                  fetcher_overrides={"isolation.level": args.isolation_level},
                                  client_config=args.client_config)
    n = 0
    try:
        (stream,) = connector.create_message_streams({args.topic: 1})[args.topic]
        for m in stream:
            write(m)
            n += 1
            if args.max_messages is not None and n >= args.max_messages:
                break
    except KeyboardInterrupt:
        pass
    finally:
        connector.shutdown()  # commits exactly what was printed (the stream marks a message consumed when taken)
    return n

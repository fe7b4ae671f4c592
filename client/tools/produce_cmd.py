"""`ferry produce`: the console producer — one message per line of stdin, through the audited Producer."""

from __future__ import annotations

import argparse
import sys

from ferry.client.broker_metadata import quiet_librdkafka
from ferry.client.errors import ClientError
from ferry.client.leader_lookup import check_login
from ferry.client.producer import Producer
from ferry.zk import cli_args as cli
from ferry.zk.cli_args import UsageError


class DeliveryError(RuntimeError):
    """Messages the brokers did not acknowledge (a runtime failure: exit 1)."""


DESCRIPTION = (
    "Publish each line of stdin as one message (the trailing newline is not part of it). "
    "Messages carry the current time as event time and the host in the ferry.host header, and are counted "
    "in the audit (tier producer, published to _audit). Exit 0 when every line was acknowledged, "
    "2 on bad input (raw lines before a bad line are still sent; with --value-format avro every line is "
    "validated first and nothing is sent when one is refused), 1 when the brokers are unreachable or a "
    "message was not delivered.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    cli.add_cluster_arguments(p, "find the brokers (and the schema registry) in this cluster's ZooKeeper",
                              "brokers to connect to (then --zookeeper is only the schema registry's, for avro)")
    cli.add_client_config_argument(p, aliases=("--producer.config",))
    p.add_argument("--topic", required=True, metavar="T", help="topic to publish to (must exist)")
    p.add_argument("--key-separator", metavar="S",
                   help="split each line at the first S into key and value (a line without S is an error); "
                   "with a key, messages are partitioned by key hash unless --partitioner says otherwise")
    p.add_argument("--partitioner", choices=("random", "key"),
                   help="random (default without keys) or key = murmur2 hash of the key (default with "
                   "--key-separator)")
    p.add_argument("--acks", choices=("all", "-1", "1", "0"), default="all",
                   help="acknowledgement the broker gives: all/-1 = flushed to disk (default), 1 = written, 0 = none")
    p.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="lz4",
                   help="batch compression codec (default lz4)")
    p.add_argument("--linger-ms", type=int, default=5, metavar="MS",
                   help="wait up to MS milliseconds to fill a batch (default 5)")
    p.add_argument("--batch-size", type=int, default=1_000_000, metavar="BYTES",
                   help="maximum batch size in bytes (default 1000000)")
    p.add_argument("--no-idempotence", action="store_true",
                   help="turn off the idempotent producer (implied by --acks 0/1)")
    p.add_argument("--application", default="ferry-console-producer", metavar="NAME",
                   help="application name recorded in audit events (default ferry-console-producer)")
    p.add_argument("--datacenter", metavar="NAME",
                   help="datacenter recorded in audit events (default: the brokers' datacenter)")
    p.add_argument("--no-audit", action="store_true", help="do not count messages or publish audit events")
    cli.add_timeout_argument(p, "wait at most SECONDS at the end for outstanding acknowledgements", default=60.0)
    p.add_argument("--value-format", choices=("raw", "avro"), default="raw",
                   help="raw (default): each line is the value as is; avro: each line is a JSON record, written "
                   "as Avro with the registry's framing (magic byte 0, schema id) under --schema-subject's latest "
                   "schema, like kafka-avro-console-producer. The whole input is read and validated before "
                   "anything is sent")
    p.add_argument("--schema-subject", metavar="SUBJECT",
                   help="with --value-format avro: the registry subject whose latest schema the lines must match "
                   "(default: the topic name, ferry's subject for a topic's values)")


def run(args: argparse.Namespace) -> int:
    cli.quiet_zookeeper_logs()
    cli.require_cluster(args)
    client_config = cli.client_config(args)
    if args.key_separator is not None and args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    sep = args.key_separator.encode() if args.key_separator is not None else None
    partitioner = args.partitioner or ("key" if sep is not None else "random")
    idempotent = not args.no_idempotence and args.acks in ("all", "-1")
    avro_messages = None
    if args.value_format == "avro":
        cli.require_registry(args)
        try:
            avro_messages = _encode_stdin(args, sep)
        except ValueError as exc:
            raise UsageError(f"{exc}; nothing was sent") from None
    elif args.schema_subject:
        raise UsageError("--schema-subject needs --value-format avro")
    errors: list[str] = []

    def on_error(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    check_login(client_config, args.bootstrap, None if args.bootstrap else args.zookeeper)
    with quiet_librdkafka():  # connecting: when no broker answers, the one error line says so
        producer = Producer(args.bootstrap, None if args.bootstrap else args.zookeeper,
                            application=args.application, datacenter=args.datacenter, acks=args.acks,
                            linger_ms=args.linger_ms, batch_size=args.batch_size, compression=args.compression,
                            partitioner=partitioner, enable_idempotence=idempotent, audit=not args.no_audit,
                            client_config=client_config)
        try:
            producer.partitions_for(args.topic)  # the topic exists and a broker answers, before reading stdin
        except ClientError:
            producer.close(0)  # librdkafka hands over its queued connect failures when closed: quiet too
            raise
    sent = 0
    bad: str | None = None
    try:
        send, topic = producer.send, args.topic
        for value, key in avro_messages or ():
            send(topic, value, key, on_delivery=on_error)
            sent += 1
        for lineno, line in _lines() if avro_messages is None else ():
            if sep is None:
                send(topic, line, on_delivery=on_error)
            else:
                key, found, value = line.partition(sep)
                if not found:
                    bad = f"line {lineno} has no key separator {args.key_separator!r}; it and the lines after it were not sent"
                    break
                send(topic, value, key, on_delivery=on_error)
            sent += 1
    except KeyboardInterrupt:
        bad = "interrupted; lines read so far were sent"
    finally:
        left = producer.close(args.timeout_s)
    delivered = sent - len(errors) - left
    if errors or left:
        first = f" (first error: {errors[0]})" if errors else ""
        raise DeliveryError(f"{len(errors) + left} of {sent} message(s) not delivered to {args.topic}{first}")
    print(f"ferry produce: {delivered} of {sent} message(s) acknowledged by {args.topic}", file=sys.stderr)
    if bad:
        raise UsageError(bad)
    return 0


def _lines():
    """(lineno, line) of stdin without the line end."""
    for lineno, raw in enumerate(sys.stdin.buffer, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        yield lineno, line[:-1] if line.endswith(b"\r") else line


def _encode_stdin(args: argparse.Namespace, sep: bytes | None) -> list[tuple[bytes, bytes | None]]:
    """Every line of stdin as a framed Avro value (and its key): all of them, or a ValueError naming the first
    line and field that does not fit, before the producer sends anything (args.value_formats: ferry/cli.py)."""
    formats = args.value_formats

    def split():
        for lineno, line in _lines():
            if not line.strip():
                continue  # a blank line (often the last) is no record
            if sep is None:
                yield lineno, line, None
                continue
            key, found, value = line.partition(sep)
            if not found:
                raise ValueError(f"line {lineno} has no key separator {args.key_separator!r}")
            yield lineno, value, key

    with formats.open_registry(args.zookeeper) as registry:
        return formats.encode_lines(registry, args.schema_subject, args.topic, split())

"""`ferry broker`: run one broker (the Kafka wire protocol over the paper's log, registered in ZooKeeper)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import textwrap
import threading
import time

from ferry.broker.server.broker_config import BrokerConfig, ConfigError, read_properties
from ferry.broker.server.kafka_server import KafkaServer
from ferry.wire.protocol.api_keys import ADVERTISED, ApiKey
from ferry.zk.cli_args import add_metrics_argument

# flag dest -> Kafka-style property key (flags override the --config file).
FLAG_KEYS: dict[str, str] = {
    "id": "broker.id",
    "data_dir": "log.dirs",
    "zookeeper": "zookeeper.connect",
    "datacenter": "datacenter",
    "log_segment_bytes": "log.segment.bytes",
    "log_roll_ms": "log.roll.ms",
    "retention_ms": "log.retention.ms",
    "retention_bytes": "log.retention.bytes",
    "flush_messages": "log.flush.interval.messages",
    "flush_ms": "log.flush.interval.ms",
    "max_message_bytes": "message.max.bytes",
    "max_request_bytes": "socket.request.max.bytes",
    "num_partitions": "num.partitions",
    "zk_session_timeout_ms": "zookeeper.session.timeout.ms",
    "retention_check_interval_ms": "log.retention.check.interval.ms",
    "connections_max_idle_ms": "connections.max.idle.ms",
    "audit_topic_partitions": "audit.topic.partitions",
    "metrics_port": "metrics.port",
    "metrics_listen": "metrics.listen",
}

# The APIs in Kafka's spelling (ApiVersions, OffsetForLeaderEpoch, ...), from the table ApiVersions answers with.
SERVED_APIS = ", ".join("".join(w.capitalize() for w in ApiKey(k).name.split("_")) for k in sorted(ADVERTISED))

DESCRIPTION = textwrap.fill(
    "Run a broker: partitions stored as segmented logs in --data-dir, served over the Kafka protocol "
    f"({SERVED_APIS}) on --listen, registered in ZooKeeper under the cluster chroot of --zookeeper. Stop with "
    "SIGTERM or Ctrl-C: the broker unregisters, closes connections and flushes every log.", 104) + """

Settings come from flags or from --config FILE (Kafka-style key=value properties: broker.id, listeners,
advertised.listeners, log.dirs, zookeeper.connect, datacenter, log.segment.bytes, log.roll.ms,
log.retention.ms, log.retention.hours, log.retention.bytes, log.flush.interval.messages,
log.flush.interval.ms, message.max.bytes, socket.request.max.bytes, auto.create.topics.enable,
num.partitions, log.consumers.see.unflushed, zookeeper.session.timeout.ms, connections.max.idle.ms,
audit.topic.partitions, producer.id.expiration.ms, log.message.timestamp.type, and the listener, TLS and
SASL settings of docs/security.md);
flags win over the file.
A bad value stops the broker with a message naming the setting (exit code 2).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("broker", help="run a broker", description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--id", type=int, metavar="N", help="broker id, unique in the cluster (broker.id)")
    p.add_argument("--listen", metavar="HOST:PORT", help="address to accept clients on (listeners)")
    p.add_argument("--listener", action="append", default=[], metavar="NAME://HOST:PORT",
                   help="one more listener, e.g. SSL://127.0.0.1:9093 or SASL_SSL://0.0.0.0:9094 (repeatable; with "
                        "--listen they add to it; a custom NAME needs listener.security.protocol.map: "
                        "docs/security.md)")
    p.add_argument("--advertised", metavar="HOST:PORT",
                   help="address clients are told to connect to (advertised.listeners; default: --listen)")
    p.add_argument("--data-dir", metavar="DIR", help="directory holding the partition logs (log.dirs)")
    p.add_argument("--zookeeper", metavar="HOST:PORT/CHROOT",
                   help="ZooKeeper connect string with the cluster's chroot, e.g. 127.0.0.1:2181/ferry/live")
    p.add_argument("--datacenter", metavar="NAME", help="datacenter name, stored in the broker's registration")
    p.add_argument("--config", metavar="FILE", help="Kafka-style properties file (flags override it)")
    p.add_argument("--log-segment-bytes", type=int, metavar="BYTES",
                   help="roll a segment at this size (log.segment.bytes; default 1 GiB)")
    p.add_argument("--log-roll-ms", type=int, metavar="MS",
                   help="roll a segment at this age (log.roll.ms; default 7 days)")
    p.add_argument("--retention-ms", type=int, metavar="MS",
                   help="delete segments older than this; -1 keeps forever (log.retention.ms; default 7 days)")
    p.add_argument("--retention-bytes", type=int, metavar="BYTES",
                   help="per-partition size limit; -1 = none (log.retention.bytes; default -1)")
    p.add_argument("--flush-messages", type=int, metavar="N",
                   help="fsync after this many messages (log.flush.interval.messages; default 10000)")
    p.add_argument("--flush-ms", type=int, metavar="MS",
                   help="fsync when the oldest unflushed message is this old (log.flush.interval.ms; default 200)")
    p.add_argument("--max-message-bytes", type=int, metavar="BYTES",
                   help="largest record batch accepted (message.max.bytes; default 1048588)")
    p.add_argument("--max-request-bytes", type=int, metavar="BYTES",
                   help="largest request accepted; bigger ones close the connection "
                        "(socket.request.max.bytes; default 100 MiB)")
    p.add_argument("--num-partitions", type=int, metavar="N",
                   help="partitions of auto-created topics and of CreateTopics with -1 (num.partitions; default 1)")
    p.add_argument("--auto-create-topics", action="store_true", default=None,
                   help="create unknown topics named in Metadata requests (auto.create.topics.enable; default off)")
    p.add_argument("--consumers-see-unflushed", action="store_true", default=None,
                   help="let fetches read data before it is fsynced (log.consumers.see.unflushed; default off: "
                        "as in the paper, consumers see only flushed messages)")
    p.add_argument("--retention-check-interval-ms", type=int, metavar="MS",
                   help="how often retention looks for segments to delete "
                        "(log.retention.check.interval.ms; default 300000)")
    p.add_argument("--connections-max-idle-ms", type=int, metavar="MS",
                   help="close a client connection idle this long with nothing owed to it "
                        "(connections.max.idle.ms; default 600000)")
    p.add_argument("--audit-topic-partitions", type=int, metavar="N",
                   help="create the pipeline's _audit topic with N partitions at start-up if it does not exist "
                        "(audit.topic.partitions; default 0: never, provisioning creates it)")
    p.add_argument("--zk-session-timeout-ms", type=int, metavar="MS",
                   help="ZooKeeper session timeout (zookeeper.session.timeout.ms; default 10000)")
    add_metrics_argument(p, "requests, bytes and errors per API, produce/fetch bytes per topic, under-replicated "
                         "partitions, ISR shrinks/expands, controller, offline log dirs; metrics.listen")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="any broker setting by its Kafka-style name, e.g. --override min.insync.replicas=2 "
                        "(repeatable; wins over --config and the flags, as kafka-server-start's --override)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging level of the broker's own log lines (default INFO)")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> BrokerConfig:
    """Merge --config FILE with the flags and validate; raises ConfigError."""
    props = read_properties(args.config) if args.config else {}
    listeners = ([f"PLAINTEXT://{args.listen}"] if getattr(args, "listen", None) else []) + \
        list(getattr(args, "listener", None) or [])
    if listeners:
        props["listeners"] = ",".join(listeners)
    if getattr(args, "advertised", None):
        adv = args.advertised
        props["advertised.listeners"] = adv if "://" in adv else f"PLAINTEXT://{adv}"
    for dest, key in FLAG_KEYS.items():
        value = getattr(args, dest, None)
        if value is not None:
            props[key] = str(value)
    if args.auto_create_topics:
        props["auto.create.topics.enable"] = "true"
    if args.consumers_see_unflushed:
        props["log.consumers.see.unflushed"] = "true"
    for item in getattr(args, "override", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override {item!r}: expected KEY=VALUE")
        props[key.strip()] = value.strip()
    return BrokerConfig.from_properties(props)


def run(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
    except ConfigError as e:
        print(f"ferry broker: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s [broker-" + str(config.broker_id) + "] %(name)s: %(message)s")
    log = logging.getLogger("ferry.broker")
    try:
        asyncio.run(KafkaServer(config).run())
    except KeyboardInterrupt:
        return 0
    except Exception as e:
        if _is_expected_failure(e):  # a clear one-line reason, no traceback
            log.error("broker %d failed: %s", config.broker_id, str(e) or type(e).__name__)
        else:
            log.exception("broker %d failed", config.broker_id)
        return 1
    _exit_if_stuck(log)
    return 0


def _exit_if_stuck(log: logging.Logger, grace_s: float = 2.0) -> None:
    """After a clean shutdown (logs flushed and closed), leave even if a worker thread is still inside a
    ZooKeeper call that cannot return (ZooKeeper gone): the interpreter joins such threads at exit, and a
    broker told to stop would then linger until kazoo gives up. Nothing is left to save by then."""
    if threading.current_thread() is not threading.main_thread():
        return  # run inside another program: not ours to end
    deadline = time.monotonic() + grace_s
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threading.enumerate()
             if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if stuck:
        log.warning("exiting without waiting for %d thread(s) still running, most likely in a ZooKeeper call "
                    "that cannot return (%s)", len(stuck), ", ".join(stuck))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _is_expected_failure(e: BaseException) -> bool:
    """Environment problems (port taken, data dir locked, ZooKeeper unreachable, id in use)."""
    if isinstance(e, OSError):
        return True
    module = type(e).__module__
    return module.startswith(("ferry.zk", "ferry.wire.record", "kazoo"))

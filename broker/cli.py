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

from ferry.broker.server.broker_config import BrokerConfig, read_properties
from ferry.broker.server.broker_plugin import BrokerPlugin
from ferry.broker.server.kafka_server import KafkaServer
from ferry.wire.protocol.api_keys import ADVERTISED, ApiKey
from ferry.zk import ZkConnect
from ferry.zk import cli_args as cli
from ferry.zk import connect as zk_connect
from ferry.zk.kazoo_client import use_tls

# flag -> (Kafka-style property key, metavar, help[, default]): flags override the --config file. A flag whose metavar is a
# number (N, BYTES, MS) takes an integer; the defaults are BrokerConfig's.
SETTING_FLAGS: dict[str, tuple[str, ...]] = {
    "--id": ("broker.id", "N", "broker id, unique in the cluster"),
    "--listen": ("listeners", "HOST:PORT", "address to accept clients on"),
    "--advertised": ("advertised.listeners", "HOST:PORT", "address clients are told to connect to", "default: --listen"),
    "--data-dir": ("log.dirs", "DIR", "directory holding the partition logs"),
    "--zookeeper": ("zookeeper.connect", "HOST:PORT/CHROOT",
                    "ZooKeeper connect string with the cluster's chroot, e.g. 127.0.0.1:2181/ferry/live"),
    "--datacenter": ("datacenter", "NAME", "datacenter name, stored in the broker's registration"),
    "--log-segment-bytes": ("log.segment.bytes", "BYTES", "roll a segment at this size", "default 1 GiB"),
    "--log-roll-ms": ("log.roll.ms", "MS", "roll a segment at this age", "default 7 days"),
    "--retention-ms": ("log.retention.ms", "MS", "delete segments older than this; -1 keeps forever", "default 7 days"),
    "--retention-bytes": ("log.retention.bytes", "BYTES", "per-partition size limit; -1 = none", "default -1"),
    "--flush-messages": ("log.flush.interval.messages", "N", "fsync after this many messages", "default 10000"),
    "--flush-ms": ("log.flush.interval.ms", "MS",
                   "fsync when the oldest unflushed message is this old", "default 200"),
    "--max-message-bytes": ("message.max.bytes", "BYTES", "largest record batch accepted", "default 1048588"),
    "--max-request-bytes": ("socket.request.max.bytes", "BYTES",
                            "largest request accepted; bigger ones close the connection", "default 100 MiB"),
    "--num-partitions": ("num.partitions", "N",
                         "partitions of auto-created topics and of CreateTopics with -1", "default 1"),
    "--retention-check-interval-ms": ("log.retention.check.interval.ms", "MS",
                                      "how often retention looks for segments to delete", "default 300000"),
    "--connections-max-idle-ms": ("connections.max.idle.ms", "MS",
                                  "close a client connection idle this long with nothing owed to it", "default 600000"),
    "--audit-topic-partitions": ("audit.topic.partitions", "N",
                                 "create the pipeline's _audit topic with N partitions at start-up if it does not "
                                 "exist", "default 0: never, provisioning creates it"),
    "--zk-session-timeout-ms": ("zookeeper.session.timeout.ms", "MS", "ZooKeeper session timeout", "default 10000"),
}
# switches that turn a boolean setting on: flag -> (key, help, default)
SWITCH_FLAGS: dict[str, tuple[str, str, str]] = {
    "--auto-create-topics": ("auto.create.topics.enable", "create unknown topics named in Metadata requests",
                             "default off"),
    "--consumers-see-unflushed": ("log.consumers.see.unflushed", "let fetches read data before it is fsynced",
                                  "default off: as in the paper, consumers see only flushed messages"),
}
NUMBER_METAVARS = ("N", "BYTES", "MS")
METRICS_KEYS = {"metrics_port": "metrics.port", "metrics_listen": "metrics.listen"}


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="Kafka-style properties file (flags override it)")
    for flag, (key, metavar, what, *default) in SETTING_FLAGS.items():
        p.add_argument(flag, metavar=metavar, type=int if metavar in NUMBER_METAVARS else str,
                       help=f"{what} ({'; '.join([key, *default])})")
    p.add_argument("--listener", action="append", default=[], metavar="NAME://HOST:PORT",
                   help="one more listener, e.g. SSL://127.0.0.1:9093 or SASL_SSL://0.0.0.0:9094 (repeatable; with "
                        "--listen they add to it; a custom NAME needs listener.security.protocol.map: "
                        "docs/security.md)")
    for flag, (key, what, default) in SWITCH_FLAGS.items():
        p.add_argument(flag, action="store_true", default=None, help=f"{what} ({key}; {default})")
    cli.add_metrics_argument(p, "Kafka's broker metrics: request rate, errors and time per phase per API, bytes and "
                             "messages per topic, partition states, ISR shrinks/expands, log flush, queues, "
                             "process (docs/metrics.md); metrics.listen")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="any broker setting by its Kafka-style name, e.g. --override min.insync.replicas=2 "
                        "(repeatable; wins over --config and the flags, as kafka-server-start's --override)")
    cli.add_log_level_argument(p, "logging level of the broker's own log lines")


def build_config(args: argparse.Namespace) -> BrokerConfig:
    """Merge --config FILE with the flags and validate; raises ConfigError (or UsageError for a bad --override,
    OSError for a --config file that cannot be read)."""
    props = read_properties(args.config) if args.config else {}
    keys = {_dest(flag): key for flag, (key, *_) in SETTING_FLAGS.items()} | METRICS_KEYS
    for dest, key in keys.items():
        value = getattr(args, dest, None)
        if value is not None and dest not in ("listen", "advertised"):  # listeners: below
            props[key] = str(value)
    # --listen is the PLAINTEXT listener it always was; --listener NAME://HOST:PORT adds more (docs/security.md)
    listeners = ([f"PLAINTEXT://{args.listen}"] if getattr(args, "listen", None) else []) + \
        list(getattr(args, "listener", None) or [])
    if listeners:
        props["listeners"] = ",".join(listeners)
    if getattr(args, "advertised", None):
        adv = args.advertised
        props["advertised.listeners"] = adv if "://" in adv else f"PLAINTEXT://{adv}"
    for flag, (key, *_) in SWITCH_FLAGS.items():
        if getattr(args, _dest(flag)):
            props[key] = "true"
    overrides = cli.parse_key_values(getattr(args, "override", None), "--override", "min.insync.replicas=2",
                                     last_wins=True)
    props.update({key: value.strip() for key, value in overrides.items()})
    return BrokerConfig.from_properties(props)


def run(args: argparse.Namespace, plugins: tuple[BrokerPlugin, ...] = ()) -> int:
    """``plugins``: components the broker embeds (ferry/broker_cmd.py composes the embedded mirror in)."""
    config = build_config(args)  # a bad setting: one line and exit 2 (ferry/cli_runner.py)
    if config.zk_tls is not None:
        use_tls(config.zk_tls)  # every ZooKeeper client of this process: registry, controller, embedded mirror
    preflight(config)
    cli.configure_logging(args, f"[broker-{config.broker_id}] %(name)s")
    log = logging.getLogger("ferry.broker")
    try:
        asyncio.run(KafkaServer(config, plugins).run())
    except KeyboardInterrupt:
        return 0
    except Exception as e:  # with a valid config, a failure is the environment's (port taken, data dir locked or
        # unwritable, disk full, ZooKeeper unreachable, id in use): one log line, exit 1; --log-level DEBUG: traceback
        log.error("broker %d failed: %s", config.broker_id, " ".join((str(e) or type(e).__name__).split()))
        log.debug("broker %d failed", config.broker_id, exc_info=True)
        return 1
    _exit_if_stuck(log)
    return 0


def preflight(config: BrokerConfig) -> None:
    """Before the broker's first log line: a data dir that cannot be made or written (a file on the way, a full
    disk) and a ZooKeeper that does not answer are one error line (exit 1), not a start-up that logs and fails.
    Nothing is created: the broker makes its data dir only once its id is known to be its own."""
    cli.check_writable_dir(config.data_dir, "--data-dir")
    with cli.zookeeper_logs_quiet():
        client = zk_connect(ZkConnect.parse(config.zookeeper).hosts, timeout=config.zk_session_timeout_s)
        client.stop()
        client.close()


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


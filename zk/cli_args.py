"""What every `ferry` subcommand shares: the `--zookeeper` argument, its environment variable and the
usage error. Set up here once so that every command spells and defaults it the same way."""

from __future__ import annotations

import argparse
import logging
import os

ENV_ZOOKEEPER = "FERRY_ZOOKEEPER"  # default for --zookeeper in every subcommand that takes it
ZK_METAVAR = "HOST:PORT/CHROOT"


class UsageError(Exception):
    """Bad command-line input found after argparse (reported like argparse does: exit 2)."""


def add_zookeeper_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                           what: str = "the cluster's ZooKeeper", *, with_timeout: bool = False) -> None:
    """`--zookeeper HOST:PORT/CHROOT`, defaulting to $FERRY_ZOOKEEPER (checked by `require_zookeeper`), and
    with ``with_timeout`` the `--timeout SECONDS` of the ZooKeeper connection."""
    parser.add_argument("--zookeeper", metavar=ZK_METAVAR, default=os.environ.get(ENV_ZOOKEEPER),
                        help=f"{what} (default: ${ENV_ZOOKEEPER})")
    if with_timeout:
        add_timeout_argument(parser, "ZooKeeper connect timeout", default=10.0, dest="timeout")


def add_timeout_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str, *,
                         default: float | None = None, dest: str = "timeout_s") -> None:
    """The one spelling of a command's time limit: `--timeout SECONDS` (Kafka's tools say --timeout too, but in
    ms; seconds read better at a console). `--timeout-s` was the console tools' older spelling: kept, hidden."""
    tail = f" (default {default:g})" if default is not None else ""
    parser.add_argument("--timeout", type=float, default=default, dest=dest, metavar="SECONDS", help=what + tail)
    parser.add_argument("--timeout-s", type=float, dest=dest, help=argparse.SUPPRESS)


def add_json_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                      what: str = "print JSON instead of text") -> None:
    """The one spelling of machine-readable output: `--json` (sets ``args.json``)."""
    parser.add_argument("--json", action="store_true", help=what)


def require_zookeeper(args: argparse.Namespace) -> str:
    """The --zookeeper value, or a UsageError naming the flag and the variable."""
    if not args.zookeeper:
        raise UsageError(f"--zookeeper {ZK_METAVAR} is required (or set ${ENV_ZOOKEEPER})")
    return args.zookeeper


def quiet_zookeeper_logs() -> None:
    """kazoo's reconnect chatter is not a command-line user's business: a failure is reported in one line."""
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def parse_listen(text: str, what: str = "--metrics-listen") -> tuple[str, int]:
    """HOST:PORT (or just PORT: loopback) -> (host, port); ValueError naming ``what``. Loopback by default:
    metrics say which topics exist and how busy they are, so reaching them from elsewhere is a choice."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "0.0.0.0"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{what} {text!r}: expected HOST:PORT") from None
    if not 0 <= number < 65536:
        raise ValueError(f"{what} {text!r}: port must be 0-65535")
    return host, number


def add_metrics_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    """`--metrics-listen HOST:PORT` (``args.metrics_listen``), the one spelling for every process serving
    Prometheus metrics; `--metrics-port P` (= 127.0.0.1:P) is the older one, kept and hidden."""
    parser.add_argument("--metrics-listen", metavar="HOST:PORT",
                        help=f"serve Prometheus metrics on http://HOST:PORT/metrics ({what}; default off)")
    parser.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)


def metrics_listen(args: argparse.Namespace) -> tuple[str, int] | None:
    """(host, port) from --metrics-listen or the older --metrics-port, None when metrics are off."""
    if getattr(args, "metrics_listen", None):
        return parse_listen(args.metrics_listen)
    port = getattr(args, "metrics_port", None)
    return None if port is None else ("127.0.0.1", port)

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
        parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                            help="ZooKeeper connect timeout (default 10)")


def require_zookeeper(args: argparse.Namespace) -> str:
    """The --zookeeper value, or a UsageError naming the flag and the variable."""
    if not args.zookeeper:
        raise UsageError(f"--zookeeper {ZK_METAVAR} is required (or set ${ENV_ZOOKEEPER})")
    return args.zookeeper


def quiet_zookeeper_logs() -> None:
    """kazoo's reconnect chatter is not a command-line user's business: a failure is reported in one line."""
    logging.getLogger("kazoo").setLevel(logging.ERROR)

"""What every `ferry` subcommand shares: the ZooKeeper environment variable and the usage error."""

from __future__ import annotations

ENV_ZOOKEEPER = "FERRY_ZOOKEEPER"  # default for --zookeeper in every subcommand that takes it


class UsageError(Exception):
    """Bad command-line input found after argparse (reported like argparse does: exit 2)."""

"""`ferry broker`: the broker (broker/cli.py) with the embedded mirror composed in (mirror/embedded_mirror.py).

The broker cannot import the mirror layer (it sits above it); this module, at the top, puts them together, so
that every offline broker runs the mirror links stored in its cluster's ZooKeeper with no process of its own.
"""

from __future__ import annotations

import argparse

from ferry.broker import cli as broker_cli
from ferry.mirror.embedded_mirror import EmbeddedMirror

DESCRIPTION = broker_cli.DESCRIPTION + """
Mirror links stored in the cluster's ZooKeeper (`ferry mirror link create ...`) are run by the brokers
themselves: the leader of each mirrored partition pulls its live partition (docs/mirror.md).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    broker_cli.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    return broker_cli.run(args, plugins=(EmbeddedMirror(),))

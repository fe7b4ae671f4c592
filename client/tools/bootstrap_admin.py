"""The one place `ferry topics|configs|groups --bootstrap-server` make their admin client (client/cluster_admin.py).

Client settings for the connection (TLS, SASL: librdkafka's names) come from the shared `--command-config FILE`
flag, else $FERRY_CLIENT_CONFIG (zk/cli_args.py client_config).
"""

from __future__ import annotations

import argparse

from ferry.client.cluster_admin import ClusterAdmin
from ferry.zk import cli_args as cli


def open_admin(args: argparse.Namespace) -> ClusterAdmin:
    return ClusterAdmin(args.bootstrap, settings=cli.client_config(args).librdkafka(), timeout_s=args.timeout)

"""The one place `ferry topics|configs|groups --bootstrap-server` make their admin client (client/cluster_admin.py).

Client settings for the connection (TLS, SASL: librdkafka's names) come from ``args.client_settings``, a dict the
shared `--command-config FILE` flag fills (zk/cli_args.py); until a command has that flag it is empty.
"""

from __future__ import annotations

import argparse

from ferry.client.cluster_admin import ClusterAdmin


def open_admin(args: argparse.Namespace) -> ClusterAdmin:
    return ClusterAdmin(args.bootstrap, settings=getattr(args, "client_settings", None) or {}, timeout_s=args.timeout)

"""`ferry zookeeper-acls secure|unsecure`: give an existing cluster tree the ZooKeeper ACLs ferry creates its
znodes with, or open it again (Kafka's zookeeper-security-migration). The identity is the one of
$FERRY_ZOOKEEPER_CREDENTIALS (docs/zookeeper.md): restart every process of the cluster with it first."""

from __future__ import annotations

import argparse

from ferry.zk.cli_args import UsageError, add_zookeeper_argument, quiet_zookeeper_logs, require_zookeeper
from ferry.zk.kazoo_client import connect, credentials_from_environment
from ferry.zk.zk_acl_migration import secure_tree, unsecure_tree
from ferry.zk.zk_credentials import ENV_CREDENTIALS

DESCRIPTION = __doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, what in (("secure", "writable only by the cluster's identity, secrets readable only by it"),
                       ("unsecure", "open to every client again (before the credentials are withdrawn)")):
        sub = actions.add_parser(name, help=what, description=f"Every znode of the cluster: {what}.")
        add_zookeeper_argument(sub, with_timeout=True)


def run(args: argparse.Namespace) -> int:
    """Errors are raised: ferry/cli_runner.py turns them into one line and the exit code."""
    quiet_zookeeper_logs()
    zk = require_zookeeper(args)
    credentials = credentials_from_environment()
    if credentials is None:
        raise UsageError(f"${ENV_CREDENTIALS} names no credentials file: the tree is secured with that identity")
    client = connect(zk, timeout=args.timeout, create_chroot=False, credentials=credentials)
    try:
        count = secure_tree(client, credentials) if args.action == "secure" else unsecure_tree(client)
    finally:
        client.stop()
        client.close()
    print(f"{count} znodes {'secured' if args.action == 'secure' else 'opened'} under {zk}")
    return 0

"""`ferry users add|list|remove`: the SCRAM users brokers authenticate (SASL SCRAM-SHA-256/512 and PLAIN), stored
salted in ZooKeeper as Kafka's kafka-configs --alter --entity-type users does (zk/scram_credentials.py).

The password never comes from an argument (process lists, shell history): a prompt, --password-file FILE or
--password-stdin.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from ferry.wire.scram import DEFAULT_ITERATIONS, MECHANISMS, MIN_ITERATIONS, ScramCredential
from ferry.zk.cli_args import (
    UsageError,
    add_json_argument,
    add_zookeeper_argument,
    quiet_zookeeper_logs,
    require_zookeeper,
)
from ferry.zk.kazoo_client import connect
from ferry.zk.scram_credentials import ScramCredentialStore, check_user_name

DESCRIPTION = __doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="add a user or change its password", allow_abbrev=False)
    add.add_argument("name", help="the user name (its principal is User:NAME)")
    add.add_argument("--mechanism", action="append", choices=list(MECHANISMS),
                     help="SCRAM mechanism to store a credential for (repeatable; default SCRAM-SHA-512)")
    src = add.add_mutually_exclusive_group()
    src.add_argument("--password-file", metavar="FILE", help="read the password from the first line of FILE")
    src.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                     help=f"PBKDF2 iterations (default and minimum {DEFAULT_ITERATIONS})")
    lst = sub.add_parser("list", help="list the users and their mechanisms")
    add_json_argument(lst)
    rm = sub.add_parser("remove", help="remove a user (or one mechanism's credential)")
    rm.add_argument("name")
    rm.add_argument("--mechanism", choices=list(MECHANISMS), help="remove only this mechanism's credential")
    for q in (add, lst, rm):
        add_zookeeper_argument(q, with_timeout=True)


def run(args: argparse.Namespace) -> int:
    """Errors are raised: ferry/cli_runner.py turns them into one line and the exit code."""
    quiet_zookeeper_logs()
    zk = require_zookeeper(args)
    if args.action in ("add", "remove"):
        check_user_name(args.name)
    password = _password(args) if args.action == "add" else ""
    if args.action == "add" and args.iterations < MIN_ITERATIONS:
        raise UsageError(f"--iterations: at least {MIN_ITERATIONS}")
    client = connect(zk, timeout=args.timeout, create_chroot=args.action == "add")
    try:
        store = ScramCredentialStore(client)
        if args.action == "add":
            for mechanism in args.mechanism or ["SCRAM-SHA-512"]:
                store.set(args.name, mechanism, ScramCredential.create(mechanism, password, args.iterations))
            print(f"user {args.name}: {', '.join(args.mechanism or ['SCRAM-SHA-512'])} credential stored")
            return 0
        if args.action == "list":
            users = store.users()
            if args.json:
                print(json.dumps(users, sort_keys=True))
            else:
                for name, mechanisms in users.items():
                    print(f"{name}\t{','.join(mechanisms)}")
            return 0
        if not store.remove(args.name, args.mechanism):
            raise UsageError(f"no user {args.name!r}" + (f" with {args.mechanism}" if args.mechanism else ""))
        print(f"user {args.name}: removed" + (f" ({args.mechanism})" if args.mechanism else ""))
        return 0
    finally:
        client.stop()
        client.close()


def _password(args: argparse.Namespace) -> str:
    if args.password_file:  # unreadable: an OSError, one line and exit 1 (ferry/cli_runner.py)
        with open(args.password_file, encoding="utf-8") as f:
            text = f.readline().rstrip("\r\n")
    elif args.password_stdin:
        text = sys.stdin.readline().rstrip("\r\n")
    else:
        if not sys.stdin.isatty():
            raise UsageError("no terminal to ask the password on: use --password-file FILE or --password-stdin")
        text = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != text:
            raise UsageError("the passwords differ")
    if not text:
        raise UsageError("empty password")
    return text

"""`ferry zookeeper`: run a standalone ZooKeeper (Debian's package) in the foreground.

The process *becomes* the JVM (exec), so a supervisor (systemd, Ansible, a terminal's Ctrl-C) talks to
ZooKeeper directly: SIGTERM shuts it down cleanly and its log goes to this process's stdout.
The configuration is the one the tests use (``ferry.zk.zookeeper_server.ZooKeeperServer``): bound to one address,
AdminServer off (it would take port 8080), the four-letter words kazoo needs whitelisted.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from ferry.zk import cli_args as cli
from ferry.zk.zookeeper_server import CLIENT_AUTH, ZkServerTls, ZooKeeperServer

DESCRIPTION = (
    "Run a standalone ZooKeeper server (Debian's `zookeeper` package, needs java) in the "
    "foreground. Writes DATA_DIR/zoo.cfg and keeps snapshots and logs in DATA_DIR/data. "
    "Stop it with Ctrl-C or SIGTERM. Exit status 2 for a bad flag, 1 when it cannot start (port taken, "
    "java or the package missing, DATA_DIR unwritable or full).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=2181, metavar="P",
                        help="plaintext client port (default 2181; 0: none, with --secure-port)")
    parser.add_argument("--secure-port", type=int, default=None, metavar="P",
                        help="TLS client port (ZooKeeper's secureClientPort, e.g. 2281; needs --ssl-keystore and "
                             "--ssl-truststore)")
    parser.add_argument("--ssl-keystore", type=Path, metavar="FILE",
                        help="the server's certificate and key in one PEM file (ssl.keyStore.location)")
    parser.add_argument("--ssl-truststore", type=Path, metavar="FILE",
                        help="the CA certificate(s), PEM (ssl.trustStore.location): client certificates must chain "
                             "to it when --ssl-client-auth is need")
    parser.add_argument("--ssl-client-auth", choices=CLIENT_AUTH, default="none",
                        help="whether TLS clients must show a certificate (ssl.clientAuth; default none: the "
                             "digest credentials say who a client is)")
    parser.add_argument("--data-dir", required=True, metavar="D", type=Path,
                        help="directory for zoo.cfg and the data (created if missing; reused on restart)")
    parser.add_argument("--host", default="127.0.0.1", metavar="ADDR",
                        help="address to bind (default 127.0.0.1; 0.0.0.0 for every interface)")
    parser.add_argument("--heap-mb", type=int, default=256, metavar="MB", help="JVM heap size (default 256)")
    parser.add_argument("--tick-ms", type=int, default=2000, metavar="MS",
                        help="ZooKeeper tickTime; the minimum session timeout is 2 ticks (default 2000)")


def run(args: argparse.Namespace) -> int:
    """Failures are raised: ferry/cli_runner.py prints them in one line (UsageError: 2; the rest, at run time: 1)."""
    tls = _server_tls(args)
    if not (1 <= args.port <= 65535 or (args.port == 0 and tls is not None)):
        raise cli.UsageError(f"--port {args.port} is out of range 1-65535 (0 only with --secure-port)")
    if args.heap_mb < 16 or args.tick_ms < 1:
        raise cli.UsageError("--heap-mb must be at least 16 and --tick-ms at least 1")
    data_dir = args.data_dir
    if data_dir.exists() and not data_dir.is_dir():
        raise cli.UsageError(f"--data-dir {data_dir} exists and is not a directory")
    for port in (args.port, tls.port if tls else 0):
        if port:
            _check_port_free(args.host, port)
    server = ZooKeeperServer(port=args.port, data_dir=data_dir, host=args.host, heap_mb=args.heap_mb,
                             tick_ms=args.tick_ms, tls=tls)
    argv = server.argv()  # writes zoo.cfg; raises if java or the zookeeper package is missing
    serving = [f"{args.host}:{args.port}"] if args.port else []
    serving += [f"{server.secure_connect} (TLS)"] if tls else []
    print(f"ferry zookeeper: serving {', '.join(serving)} with data in {server.data_dir}", flush=True)
    sys.stderr.flush()
    os.execvp(argv[0], argv)
    return 0  # not reached


def _server_tls(args: argparse.Namespace) -> ZkServerTls | None:
    """--secure-port's settings, checked before anything starts (a missing store is a usage error, exit 2)."""
    stores = (args.ssl_keystore, args.ssl_truststore)
    if args.secure_port is None:
        if any(stores):
            raise cli.UsageError("--ssl-keystore and --ssl-truststore go with --secure-port")
        return None
    if not 1 <= args.secure_port <= 65535 or args.secure_port == args.port:
        raise cli.UsageError(f"--secure-port {args.secure_port} must be in 1-65535 and differ from --port")
    for flag, path in (("--ssl-keystore", args.ssl_keystore), ("--ssl-truststore", args.ssl_truststore)):
        if path is None:
            raise cli.UsageError(f"--secure-port needs {flag} FILE (PEM)")
        if not path.is_file() or not os.access(path, os.R_OK):
            raise cli.UsageError(f"{flag} {path}: no such readable file")
    return ZkServerTls(args.secure_port, args.ssl_keystore.resolve(), args.ssl_truststore.resolve(),
                       args.ssl_client_auth)


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

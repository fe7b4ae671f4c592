"""What every `ferry` subcommand shares: the `--zookeeper` and `--bootstrap-server`
arguments (and the environment variable), `--timeout`, `--json`, `--state-dir`, `--log-level`, KEY=VALUE lists,
HOST:PORT addresses and the usage error. Set up here once so that every command spells and defaults them the
same way; how a command fails is ferry/cli_runner.py's one rule."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ferry.wire.client_config import ENV_CLIENT_CONFIG, ClientConfig, ClientConfigError
from ferry.wire.http_security import HttpSecurity, HttpSecurityError
from ferry.zk.scram_credentials import ScramAuthenticator
from ferry.zk.zk_tls import ENV_TLS_CONFIG, ZkTlsConfig

ENV_ZOOKEEPER = "FERRY_ZOOKEEPER"  # default for --zookeeper in every subcommand that takes it
ZK_METAVAR = "HOST:PORT/CHROOT"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class UsageError(Exception):
    """Bad command-line input found after argparse (reported like argparse does: exit 2)."""


def add_actions(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The ACTION subcommands of a command with several (`ferry topics create|list|...`): ``args.action``."""
    return parser.add_subparsers(dest="action", required=True, metavar="ACTION")


def add_zookeeper_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                           what: str = "the cluster's ZooKeeper", *, with_timeout: bool = False) -> None:
    """`--zookeeper HOST:PORT/CHROOT`, defaulting to $FERRY_ZOOKEEPER (checked by `require_zookeeper`), and
    with ``with_timeout`` the `--timeout SECONDS` of the ZooKeeper connection."""
    parser.add_argument("--zookeeper", metavar=ZK_METAVAR, default=os.environ.get(ENV_ZOOKEEPER),
                        help=f"{what} (default: ${ENV_ZOOKEEPER})")
    add_zk_tls_argument(parser)
    if with_timeout:
        add_timeout_argument(parser, "ZooKeeper connect timeout", default=10.0, dest="timeout")


def add_zk_tls_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--zk-tls-config-file FILE` (Kafka's tools' flag, KIP-515), once per parser: ZooKeeper over TLS for every
    ZooKeeper client of the command (apply_zk_tls_argument)."""
    if "--zk-tls-config-file" in parser._option_string_actions:  # noqa: SLF001 - argparse has no public lookup
        return
    parser.add_argument("--zk-tls-config-file", metavar="FILE", default=None,
                        help="ZooKeeper client TLS settings: zookeeper.ssl.client.enable=true, "
                             "zookeeper.ssl.truststore.location=CA.pem, ... (default: $" + ENV_TLS_CONFIG + ")")


def apply_zk_tls_argument(args: argparse.Namespace) -> None:
    """A given --zk-tls-config-file becomes $FERRY_ZOOKEEPER_TLS_CONFIG for this process and its children (Spark
    executors, tasks): every ZooKeeper client then takes it (kazoo_client.tls_settings). A bad file: one line."""
    path = getattr(args, "zk_tls_config_file", None)
    if path:
        ZkTlsConfig.from_file(path)
        os.environ[ENV_TLS_CONFIG] = os.path.abspath(path)


def add_live_zookeeper_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str,
                                dest: str = "live_zookeeper") -> None:
    """`--live-zookeeper HOST:PORT/CHROOT`, repeatable (a list): the live clusters whose producers' counts decide
    completeness (audit report, load, dashboard)."""
    add_zk_tls_argument(parser)
    parser.add_argument("--live-zookeeper", dest=dest, metavar=ZK_METAVAR, action="append", default=[],
                        help=f"{what} (repeatable)")


def add_switches(parser: argparse.ArgumentParser | argparse._ArgumentGroup, switches: dict[str, str]) -> None:
    """On/off flags, off unless given: flag -> help."""
    for flag, what in switches.items():
        parser.add_argument(flag, action="store_true", help=what)


def add_cluster_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, zookeeper: str,
                          bootstrap: str = "brokers to connect to instead of looking them up in ZooKeeper") -> None:
    """A cluster found either way: `--zookeeper` (the brokers registered there) or `--bootstrap-server
    HOST:PORT[,...]` (``args.bootstrap``; `--bootstrap` is the shorter spelling); require_cluster checks one."""
    add_zookeeper_argument(parser, zookeeper)
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT[,...]",
                        help=bootstrap)


def add_bootstrap_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                           what: str = "a broker of the cluster: talk to the brokers' admin APIs instead of "
                           "ZooKeeper") -> None:
    """`--bootstrap-server HOST:PORT[,...]` (``args.bootstrap``) of a command that also takes `--zookeeper`: the
    admin tools work with either, as Kafka's did before 4.0 (`--bootstrap-server` alone is Kafka 4's way). The
    client settings that go with it (`--command-config FILE`) are added next to it by the command."""
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT[,...]", help=what)


def require_one_cluster(args: argparse.Namespace) -> None:
    """Exactly one of --bootstrap-server and --zookeeper ($FERRY_ZOOKEEPER only counts without the other)."""
    if args.bootstrap and args.zookeeper and args.zookeeper != os.environ.get(ENV_ZOOKEEPER):
        raise UsageError("give --bootstrap-server or --zookeeper, not both")
    if args.bootstrap:
        args.zookeeper = None
        return
    if not args.zookeeper:
        raise UsageError(f"give --bootstrap-server HOST:PORT or --zookeeper {ZK_METAVAR} (or set ${ENV_ZOOKEEPER})")


def require_cluster(args: argparse.Namespace) -> None:
    """A command that finds the brokers either way needs --zookeeper or --bootstrap-server."""
    if not args.zookeeper and not args.bootstrap:
        raise UsageError(f"give --zookeeper {ZK_METAVAR} (or set ${ENV_ZOOKEEPER}) or --bootstrap-server HOST:PORT")


def require_registry(args: argparse.Namespace) -> None:
    """`--value-format avro` needs the schema registry: in --zookeeper's cluster, through the formats ferry/cli.py
    hands the console tools (``args.value_formats``; the registry is a higher layer than the tools)."""
    if getattr(args, "value_formats", None) is None:
        raise UsageError("--value-format avro is only available through the `ferry` command")
    if not args.zookeeper:
        raise UsageError(f"--value-format avro needs the schema registry: --zookeeper {ZK_METAVAR} "
                         f"(or ${ENV_ZOOKEEPER})")


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


def add_state_dir_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    """`--state-dir DIR`: the loads' state directory (None: loaders/state_dir.py's default)."""
    parser.add_argument("--state-dir", default=None, metavar="DIR",
                        help=f"{what} (default: $FERRY_STATE_DIR, else ~/.local/state/ferry)")


def add_log_level_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "log level") -> None:
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help=f"{what} (default INFO)")


def configure_logging(args: argparse.Namespace, name: str = "%(name)s") -> None:
    """A long-running command's log lines on stderr at --log-level, each naming the process (``name``)."""
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s {name}: %(message)s")


def add_conf_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "extra Spark setting",
                      flag: str = "--conf") -> None:
    parser.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", help=what)


def parse_key_values(items: list[str] | None, flag: str, example: str = "KEY=VALUE", *,
                     last_wins: bool = False) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` flags as a dict; UsageError naming ``flag`` for an item without '=' or a key given
    twice (the value is kept as written). ``last_wins``: a key given again replaces the earlier value (as
    kafka-server-start's --override does: a wrapper script adds to what it was given)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{flag} {item!r} must look like KEY=VALUE (e.g. {example})")
        if key in out and not last_wins:
            raise UsageError(f"{flag} {key} given twice")
        out[key] = value
    return out


def require_zookeeper(args: argparse.Namespace) -> str:
    """The --zookeeper value, or a UsageError naming the flag and the variable."""
    if not args.zookeeper:
        raise UsageError(f"--zookeeper {ZK_METAVAR} is required (or set ${ENV_ZOOKEEPER})")
    return args.zookeeper


def quiet_zookeeper_logs() -> None:
    """kazoo's reconnect chatter is not a command-line user's business: a failure is reported in one line."""
    logging.getLogger("kazoo").setLevel(logging.ERROR)


@contextmanager
def zookeeper_logs_quiet() -> Iterator[None]:
    """quiet_zookeeper_logs() for a while (a server's start-up checks), then kazoo's level as it was."""
    kazoo = logging.getLogger("kazoo")
    level = kazoo.level
    quiet_zookeeper_logs()
    try:
        yield
    finally:
        kazoo.setLevel(level)


def check_writable_dir(path: Path, flag: str) -> None:
    """Raise the OSError that making or writing ``path`` would meet (a file on the way, no permission, no space
    left), without creating anything: a server says so in one line before it starts."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{flag} {path}: not a directory", str(probe))
    if not os.access(probe, os.W_OK):
        raise PermissionError(errno.EACCES, f"{flag} {path}: permission denied", str(probe))
    if os.statvfs(probe).f_bavail == 0:
        raise OSError(errno.ENOSPC, f"{flag} {path}: no space left on device", str(probe))


def parse_listen(text: str, what: str = "--metrics-listen") -> tuple[str, int]:
    """HOST:PORT (or just PORT: loopback) -> (host, port); ValueError naming ``what``. Loopback by default:
    metrics say which topics exist and how busy they are, so reaching them from elsewhere is a choice.
    An empty host (":PORT") means every interface."""
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


def add_http_security_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str, *,
                                writers: bool = False) -> None:
    """The one spelling of an HTTP surface's HTTPS and authentication (wire/http_security.py): `--https-certfile`,
    `--https-keyfile`, `--https-cafile` + `--https-client-auth` (mTLS), `--http-auth scram` (basic authentication
    against the cluster's SCRAM users, `ferry users`); with ``writers``, `--http-write-users`."""
    group = parser.add_argument_group(f"HTTPS and authentication of {what} (docs/security.md)") \
        if isinstance(parser, argparse.ArgumentParser) else parser
    group.add_argument("--https-certfile", metavar="PEM", help="serve HTTPS with this certificate (chain)")
    group.add_argument("--https-keyfile", metavar="PEM", help="its private key (default: in --https-certfile)")
    group.add_argument("--https-cafile", metavar="PEM", help="CA that signs client certificates (mTLS)")
    group.add_argument("--https-client-auth", choices=("none", "requested", "required"), default="none",
                       help="ask clients for a certificate (default none)")
    group.add_argument("--http-auth", choices=("none", "scram"), default="none",
                       help="scram: HTTP basic authentication against the cluster's SCRAM users (default none)")
    if writers:
        group.add_argument("--http-write-users", metavar="USER[,USER]",
                           help="with --http-auth: only these users may write (default: every authenticated one)")


def http_security(args: argparse.Namespace, zookeeper: str | None) -> HttpSecurity:
    """The HttpSecurity the flags of add_http_security_arguments describe; a bad combination is a usage error."""
    authenticator = None
    if getattr(args, "http_auth", "none") == "scram":
        if not zookeeper:
            raise UsageError("--http-auth scram needs the cluster's --zookeeper (the users live there)")
        authenticator = ScramAuthenticator(zookeeper)
    writers = getattr(args, "http_write_users", None)
    try:
        return HttpSecurity(certfile=args.https_certfile, keyfile=args.https_keyfile, cafile=args.https_cafile,
                            client_auth=args.https_client_auth, authenticator=authenticator,
                            write_users=frozenset(u.strip() for u in writers.split(",") if u.strip())
                            if writers else None)
    except HttpSecurityError as e:
        raise UsageError(str(e)) from None


def add_client_config_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                               what: str = "the brokers", *, aliases: tuple[str, ...] = (),
                               flag: str = "--command-config", dest: str = "command_config") -> None:
    """`--command-config FILE` (Kafka's tools' spelling): librdkafka client properties (security.protocol,
    sasl.*, ssl.*) for reaching ``what``; default $FERRY_CLIENT_CONFIG, else plaintext. Secrets stay in the file,
    never on the command line. ``aliases``: other spellings (`--producer.config`)."""
    parser.add_argument(flag, *aliases, dest=dest, metavar="FILE", default=None,
                        help=f"client properties for {what}: security.protocol, sasl.*, ssl.* "
                             f"(default: ${ENV_CLIENT_CONFIG}; docs/security.md)")


def client_config(args: argparse.Namespace, dest: str = "command_config",
                  environ: Mapping[str, str] | None = None) -> ClientConfig:
    """The ClientConfig the flag (else $FERRY_CLIENT_CONFIG) names; a missing or bad file is a usage error
    (one line naming it)."""
    try:
        return ClientConfig.from_sources(getattr(args, dest, None), os.environ if environ is None else environ)
    except ClientConfigError as e:
        raise UsageError(str(e)) from None

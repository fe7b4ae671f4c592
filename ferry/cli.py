"""The `ferry` console script: one entry point, each subcommand living in its component's package.

Subcommands are imported lazily so that `ferry broker` never pays for importing PySpark or Airflow.
Each command module exposes ``register(subparsers)`` which adds exactly one parser and sets
``func`` (called with the parsed namespace; its return value is the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ferry.schemas import console_formats

# name -> (module, one-line summary). The spellings are a contract: scripts and playbooks depend on them.
COMMANDS: dict[str, tuple[str, str]] = {
    "zookeeper": ("ferry.zk.cli", "run a local ZooKeeper server (Debian's zookeeper package)"),
    "broker": ("ferry.broker.cli", "run a broker"),
    "users": ("ferry.zk.users_cmd", "add, list and remove SCRAM users (SASL credentials in ZooKeeper)"),
    "topics": ("ferry.client.tools.topics_cmd", "create, list and describe topics"),
    "produce": ("ferry.client.tools.produce_cmd", "console producer: publish lines from stdin"),
    "consume": ("ferry.client.tools.consume_cmd", "console consumer, optionally as a member of a group"),
    "groups": ("ferry.client.tools.groups_cmd", "list, describe and reset consumer groups"),
    "schemas": ("ferry.schemas.cli", "register, list and show Avro schemas"),
    "mirror": ("ferry.mirror.cli", "mirror a live cluster into the offline cluster"),
    "load": ("ferry.loaders.cli", "load offset ranges into the hourly warehouse tables (PySpark)"),
    "sql": ("ferry.loaders.sql_cli", "Spark SQL on the warehouse; `ferry sql serve`: Thrift JDBC/ODBC server"),
    "audit": ("ferry.audit.cli", "audit reports: the books per topic and hour"),
    "dashboard": ("ferry.dashboard.cli", "serve the pipeline's console in the browser (completeness, flow, loads)"),
    "demo": ("ferry.demo", "run the whole two-datacenter pipeline on this machine"),
    "version": ("ferry.version_cmd", "versions (ferry, Python, Java, Spark, ZooKeeper) and native parts on/off"),
}


def _top_parser() -> argparse.ArgumentParser:
    epilog = "commands:\n" + "\n".join(f"  {name:<10} {summary}" for name, (_, summary) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="ferry",
        description="ferry: a two-datacenter activity-event pipeline (Kafka, 2011 style).",
        epilog=epilog + "\n\nRun `ferry COMMAND --help` for a command's flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", nargs="?", help="one of the commands below")
    return parser


def build_parser(name: str) -> argparse.ArgumentParser:
    """A parser holding just one subcommand (imported on demand)."""
    module_name, summary = COMMANDS[name]
    parser = argparse.ArgumentParser(prog="ferry")
    sub = parser.add_subparsers(dest="command", required=True)
    module = importlib.import_module(module_name)
    module.register(sub)
    if name in ("produce", "consume"):  # the console tools' --value-format avro: the registry is a higher layer
        parser.set_defaults(value_formats=console_formats)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0 if argv else 2
    if argv[0] == "--version":
        argv[0] = "version"
    name = argv[0]
    if name not in COMMANDS:
        _top_parser().print_usage(sys.stderr)
        print(f"ferry: unknown command {name!r} (choose from {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    parser = build_parser(name)
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())

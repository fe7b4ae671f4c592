"""The `ferry` console script: one entry point, each subcommand living in its component's package.

Subcommands are imported lazily so that `ferry broker` never pays for importing PySpark or Airflow.
Each command module exposes ``DESCRIPTION`` (its --help text; laid out by hand when it has line breaks),
``add_arguments(parser)`` and ``run(args)`` (its return value is the exit code); the parser itself, with the
summary below, is made here. Every command runs through cli_runner.run_command: a failure is one line on
stderr, exit 2 for a usage error, 1 for a runtime one.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from ferry.cli_runner import USAGE, OneLineParser, run_command
from ferry.schemas import console_formats

# name -> (module, one-line summary). The spellings are a contract: scripts and playbooks depend on them.
COMMANDS: dict[str, tuple[str, str]] = {
    "zookeeper": ("ferry.zk.cli", "run a local ZooKeeper server (Debian's zookeeper package)"),
    "broker": ("ferry.broker_cmd", "run a broker (and the mirror links stored in its cluster)"),
    "zookeeper-acls": ("ferry.zk.zk_acls_cmd", "secure (or open) an existing cluster's znodes with ZooKeeper ACLs"),
    "users": ("ferry.zk.users_cmd", "add, list and remove SCRAM users (SASL credentials in ZooKeeper)"),
    "topics": ("ferry.client.tools.topics_cmd", "create, list, describe, alter and reassign topics"),
    "produce": ("ferry.client.tools.produce_cmd", "console producer: publish lines from stdin"),
    "consume": ("ferry.client.tools.consume_cmd", "console consumer, optionally as a member of a group"),
    "configs": ("ferry.client.tools.configs_cmd", "describe and change topic and broker configs and client quotas "
                "(kafka-configs)"),
    "groups": ("ferry.client.tools.groups_cmd", "list, describe, reset and delete consumer groups"),
    "acls": ("ferry.client.tools.acls_cmd", "add, list and remove the brokers' ACLs (kafka-acls' spelling)"),
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
    parser = OneLineParser(prog="ferry")
    sub = parser.add_subparsers(dest="command", required=True)
    command = _add_command(sub, name, summary, importlib.import_module(module_name))
    if name in ("produce", "consume"):  # the console tools' --value-format avro: the registry is a higher layer
        parser.set_defaults(value_formats=console_formats)
    # how errors name the command: `ferry topics list`, `ferry mirror status`, but `ferry sql` for its default action
    parser.set_defaults(default_action=command.get_default("action"))
    return parser


def _add_command(sub: argparse._SubParsersAction, name: str, summary: str, module: ModuleType
                 ) -> argparse.ArgumentParser:
    """The command's parser, made the same way for every command from its module's parts."""
    description: str = module.DESCRIPTION
    command = sub.add_parser(name, help=summary, description=description,
                             formatter_class=argparse.RawDescriptionHelpFormatter if "\n" in description
                             else argparse.HelpFormatter, add_help=getattr(module, "ADD_HELP", True))
    module.add_arguments(command)
    command.set_defaults(func=module.run)
    return command


def _label(name: str, args: argparse.Namespace) -> str:
    action = getattr(args, "action", None)
    shown = isinstance(action, str) and action != args.default_action
    return f"ferry {name} {action}" if shown else f"ferry {name}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0 if argv else USAGE
    if argv[0] == "--version":
        argv[0] = "version"
    name = argv[0]
    if name not in COMMANDS:
        print(f"ferry: error: unknown command {name!r} (choose from {', '.join(COMMANDS)})", file=sys.stderr)
        return USAGE
    args, extra = build_parser(name).parse_known_args(argv)
    if extra:  # argparse would blame `ferry`; name the command whose flags these are not
        print(f"{_label(name, args)}: error: unrecognized arguments: {' '.join(extra)} "
              f"(see `{_label(name, args)} --help`)", file=sys.stderr)
        return USAGE
    return run_command(_label(name, args), args.func, args)


if __name__ == "__main__":
    sys.exit(main())

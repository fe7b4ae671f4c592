"""`ferry schemas register|list|show|compat|check|copy|serve`: the cluster's schema registry (Avro, JSON Schema,
Protobuf).

The registry lives in ZooKeeper under the cluster's chroot (``/schemas``), so these commands talk to
ZooKeeper directly. Errors go to stderr in one line (ferry/cli_runner.py): exit status 2 for bad input
(including a refused, incompatible schema), 1 when ZooKeeper does not answer or the schema file cannot be
read; ``check`` answers "incompatible" with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ferry.schemas.compatibility import LEVELS
from ferry.schemas.errors import SchemaError
from ferry.schemas.registry import SchemaRegistry
from ferry.schemas.replication import replicate
from ferry.schemas.schema_types import SCHEMA_TYPES
from ferry.zk import cli_args as cli
from ferry.zk.cli_args import UsageError

DESCRIPTION = (
    "The schema registry (Avro, JSON Schema, Protobuf) of one cluster, kept in ZooKeeper under the cluster's chroot. "
    "Schemas are registered under a subject (by convention the topic name); each distinct schema gets a "
    "global id, which every message carries (magic byte 0 + 4-byte id + Avro body).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = cli.add_actions(parser)

    reg = actions.add_parser(
        "register", help="register a schema under a subject",
        description="Register the schema in FILE under SUBJECT. The same schema again returns its existing id; "
        "a schema that breaks the subject's compatibility level is refused, naming the fields at fault.",
    )
    reg.add_argument("subject", metavar="SUBJECT", help="subject name (by convention the topic)")
    reg.add_argument("--schema-file", required=True, type=Path, metavar="FILE",
                     help="the schema (.avsc, .json, .proto); '-' reads standard input")
    _add_schema_type(reg)

    lst = actions.add_parser("list", help="list subjects with their versions and latest id",
                             description="List every subject: versions, latest schema id, compatibility level.")
    cli.add_json_argument(lst)

    show = actions.add_parser(
        "show", help="print a subject's schema (latest or --version N) or the schema with --id N",
        description="Print a registered schema as JSON: {subject, version, id, compatibility, schema}.",
    )
    show.add_argument("subject", metavar="SUBJECT", nargs="?", help="the subject (not needed with --id)")
    show.add_argument("--version", type=int, metavar="N", help="that version of SUBJECT (default: the latest)")
    show.add_argument("--id", type=int, metavar="N", dest="schema_id", help="the schema with this global id")
    show.add_argument("--schema-only", action="store_true", help="print only the schema JSON (e.g. to a .avsc)")

    compat = actions.add_parser(
        "compat", help="show or set a subject's (or the default) compatibility level",
        description="Without --level, print the level in force. With --level, set it for SUBJECT (an override) "
        "or, with --default, for every subject without an override. Levels: " + ", ".join(LEVELS) + ".",
    )
    compat.add_argument("subject", metavar="SUBJECT", nargs="?", help="the subject (omit with --default)")
    compat.add_argument("--level", type=str.upper, choices=LEVELS, metavar="LEVEL",
                        help="new level: " + ", ".join(LEVELS))
    compat.add_argument("--default", action="store_true", help="the registry-wide default instead of one subject")
    compat.add_argument("--clear", action="store_true", help="remove SUBJECT's override (the default applies)")

    check = actions.add_parser(
        "check", help="test whether a schema could be registered under a subject (exit 1 if not)",
        description="Check FILE against SUBJECT's compatibility level without registering it.",
    )
    check.add_argument("subject", metavar="SUBJECT", help="the subject")
    check.add_argument("--schema-file", required=True, type=Path, metavar="FILE",
                       help="the schema (.avsc, .json, .proto); '-' reads standard input")
    _add_schema_type(check)

    copy = actions.add_parser(
        "copy", help="copy another cluster's registry here (ids preserved), e.g. live -> offline",
        description="Copy every schema id and subject version of the --from-zookeeper cluster that this "
        "cluster (--zookeeper) lacks, keeping the ids, so mirrored messages decode here. Idempotent.",
    )
    copy.add_argument("--from-zookeeper", required=True, metavar="HOST:PORT/CHROOT",
                      help="the source cluster's ZooKeeper connect string (e.g. .../ferry/live)")

    serve = actions.add_parser(
        "serve", help="serve the registry's REST API (Confluent Schema Registry's) over HTTP",
        description="Serve this cluster's registry over the REST API that schema-registry clients speak "
        "(confluent_kafka.schema_registry, Connect, Flink, Spark): /subjects, /subjects/S/versions[/V], "
        "/schemas/ids/ID, /compatibility/subjects/S/versions/V, /config[/S], /mode[/S], /contexts; AVRO, JSON "
        "and PROTOBUF schemas; soft and permanent deletes. Same ids and compatibility "
        "rules as the other `ferry schemas` commands; runs until interrupted.",
    )
    serve.add_argument("--listen", default="127.0.0.1:8081", metavar="HOST:PORT",
                       help="address to serve on (default 127.0.0.1:8081, the registry's usual port)")
    cli.add_http_security_arguments(serve, "the REST API", writers=True)

    for sub in (reg, lst, show, compat, check, copy, serve):
        cli.add_zookeeper_argument(sub, "the cluster's ZooKeeper connect string, e.g. 127.0.0.1:2181/ferry/live",
                                   with_timeout=True)


def _add_schema_type(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schema-type", type=str.upper, choices=SCHEMA_TYPES, default="AVRO", metavar="TYPE",
                        help="AVRO (default), JSON (JSON Schema) or PROTOBUF (.proto text)")


def run(args: argparse.Namespace) -> int:
    cli.quiet_zookeeper_logs()
    cli.require_zookeeper(args)
    _check_usage(args)
    schema_text = _read_schema(args.schema_file) if getattr(args, "schema_file", None) else None
    with _open_registry(args) as registry:
        return _ACTIONS[args.action](registry, args, schema_text)


def _open_registry(args: argparse.Namespace) -> SchemaRegistry:
    if args.action == "copy":  # the source must exist: fail before creating anything at the target
        SchemaRegistry(args.from_zookeeper, timeout=args.timeout, read_only=True).close()
    writes = args.action in ("register", "copy", "serve") or (args.action == "compat" and (args.level or args.clear))
    return SchemaRegistry(args.zookeeper, timeout=args.timeout, read_only=not writes)


def _check_usage(args: argparse.Namespace) -> None:
    if args.action == "show":
        if args.schema_id is not None and (args.subject or args.version is not None):
            raise UsageError("use either SUBJECT [--version N] or --id N, not both")
        if args.schema_id is None and not args.subject:
            raise UsageError("give a SUBJECT (optionally --version N) or --id N")
    if args.action == "compat":
        if args.default == bool(args.subject):
            raise UsageError("give either a SUBJECT or --default")
        if args.clear and (args.default or args.level):
            raise UsageError("--clear removes a SUBJECT's override; it takes no --level or --default")


def _read_schema(path: Path) -> str:
    """The schema text; an OSError naming the file when it cannot be read (a runtime error: exit 1)."""
    return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")


def _register(registry: SchemaRegistry, args: argparse.Namespace, schema_text: str | None) -> int:
    existing = registry.lookup(args.subject, schema_text, args.schema_type)
    if existing is not None:
        print(f"Subject {existing.subject} already has this schema: version {existing.version}, id {existing.id}.")
        return 0
    before = registry.id_of(schema_text, args.schema_type)
    sv = registry.register_version(args.subject, schema_text, args.schema_type)
    note = " (an existing id: the same schema is registered under another subject)" if before else ""
    print(f"Registered subject {sv.subject} version {sv.version} with id {sv.id}{note}.")
    return 0


def _list(registry: SchemaRegistry, args: argparse.Namespace, _schema: str | None) -> int:
    rows = []
    for subject in registry.subjects():
        try:
            latest = registry.latest(subject)
        except SchemaError:
            continue
        rows.append({"subject": subject, "versions": registry.versions(subject), "latest_id": latest.id,
                     "compatibility": registry.compatibility(subject)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        versions = ",".join(map(str, row["versions"]))
        print(f"{row['subject']}\tversions: {versions}\tlatest id: {row['latest_id']}\t"
              f"compatibility: {row['compatibility']}")
    return 0


def _show(registry: SchemaRegistry, args: argparse.Namespace, _schema: str | None) -> int:
    if args.schema_id is not None:
        typed = registry.get_typed(args.schema_id)
        schema = typed.text if typed.schema_type == "PROTOBUF" else typed.value
        doc = {"id": args.schema_id, "schema": schema}
        if typed.schema_type != "AVRO":
            doc["schemaType"] = typed.schema_type
    else:
        sv = registry.version(args.subject, args.version) if args.version is not None else registry.latest(args.subject)
        schema = sv.schema if sv.schema_type != "JSON" else json.loads(sv.schema)
        doc = {"subject": sv.subject, "version": sv.version, "id": sv.id,
               "compatibility": registry.compatibility(sv.subject), "schema": schema}
        if sv.schema_type != "AVRO":
            doc["schemaType"] = sv.schema_type
    print(json.dumps(schema if args.schema_only else doc, indent=2))
    return 0


def _compat(registry: SchemaRegistry, args: argparse.Namespace, _schema: str | None) -> int:
    subject = None if args.default else args.subject
    if args.clear:
        registry.set_compatibility(None, subject)
        print(f"Subject {subject}: override removed; compatibility is {registry.compatibility(subject)}.")
    elif args.level:
        registry.set_compatibility(args.level, subject)
        print(f"{'Default' if subject is None else 'Subject ' + subject}: compatibility set to {args.level}.")
    else:
        level = registry.compatibility(subject)
        source = "" if subject is None else (
            " (subject override)" if registry.compatibility_override(subject) else " (the default)")
        print(f"{level}{source}")
    return 0


def _check(registry: SchemaRegistry, args: argparse.Namespace, schema_text: str | None) -> int:
    problems = registry.check(args.subject, schema_text, args.schema_type)
    level = registry.compatibility(args.subject)
    if problems:
        print(f"INCOMPATIBLE with subject {args.subject} ({level}):")
        for p in problems:
            print(f"  - {p}")
        return 1
    print(f"Compatible with subject {args.subject} ({level}).")
    return 0


def _serve(registry: SchemaRegistry, args: argparse.Namespace, _schema: str | None) -> int:
    from ferry.schemas.rest import serve  # fastapi and uvicorn load only for `serve`

    host, sep, port = args.listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen {args.listen!r} is not HOST:PORT")
    security = cli.http_security(args, args.zookeeper)
    print(f"ferry schemas serve: the registry's REST API on {security.scheme}://{host}:{port}/", file=sys.stderr,
          flush=True)
    try:
        serve(registry, host, int(port), security)
    except KeyboardInterrupt:
        pass
    return 0


def _copy(registry: SchemaRegistry, args: argparse.Namespace, _schema: str | None) -> int:
    source = SchemaRegistry(args.from_zookeeper, timeout=args.timeout, read_only=True)
    try:
        result = replicate(source, registry)
    finally:
        source.close()
    print(f"Copied {result.ids_copied} schema id(s) and {result.versions_copied} subject version(s).")
    return 0


_ACTIONS = {"serve": _serve, "copy": _copy, "register": _register, "list": _list, "show": _show, "compat": _compat, "check": _check}

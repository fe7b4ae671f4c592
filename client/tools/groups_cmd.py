"""`ferry groups list|describe|reset|delete`: both kinds of consumer groups (docs/groups.md).

The paper's ZooKeeper groups (ferry's ConsumerConnector: members, owners and offsets under /consumers/<group>)
and the brokers' groups (Kafka's group protocol: any Kafka client's group.id) are read through
consumer_group_service.py (which the dashboard shows too); this module is the command: its flags, its
printing, and the changes it makes. A group id names either kind or both; ``--type`` picks one where it
matters.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from ferry.client.errors import ClientError
from ferry.client.group_dirs import group_dir, validate_group
from ferry.client.group_store import group_exists, read_members, read_offsets, write_offset
from ferry.client.simple_consumer import SimpleConsumer
from ferry.client.tools.bootstrap_admin import open_admin
from ferry.client.tools.consumer_group_service import KINDS, ConsumerGroupService
from ferry.zk import cli_args as cli
from ferry.zk import connect as zk_connect
from ferry.zk.cli_args import UsageError

DESCRIPTION = (
    "Two kinds of consumer groups: the paper's, coordinated through ZooKeeper by ferry's own "
    "consumers (members under /consumers/<group>/ids, owners under .../owners, offsets under .../offsets), "
    "and Kafka's group protocol, coordinated by a broker for any Kafka client (offsets under "
    "/consumer_offsets/<group>). Each action handles both; --type zookeeper|kafka picks one. With --bootstrap-server "
    "instead of --zookeeper, the brokers' groups through their APIs alone.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = cli.add_actions(parser)
    lst = actions.add_parser("list", help="list the groups", description="Print the cluster's consumer groups.")
    describe = actions.add_parser(
        "describe", help="members, and per partition: owner, committed offset, log end, lag",
        description="Show a group's live members and, for every partition of every topic it consumes, the owning "
        "member, the committed offset, the log end offset (from the brokers) and the lag (log end - committed).")
    describe.add_argument("--group", required=True, metavar="G", help="the group")
    reset = actions.add_parser(
        "reset", help="move a group's committed offsets",
        description="Set the committed offsets of a group: to the earliest or latest offset, to an offset, or to "
        "the first message at or after a time (ListOffsets by timestamp). Refused while the group has live "
        "members unless --force (running members would overwrite the new offsets at their next commit).")
    reset.add_argument("--group", required=True, metavar="G", help="the group")
    reset.add_argument("--topic", action="append", metavar="T",
                       help="topic to reset (repeatable; default: every topic the group has offsets for)")
    reset.add_argument("--partitions", metavar="P[,P...]", help="only these partitions (default: all)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the earliest offset still in the log")
    to.add_argument("--to-latest", action="store_true", help="the log end (skip everything not yet consumed)")
    to.add_argument("--to-offset", type=int, metavar="N",
                    help="offset N in every selected partition (clamped to what the log holds)")
    to.add_argument("--to-datetime", metavar="ISO",
                    help="first message with event time >= ISO, e.g. 2024-05-01T13:00:00 (UTC unless an offset "
                    "like +02:00 is given)")
    reset.add_argument("--force", action="store_true", help="reset even though the group has live members "
                       "(ZooKeeper groups only: a broker's group refuses offsets while it has members)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true",
                      help="write the new offsets (without it the reset is a dry run, as in kafka-consumer-groups)")
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets without writing them (the default)")
    delete = actions.add_parser(
        "delete", help="delete a group and its committed offsets",
        description="Delete a group with no live members, and its committed offsets (as kafka-consumer-groups "
        "--delete: no dry run).")
    delete.add_argument("--group", required=True, metavar="G", help="the group")
    for sub in (lst, describe, reset, delete):
        cli.add_zookeeper_argument(sub, with_timeout=True)
        cli.add_bootstrap_argument(sub, "a broker of the cluster: the brokers' groups through ListGroups, "
                                   "DescribeGroups, OffsetFetch/OffsetCommit and DeleteGroups (no ZooKeeper groups)")
        cli.add_client_config_argument(sub, "the brokers (log ends, Kafka-protocol groups)")
        sub.add_argument("--type", choices=KINDS, help="only this kind of group (default: both; reset and "
                         "delete need it when the id names a group of each kind)")
    for sub in (lst, describe):
        cli.add_json_argument(sub)
    lst.add_argument("--state", action="store_true", help="with each group, its state (Stable, Empty, "
                     "PreparingRebalance, CompletingRebalance, Dead; ZooKeeper groups: their member count)")


def run(args: argparse.Namespace) -> int:
    cli.quiet_zookeeper_logs()
    cli.require_one_cluster(args)
    if getattr(args, "group", None) == "":
        raise UsageError("the group id is empty")
    args.client_config = cli.client_config(args)
    if args.bootstrap:  # the brokers' groups alone (Kafka 4's way); the paper's groups live in ZooKeeper
        if args.type == "zookeeper":
            raise UsageError("ZooKeeper groups live in ZooKeeper: give --zookeeper HOST:PORT/CHROOT")
        args.type = "kafka"
        return _ACTIONS[args.action](ConsumerGroupService(None, None, admin=open_admin(args),
                                                          client_config=args.client_config), args)
    zk = zk_connect(args.zookeeper, timeout=args.timeout)
    try:
        service = ConsumerGroupService(zk, args.zookeeper, client_config=args.client_config)
        return _ACTIONS[args.action](service, args)
    finally:
        zk.stop()
        zk.close()


def _list(service: ConsumerGroupService, args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    if args.type != "kafka":
        rows += [{"group": g, "type": "zookeeper", "members": len(read_members(service.zk, g)), "state": None}
                 for g in service.zookeeper_groups()]
    if args.type != "zookeeper":
        states = service.kafka.states() if args.state or args.json else {}
        rows += [{"group": g, "type": "kafka", "members": n, "state": states.get(g, "Empty")}
                 for g, n in service.kafka.list().items()]
    rows.sort(key=lambda r: (r["group"], r["type"]))
    if args.json:
        print(json.dumps(rows))
    elif args.state:  # kafka-consumer-groups --list --state
        width = max([len("GROUP"), *(len(r["group"]) for r in rows)])
        print(f"{'GROUP':<{width}}  STATE")
        for r in rows:
            state = r["state"] or f"({r['members']} member(s), ZooKeeper group)"
            print(f"{r['group']:<{width}}  {state}")
    else:
        for g in sorted({r["group"] for r in rows}):
            print(g)
    return 0


def _one_kind(service: ConsumerGroupService, args: argparse.Namespace) -> str:
    """The kind an action that changes a group acts on: --type, else the one that exists (a new group: zookeeper)."""
    if args.type:
        return args.type
    kinds = service.kinds(args.group)
    if len(kinds) > 1:
        raise UsageError(f"{args.group!r} names both a ZooKeeper group and a Kafka-protocol group: choose one with "
                         "--type zookeeper|kafka")
    return kinds[0] if kinds else "zookeeper"


def _describe(service: ConsumerGroupService, args: argparse.Namespace) -> int:
    kinds = service.kinds(args.group, args.type)
    if not kinds:
        raise UsageError(f"group {args.group!r} does not exist")
    docs = {kind: service.describe(args.group, kind) for kind in kinds}
    if args.json:
        doc = next(iter(docs.values())) if len(docs) == 1 else {"group": args.group, "type": "both", **docs}
        print(json.dumps(doc, indent=2))
        return 0
    if "zookeeper" in docs:
        doc = docs["zookeeper"]
        print(f"Group: {args.group}\tMembers: {len(doc['members'])}")
        for m in doc["members"]:
            print(f"\tMember: {m['id']}\tSubscription: {m['subscription'] or '(unreadable)'}")
        _print_table(doc["partitions"])
    if "kafka" in docs:
        _print_kafka_group(docs["kafka"])
    return 0


def _print_kafka_group(doc: dict[str, Any]) -> None:
    state = doc["state"] or "unknown"
    print(f"Group: {doc['group']}\tType: kafka\tState: {state}\tCoordinator: {doc['coordinator']}\t"
          f"Members: {len(doc['members'])}")
    if doc.get("note"):
        print(f"\t({doc['note']})")
    for m in doc["members"]:
        parts = ", ".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]) or "-"
        print(f"\tMember: {m['id']}\tClient: {m['client_id']}\tHost: {m['host'] or '-'}\tPartitions: {parts}")
    _print_table(doc["partitions"])


def _print_table(rows: list[dict]) -> None:
    headers = ("TOPIC", "PARTITION", "OWNER", "COMMITTED", "LOG-END", "LAG")
    table = [tuple("-" if r[k] is None else str(r[k]) for k in ("topic", "partition", "owner", "committed",
                                                                "log_end", "lag")) for r in rows]
    widths = [max(len(x[i]) for x in [headers, *table]) for i in range(len(headers))]
    for r in [headers, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _parse_datetime(text: str) -> int:
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime {text!r} is not an ISO date-time (e.g. 2024-05-01T13:00:00)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def _reset(service: ConsumerGroupService, args: argparse.Namespace) -> int:
    kind = _one_kind(service, args)
    offsets = _offsets_to_reset(service, args, kind)
    topics = args.topic or sorted({t for t, _ in offsets})
    if not topics:
        raise UsageError(f"group {args.group!r} has no committed offsets; name the topic(s) with --topic")
    plan = _reset_plan(service, args, topics, offsets)
    for topic, p, old, new, note in plan:
        print(f"{topic}\t{p}\t{'-' if old is None else old} -> {new}\t{note}".rstrip())
    if not args.execute:
        print("(dry run: nothing written; add --execute to write these offsets)", file=sys.stderr)
        return 0
    try:
        if kind == "kafka":
            service.kafka.write_offsets(args.group, {(t, p): new for t, p, _old, new, _note in plan})
        else:
            for topic, p, _old, new, _note in plan:
                write_offset(service.zk, args.group, topic, p, new)
    except (UsageError, ClientError):
        raise
    except Exception as exc:
        raise ClientError(f"writing offsets failed: {exc}") from exc
    print(f"Reset {len(plan)} partition(s) of {kind} group {args.group}.", file=sys.stderr)
    return 0


def _offsets_to_reset(service: ConsumerGroupService, args: argparse.Namespace, kind: str
                      ) -> dict[tuple[str, int], int]:
    """The group's committed offsets, once it is clear that no live member would overwrite the reset."""
    if kind == "kafka":
        service.kafka.check_no_members(args.group)
        return service.kafka.offsets(args.group)
    members = read_members(service.zk, validate_group(args.group))
    if members and not args.force:
        raise UsageError(f"group {args.group!r} has {len(members)} live member(s) ({', '.join(members)}); stop "
                         "them first, or pass --force (they would overwrite the reset at their next commit)")
    return read_offsets(service.zk, args.group)


def _reset_plan(service: ConsumerGroupService, args: argparse.Namespace, topics: list[str],
                offsets: dict[tuple[str, int], int]) -> list[tuple[str, int, int | None, int, str]]:
    """(topic, partition, old offset, new offset, note) for every selected partition."""
    wanted: set[int] | None = None
    if args.partitions:
        try:
            wanted = {int(x) for x in args.partitions.split(",") if x.strip()}
        except ValueError:
            raise UsageError(f"--partitions {args.partitions!r} must be a comma-separated list of numbers") from None
    ts = _parse_datetime(args.to_datetime) if args.to_datetime else None
    plan: list[tuple[str, int, int | None, int, str]] = []
    with SimpleConsumer(bootstrap=args.bootstrap, zookeeper=args.zookeeper, client_id="ferry-groups",
                        timeout_s=10.0, client_config=args.client_config) as c:
        for topic in topics:
            parts = service.partitions(topic)
            if not parts:
                raise UsageError(f"topic {topic!r} does not exist")
            if wanted is not None:
                missing = wanted - set(parts)
                if missing:
                    raise UsageError(f"topic {topic!r} has no partition(s) {sorted(missing)}")
                parts = sorted(wanted)
            by_time = c.offsets_for_time(topic, parts, ts) if ts is not None else {}
            for p in parts:
                low, high = c.watermarks(topic, p)
                note = ""
                if args.to_earliest:
                    new = low
                elif args.to_latest:
                    new = high
                elif args.to_offset is not None:
                    new = min(max(args.to_offset, low), high)
                    if new != args.to_offset:
                        note = f"(clamped to the log's [{low}, {high}])"
                else:
                    new = by_time[p]
                plan.append((topic, p, offsets.get((topic, p)), new, note))
    return plan


def _delete(service: ConsumerGroupService, args: argparse.Namespace) -> int:
    kind = _one_kind(service, args)
    if kind == "kafka":
        service.kafka.delete(args.group)
    else:
        zk = service.zk
        if not group_exists(zk, validate_group(args.group)):
            raise UsageError(f"group {args.group!r} does not exist")
        members = read_members(zk, args.group)
        if members:
            raise UsageError(f"group {args.group!r} has {len(members)} live member(s) ({', '.join(members)}); stop "
                             "them first")
        zk.delete(group_dir(args.group), recursive=True)
    print(f"Deleted {kind} group {args.group}.", file=sys.stderr)
    return 0


_ACTIONS = {"list": _list, "describe": _describe, "reset": _reset, "delete": _delete}

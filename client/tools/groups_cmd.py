"""`ferry groups list|describe|reset|delete`: both kinds of consumer groups (docs/groups.md).

The paper's ZooKeeper groups (ferry's ConsumerConnector: members, owners and offsets under /consumers/<group>)
are handled here; the brokers' groups (Kafka's group protocol: any Kafka client's group.id) in
kafka_groups_cmd.py. A group id names either kind or both; ``--type`` picks one where it matters.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from ferry.client.tools import kafka_groups_cmd
from ferry.zk.cli_args import (
    UsageError,
    add_json_argument,
    add_zookeeper_argument,
    quiet_zookeeper_logs,
    require_zookeeper,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "groups", help="list, describe, reset and delete consumer groups",
        description="Two kinds of consumer groups: the paper's, coordinated through ZooKeeper by ferry's own "
        "consumers (members under /consumers/<group>/ids, owners under .../owners, offsets under .../offsets), "
        "and Kafka's group protocol, coordinated by a broker for any Kafka client (offsets under "
        "/consumer_offsets/<group>). Each action handles both; --type zookeeper|kafka picks one.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
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
        add_zookeeper_argument(sub)
        sub.add_argument("--type", choices=KINDS, help="only this kind of group (default: both; reset and "
                         "delete need it when the id names a group of each kind)")
    for sub in (lst, describe):
        add_json_argument(sub)
    parser.set_defaults(func=run)


KINDS = ("zookeeper", "kafka")


def run(args: argparse.Namespace) -> int:
    from ferry.client.errors import ClientError
    from ferry.zk import RegistryError
    from ferry.zk import connect as zk_connect

    quiet_zookeeper_logs()
    try:
        require_zookeeper(args)
        if getattr(args, "group", None) == "":
            raise UsageError("the group id is empty")
        zk = zk_connect(args.zookeeper)
        try:
            return {"list": _list, "describe": _describe, "reset": _reset, "delete": _delete}[args.action](zk, args)
        finally:
            zk.stop()
            zk.close()
    except (UsageError, ClientError, RegistryError, ValueError) as exc:
        print(f"ferry groups {args.action}: error: {exc}", file=sys.stderr)
        return 2


def _list(zk, args: argparse.Namespace) -> int:
    from ferry.client.group_store import list_groups, read_members

    rows = []
    if args.type != "kafka":
        rows += [{"group": g, "type": "zookeeper", "members": len(read_members(zk, g))} for g in list_groups(zk)]
    if args.type != "zookeeper":
        rows += [{"group": g, "type": "kafka", "members": n} for g, n in kafka_groups_cmd.list_groups(zk).items()]
    rows.sort(key=lambda r: (r["group"], r["type"]))
    if args.json:
        print(json.dumps(rows))
    else:
        for g in sorted({r["group"] for r in rows}):
            print(g)
    return 0


def _zk_group(group: str) -> str:
    from ferry.client.group_dirs import validate_group

    return validate_group(group)


def _kinds(zk, args: argparse.Namespace) -> list[str]:
    """The kinds of group the id names (restricted by --type)."""
    from ferry.client.group_store import group_exists

    out = []
    if args.type != "kafka" and "/" not in args.group and group_exists(zk, _zk_group(args.group)):
        out.append("zookeeper")
    if args.type != "zookeeper" and kafka_groups_cmd.exists(zk, args.group):
        out.append("kafka")
    return out


def _one_kind(zk, args: argparse.Namespace) -> str:
    """The kind an action that changes a group acts on: --type, else the one that exists (a new group: zookeeper)."""
    if args.type:
        return args.type
    kinds = _kinds(zk, args)
    if len(kinds) > 1:
        raise UsageError(f"{args.group!r} names both a ZooKeeper group and a Kafka-protocol group: choose one with "
                         "--type zookeeper|kafka")
    return kinds[0] if kinds else "zookeeper"


def _topics_of(zk, group: str) -> list[str]:
    """Topics a group consumes: those with offsets or owners, and those its live members subscribe to."""
    from ferry.client.group_store import read_members, read_offsets, read_owners
    from ferry.zk.znodes import BROKER_TOPICS_PATH

    topics = {t for t, _ in read_offsets(zk, group)} | {t for t, _ in read_owners(zk, group)}
    existing = zk.get_children(BROKER_TOPICS_PATH) if zk.exists(BROKER_TOPICS_PATH) else []
    for sub in read_members(zk, group).values():
        if sub is not None:
            topics |= {t for t in existing if sub.matches(t)}
    return sorted(topics)


def _partitions(zk, topic: str) -> list[int]:
    from kazoo.exceptions import NoNodeError

    from ferry.zk import TopicInfo
    from ferry.zk.znodes import topic_path

    try:
        data, _ = zk.get(topic_path(topic))
    except NoNodeError:
        return []
    try:
        return sorted(TopicInfo.decode(topic, data).partitions)
    except ValueError:
        return []


def _log_ends(zookeeper: str, topic: str, partitions: list[int]) -> dict[int, int | None]:
    """Log end offsets; None where the brokers cannot tell (down, or no broker at all)."""
    from ferry.client.errors import ClientError
    from ferry.client.simple_consumer import SimpleConsumer

    out: dict[int, int | None] = dict.fromkeys(partitions)
    try:
        with SimpleConsumer(zookeeper=zookeeper, client_id="ferry-groups", timeout_s=5.0) as c:
            for p in partitions:
                try:
                    out[p] = c.watermarks(topic, p)[1]
                except ClientError:
                    pass
    except ClientError:
        pass
    return out


def _describe(zk, args: argparse.Namespace) -> int:
    kinds = _kinds(zk, args)
    if not kinds:
        raise UsageError(f"group {args.group!r} does not exist")
    docs = {}
    if "zookeeper" in kinds:
        docs["zookeeper"] = _zk_describe_doc(zk, args)
    if "kafka" in kinds:
        docs["kafka"] = kafka_groups_cmd.describe_doc(
            zk, args.group, lambda t: _partitions(zk, t), lambda t, ps: _log_ends(args.zookeeper, t, ps))
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
        kafka_groups_cmd.print_describe(docs["kafka"], _print_table)
    return 0


def _zk_describe_doc(zk, args: argparse.Namespace) -> dict:
    from ferry.client.group_store import read_members, read_offsets, read_owners

    members = read_members(zk, args.group)
    owners = read_owners(zk, args.group)
    offsets = read_offsets(zk, args.group)
    rows = []
    for topic in _topics_of(zk, args.group):
        parts = sorted(set(_partitions(zk, topic)) | {p for t, p in offsets if t == topic})
        ends = _log_ends(args.zookeeper, topic, parts)
        for p in parts:
            committed, end = offsets.get((topic, p)), ends.get(p)
            lag = end - committed if committed is not None and end is not None else None
            rows.append({"topic": topic, "partition": p, "owner": owners.get((topic, p)), "committed": committed,
                         "log_end": end, "lag": lag})
    return {"group": args.group, "type": "zookeeper",
            "members": [{"id": m, "subscription": s.describe() if s else None} for m, s in members.items()],
            "partitions": rows}


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


def _reset(zk, args: argparse.Namespace) -> int:
    from ferry.client.errors import ClientError
    from ferry.client.group_store import read_members, read_offsets, write_offset
    from ferry.client.simple_consumer import SimpleConsumer

    kind = _one_kind(zk, args)
    if kind == "kafka":
        kafka_groups_cmd.check_no_members(zk, args.group)
        offsets = kafka_groups_cmd.offsets(zk, args.group)
    else:
        members = read_members(zk, _zk_group(args.group))
        if members and not args.force:
            raise UsageError(f"group {args.group!r} has {len(members)} live member(s) ({', '.join(members)}); stop "
                             "them first, or pass --force (they would overwrite the reset at their next commit)")
        offsets = read_offsets(zk, args.group)
    topics = args.topic or sorted({t for t, _ in offsets})
    if not topics:
        raise UsageError(f"group {args.group!r} has no committed offsets; name the topic(s) with --topic")
    wanted: set[int] | None = None
    if args.partitions:
        try:
            wanted = {int(x) for x in args.partitions.split(",") if x.strip()}
        except ValueError:
            raise UsageError(f"--partitions {args.partitions!r} must be a comma-separated list of numbers") from None
    ts = _parse_datetime(args.to_datetime) if args.to_datetime else None
    plan: list[tuple[str, int, int | None, int, str]] = []
    with SimpleConsumer(zookeeper=args.zookeeper, client_id="ferry-groups", timeout_s=10.0) as c:
        for topic in topics:
            parts = _partitions(zk, topic)
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
    for topic, p, old, new, note in plan:
        print(f"{topic}\t{p}\t{'-' if old is None else old} -> {new}\t{note}".rstrip())
    if not args.execute:
        print("(dry run: nothing written; add --execute to write these offsets)", file=sys.stderr)
        return 0
    try:
        if kind == "kafka":
            kafka_groups_cmd.write_offsets(zk, args.group, {(t, p): new for t, p, _old, new, _note in plan})
        else:
            for topic, p, _old, new, _note in plan:
                write_offset(zk, args.group, topic, p, new)
    except (UsageError, ClientError):
        raise
    except Exception as exc:
        raise ClientError(f"writing offsets failed: {exc}") from exc
    print(f"Reset {len(plan)} partition(s) of {kind} group {args.group}.", file=sys.stderr)
    return 0


def _delete(zk, args: argparse.Namespace) -> int:
    from ferry.client.group_dirs import group_dir
    from ferry.client.group_store import group_exists, read_members

    kind = _one_kind(zk, args)
    if kind == "kafka":
        kafka_groups_cmd.delete(zk, args.group)
    else:
        if not group_exists(zk, _zk_group(args.group)):
            raise UsageError(f"group {args.group!r} does not exist")
        members = read_members(zk, args.group)
        if members:
            raise UsageError(f"group {args.group!r} has {len(members)} live member(s) ({', '.join(members)}); stop "
                             "them first")
        zk.delete(group_dir(args.group), recursive=True)
    print(f"Deleted {kind} group {args.group}.", file=sys.stderr)
    return 0

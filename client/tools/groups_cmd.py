"""`ferry groups list|describe|reset`: consumer groups as kept in ZooKeeper (ids, owners, offsets)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from ferry.zk.cli_args import UsageError, add_zookeeper_argument, quiet_zookeeper_logs, require_zookeeper


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "groups", help="list, describe and reset consumer groups",
        description="Consumer groups are coordinated through ZooKeeper (no broker-side coordinator): members "
        "under /consumers/<group>/ids, partition owners under .../owners, committed offsets under .../offsets.")
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
    reset.add_argument("--force", action="store_true", help="reset even though the group has live members")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true",
                      help="write the new offsets (without it the reset is a dry run, as in kafka-consumer-groups)")
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets without writing them (the default)")
    for sub in (lst, describe, reset):
        add_zookeeper_argument(sub)
    for sub in (lst, describe):
        sub.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ferry.client.errors import ClientError
    from ferry.zk import RegistryError
    from ferry.zk import connect as zk_connect

    quiet_zookeeper_logs()
    try:
        require_zookeeper(args)
        if getattr(args, "group", None) is not None:
            from ferry.client.group_dirs import validate_group

            validate_group(args.group)
        zk = zk_connect(args.zookeeper)
        try:
            return {"list": _list, "describe": _describe, "reset": _reset}[args.action](zk, args)
        finally:
            zk.stop()
            zk.close()
    except (UsageError, ClientError, RegistryError, ValueError) as exc:
        print(f"ferry groups {args.action}: error: {exc}", file=sys.stderr)
        return 2


def _list(zk, args: argparse.Namespace) -> int:
    from ferry.client.group_store import list_groups, read_members

    groups = list_groups(zk)
    if args.json:
        print(json.dumps([{"group": g, "members": len(read_members(zk, g))} for g in groups]))
    else:
        for g in groups:
            print(g)
    return 0


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
    from ferry.client.group_store import group_exists, read_members, read_offsets, read_owners

    if not group_exists(zk, args.group):
        raise UsageError(f"group {args.group!r} does not exist")
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
    doc = {"group": args.group,
           "members": [{"id": m, "subscription": s.describe() if s else None} for m, s in members.items()],
           "partitions": rows}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"Group: {args.group}\tMembers: {len(members)}")
    for m in doc["members"]:
        print(f"\tMember: {m['id']}\tSubscription: {m['subscription'] or '(unreadable)'}")
    headers = ("TOPIC", "PARTITION", "OWNER", "COMMITTED", "LOG-END", "LAG")
    table = [tuple("-" if r[k] is None else str(r[k]) for k in ("topic", "partition", "owner", "committed",
                                                                "log_end", "lag")) for r in rows]
    widths = [max(len(x[i]) for x in [headers, *table]) for i in range(len(headers))]
    for r in [headers, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


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

    members = read_members(zk, args.group)
    if members and not args.force:
        raise UsageError(f"group {args.group!r} has {len(members)} live member(s) ({', '.join(members)}); stop them "
                         "first, or pass --force (they would overwrite the reset at their next commit)")
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
        for topic, p, _old, new, _note in plan:
            write_offset(zk, args.group, topic, p, new)
    except Exception as exc:
        raise ClientError(f"writing offsets failed: {exc}") from exc
    print(f"Reset {len(plan)} partition(s) of group {args.group}.", file=sys.stderr)
    return 0

"""`ferry groups` for the brokers' consumer groups (Kafka's group protocol; docs/groups.md).

The paper's ZooKeeper groups are groups_cmd.py's own; this module handles the other kind: members and
assignments from the group's coordinator (DescribeGroups), committed offsets from ZooKeeper
(``/consumer_offsets``, where the coordinators keep them), resets written through the coordinator
(OffsetCommit from outside the group, which it refuses while the group has members, as Kafka does) and
deletion (DeleteGroups).
"""

from __future__ import annotations

from typing import Any

from ferry.zk.cli_args import UsageError


def groups_client(zk: Any) -> Any:
    """A KafkaGroups over the cluster's live brokers (from ZooKeeper); None when no broker is registered."""
    from ferry.client.bootstrap import read_brokers
    from ferry.client.kafka_groups import KafkaGroups

    brokers = read_brokers(zk)
    return KafkaGroups(brokers) if brokers else None


def list_groups(zk: Any) -> dict[str, int | None]:
    """{group: members (None: no broker to ask)} of every Kafka-protocol group: those with committed offsets
    and those the coordinators know (members, no commit yet)."""
    from ferry.client.errors import ClientError
    from ferry.zk.group_offsets import list_groups as stored

    names = set(stored(zk))
    client = groups_client(zk)
    if client is None:
        return dict.fromkeys(sorted(names))
    out: dict[str, int | None] = {}
    with client:
        names |= set(client.list())
        for g in sorted(names):
            try:
                out[g] = len(client.describe(g).members)
            except ClientError:
                out[g] = None
    return out


def describe(zk: Any, group: str) -> Any:
    """The coordinator's view of the group (None when no broker can be asked)."""
    client = groups_client(zk)
    if client is None:
        return None
    with client:
        return client.describe(group)


def exists(zk: Any, group: str) -> bool:
    from ferry.client.errors import ClientError
    from ferry.zk.group_offsets import group_protocol_type

    if group_protocol_type(zk, group) is not None:
        return True
    try:
        d = describe(zk, group)
    except ClientError:
        return False
    return d is not None and d.exists


def offsets(zk: Any, group: str) -> dict[tuple[str, int], int]:
    from ferry.zk.group_offsets import fetch_offsets

    return {tp: c.offset for tp, c in fetch_offsets(zk, group).items()}


def describe_doc(zk: Any, group: str, partitions_of: Any, log_ends: Any) -> dict:
    """Members (with their assignments) and, per partition, owner, committed offset, log end and lag."""
    from ferry.client.errors import ClientError

    committed = offsets(zk, group)
    try:
        d = describe(zk, group)
    except ClientError as e:
        d, note = None, f"the coordinator could not be asked: {e}"
    else:
        note = None if d is not None else "no live broker: members unknown"
    owners = d.owners() if d is not None else {}
    topics = sorted({t for t, _ in committed} | {t for t, _ in owners})
    rows = []
    for topic in topics:
        parts = sorted(set(partitions_of(topic)) | {p for t, p in committed if t == topic})
        ends = log_ends(topic, parts)
        for p in parts:
            c, end = committed.get((topic, p)), ends.get(p)
            rows.append({"topic": topic, "partition": p, "owner": owners.get((topic, p)), "committed": c,
                         "log_end": end, "lag": end - c if c is not None and end is not None else None})
    members = [] if d is None else [
        {"id": m.member_id, "client_id": m.client_id, "host": m.client_host,
         "assignment": [{"topic": t, "partition": p} for t, ps in sorted(m.assignment.items()) for p in ps]}
        for m in d.members]
    doc: dict[str, Any] = {"group": group, "type": "kafka", "state": d.state if d is not None else None,
                           "protocol": d.protocol if d is not None else None,
                           "coordinator": d.coordinator if d is not None else None, "members": members,
                           "partitions": rows}
    if note:
        doc["note"] = note
    return doc


def print_describe(doc: dict, print_table: Any) -> None:
    state = doc["state"] or "unknown"
    print(f"Group: {doc['group']}\tType: kafka\tState: {state}\tCoordinator: {doc['coordinator']}\t"
          f"Members: {len(doc['members'])}")
    if doc.get("note"):
        print(f"\t({doc['note']})")
    for m in doc["members"]:
        parts = ", ".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]) or "-"
        print(f"\tMember: {m['id']}\tClient: {m['client_id']}\tPartitions: {parts}")
    print_table(doc["partitions"])


def check_no_members(zk: Any, group: str) -> None:
    """A reset is refused while the group has members: the coordinator would refuse the commit anyway (and the
    members would overwrite it at their next commit)."""
    d = describe(zk, group)
    if d is None:
        raise UsageError("no live broker to reset a Kafka-protocol group through")
    if d.members:
        ids = ", ".join(m.member_id for m in d.members)
        raise UsageError(f"group {group!r} has {len(d.members)} live member(s) ({ids}) in state {d.state}; stop "
                         "them first (the coordinator refuses offsets from outside while a group has members)")


def write_offsets(zk: Any, group: str, new: dict[tuple[str, int], int]) -> None:
    client = groups_client(zk)
    if client is None:
        raise UsageError("no live broker to reset a Kafka-protocol group through")
    with client:
        client.commit(group, new)


def delete(zk: Any, group: str) -> None:
    client = groups_client(zk)
    if client is None:
        raise UsageError("no live broker to delete a Kafka-protocol group through")
    with client:
        client.delete(group)

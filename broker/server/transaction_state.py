"""The transaction coordinator's durable state: one znode per transactional id in the cluster's ZooKeeper
(docs/transactions.md).

    /transactions/<quoted id>                    {"producer_id", "producer_epoch", "timeout_ms", "state",
                                                  "partitions": [[topic, p]], "groups": [...], "start_ms",
                                                  "update_ms", "txn_seq"}
    /transactions/<quoted id>/offsets/<quoted group>   the transaction's pending group offsets
                                                  {"producer_id", "producer_epoch", "txn_seq",
                                                   "offsets": [[topic, p, offset, leader_epoch, metadata]]}

Every change of a transaction's state is a conditional write on the znode's version (a coordinator that
lost the transactional id to another broker fails its write and gives the id up). Pending offsets are
written by the group's coordinator (TxnOffsetCommit) only while the transaction znode still has the version
that was checked (one ZooKeeper multi), and become the group's committed offsets (/consumer_offsets) when
the transaction commits; an abort deletes them. ``txn_seq`` counts the id's transactions, so offsets left
by an earlier transaction of the same producer epoch are never taken for this one's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from ferry.zk.group_offsets import CommittedOffset, commit_offsets

TXN_ROOT = "/transactions"

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def node_name(name: str) -> str:
    """A transactional id or group id as one znode name (no '/', never '.' or '..')."""
    q = quote(name, safe="")
    return q.replace(".", "%2E") if q in (".", "..") else q


def txn_path(txn_id: str) -> str:
    return f"{TXN_ROOT}/{node_name(txn_id)}"


def offsets_path(txn_id: str, group: str | None = None) -> str:
    base = f"{txn_path(txn_id)}/offsets"
    return base if group is None else f"{base}/{node_name(group)}"


@dataclass
class TxnMetadata:
    """One transactional id's state (Kafka's TransactionMetadata)."""

    txn_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    start_ms: int = -1  # when the ongoing transaction began (its timeout counts from here)
    update_ms: int = -1
    txn_seq: int = 0  # bumped when a transaction begins
    version: int = -1  # the znode's version this copy was read or written at (-1: not in ZooKeeper)

    def encode(self) -> bytes:
        return json.dumps({
            "version": 1, "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms, "state": self.state,
            "partitions": sorted([t, p] for t, p in self.partitions), "groups": sorted(self.groups),
            "start_ms": self.start_ms, "update_ms": self.update_ms, "txn_seq": self.txn_seq,
        }).encode()

    @staticmethod
    def decode(txn_id: str, data: bytes, version: int) -> TxnMetadata:
        d = json.loads(data)
        state = d["state"]
        if state not in STATES:
            raise ValueError(f"transaction {txn_id!r}: unknown state {state!r}")
        return TxnMetadata(txn_id, int(d["producer_id"]), int(d["producer_epoch"]), int(d["timeout_ms"]), state,
                           {(str(t), int(p)) for t, p in d.get("partitions", [])}, set(d.get("groups", [])),
                           int(d.get("start_ms", -1)), int(d.get("update_ms", -1)), int(d.get("txn_seq", 0)),
                           version)

    def copy(self) -> TxnMetadata:
        return TxnMetadata(self.txn_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           set(self.partitions), set(self.groups), self.start_ms, self.update_ms, self.txn_seq,
                           self.version)


# ---------------------------------------------------------------------- ZooKeeper (blocking: worker threads)


def read_txn(client: KazooClient, txn_id: str) -> TxnMetadata | None:
    try:
        data, stat = client.get(txn_path(txn_id))
    except NoNodeError:
        return None
    return TxnMetadata.decode(txn_id, data, stat.version)


def list_txn_ids(client: KazooClient) -> list[str]:
    try:
        return [unquote(n) for n in client.get_children(TXN_ROOT)]
    except NoNodeError:
        return []


def write_txn(client: KazooClient, meta: TxnMetadata) -> int:
    """Create (version -1) or conditionally update the znode; returns the new version. Raises kazoo's
    NodeExistsError / BadVersionError when someone else wrote it first."""
    path = txn_path(meta.txn_id)
    if meta.version < 0:
        client.ensure_path(TXN_ROOT)
        try:
            client.create(path, meta.encode())
        except NoNodeError:
            client.ensure_path(TXN_ROOT)
            client.create(path, meta.encode())
        return 0
    return client.set(path, meta.encode(), version=meta.version).version


def write_pending_offsets(client: KazooClient, meta: TxnMetadata, group: str,
                          offsets: dict[TopicPartition, tuple[int, int, str]]) -> bool:
    """Merge ``offsets`` ({(topic, p): (offset, leader epoch, metadata)}) into the transaction's pending offsets
    of ``group``, only if the transaction znode is still at ``meta.version``. False when it changed."""
    path = offsets_path(meta.txn_id, group)
    current = read_pending_offsets(client, meta.txn_id, group)
    merged: dict[TopicPartition, tuple[int, int, str]] = {}
    if current is not None and (current[0], current[1], current[2]) == (meta.producer_id, meta.producer_epoch,
                                                                          meta.txn_seq):
        merged.update(current[3])
    merged.update(offsets)
    doc = json.dumps({"producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                      "txn_seq": meta.txn_seq,
                      "offsets": sorted([t, p, o, e, m] for (t, p), (o, e, m) in merged.items())}).encode()
    try:
        client.ensure_path(offsets_path(meta.txn_id))
    except NodeExistsError:
        pass
    tx = client.transaction()
    tx.check(txn_path(meta.txn_id), meta.version)
    if current is None:
        tx.create(path, doc)
    else:
        tx.set_data(path, doc)
    results = tx.commit()
    return not any(isinstance(r, Exception) for r in results)


def read_pending_offsets(client: KazooClient, txn_id: str, group: str
                         ) -> tuple[int, int, int, dict[TopicPartition, tuple[int, int, str]]] | None:
    """(producer id, epoch, txn_seq, {(topic, p): (offset, leader epoch, metadata)}) or None."""
    try:
        data, _ = client.get(offsets_path(txn_id, group))
    except NoNodeError:
        return None
    d = json.loads(data)
    offsets = {(str(t), int(p)): (int(o), int(e), str(m or "")) for t, p, o, e, m in d.get("offsets", [])}
    return int(d["producer_id"]), int(d["producer_epoch"]), int(d.get("txn_seq", 0)), offsets


def delete_pending_offsets(client: KazooClient, txn_id: str, group: str) -> None:
    try:
        client.delete(offsets_path(txn_id, group))
    except NoNodeError:
        pass
    try:
        client.delete(offsets_path(txn_id))
    except (NoNodeError, NotEmptyError):
        pass


def settle_pending_offsets(client: KazooClient, meta: TxnMetadata, group: str, commit: bool) -> None:
    """Blocking: a committed transaction's pending offsets of ``group`` become the group's committed offsets;
    either way the pending ones go."""
    pending = read_pending_offsets(client, meta.txn_id, group)
    if pending is not None and commit and pending[:3] == (meta.producer_id, meta.producer_epoch, meta.txn_seq):
        stamp = now_ms()
        commit_offsets(client, group, {tp: CommittedOffset(o, e, m, stamp) for tp, (o, e, m) in pending[3].items()})
    delete_pending_offsets(client, meta.txn_id, group)

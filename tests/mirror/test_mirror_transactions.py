"""The mirror copies what a read_committed consumer of the live cluster sees (issue 17: the whole path reads
committed data): committed transactions' records, never an aborted one's, nothing of an open transaction
until it commits, no markers; and a restart after kill -9 resumes exactly, its tail sync walking the live log
over aborted batches by the same rule (tail_sync.walk_live)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from mirror_harness import MirrorProcess, clusters_with_topics, committed_to_end, read_log, wait_for

from ferry.mirror.status import mirror_status

pytestmark = pytest.mark.slow

TOPICS = {"orders": 2}
# a checkpoint only at the first sync: the restart must walk everything copied, aborted batches included
NO_COMMIT = ("--commit-interval", "3600", "--no-audit")


def _send(p: Producer, tag: str, n: int) -> None:
    for i in range(n):
        p.produce("orders", value=f"{tag}-{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
    p.flush(30)


def _transaction(p: Producer, tag: str, n: int, commit: bool | None) -> None:
    """One transaction of ``n`` records over both partitions; ``commit`` None leaves it open."""
    p.begin_transaction()
    _send(p, tag, n)
    if commit is True:
        p.commit_transaction(30)
    elif commit is False:
        p.abort_transaction(30)


def _read_committed(bootstrap: str, total: int, timeout: float = 60.0) -> dict[int, list[bytes]]:
    """The live partitions as a read_committed consumer sees them: ``total`` values, then 1 s of nothing more."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    out: dict[int, list[bytes]] = {p: [] for p in range(TOPICS["orders"])}
    try:
        c.assign([TopicPartition("orders", p, 0) for p in out])
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 0.3)
            for m in msgs:
                if not m.error():
                    out[m.partition()].append(m.value())
            have = sum(len(v) for v in out.values())
            if have >= total and not msgs:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() >= quiet_until:
                    break
        return out
    finally:
        c.close()


def _offline_values(offline) -> dict[int, list[bytes]]:
    return {tp[1]: [row[1] for row in rows] for tp, rows in read_log(offline.bootstrap, TOPICS).items()}


def _offline_total(live, offline) -> int:
    return sum(p.offline_end or 0 for p in mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror",
                                                          include="orders").partitions)


def test_mirror_copies_committed_data_only_and_resumes_exactly_over_aborted_batches(cluster_factory,
                                                                                    tmp_path: Path) -> None:
    live, offline = clusters_with_topics(cluster_factory, TOPICS)
    tx = Producer({"bootstrap.servers": live.bootstrap, "transactional.id": "shop-orders", "linger.ms": 5})
    plain = Producer({"bootstrap.servers": live.bootstrap, "linger.ms": 5})
    tx.init_transactions(30)
    _transaction(tx, "a", 40, commit=True)
    _send(plain, "p1", 10)
    _transaction(tx, "b", 30, commit=False)
    _transaction(tx, "c", 40, commit=True)
    _transaction(tx, "d", 20, commit=None)  # open while the first mirror runs: beyond the live LSO

    mirror = MirrorProcess(tmp_path / "mirror-1.log", live.zk_connect, offline.zk_connect, "orders",
                           *NO_COMMIT).start()
    try:
        wait_for(lambda: _offline_total(live, offline) >= 90, 90, "a, p1 and c copied")
        time.sleep(2)
        copied = _offline_values(offline)
        assert sum(len(v) for v in copied.values()) == 90, "aborted or open-transaction records were copied"
        assert not any(v.startswith((b"b-", b"d-")) for vs in copied.values() for v in vs)
        mirror.kill()  # its checkpoint is still the first sync's: the restart walks all of it

        tx.commit_transaction(30)  # d
        _send(plain, "p2", 10)
        _transaction(tx, "e", 25, commit=False)
        _transaction(tx, "f", 10, commit=True)
        mirror = MirrorProcess(tmp_path / "mirror-2.log", live.zk_connect, offline.zk_connect, "orders").start()
        wait_for(lambda: committed_to_end(mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror",
                                                        include="orders"), TOPICS), 90,
                 "the restarted mirror to reach the live end (past the last markers)")
        expected = _read_committed(live.bootstrap, 40 + 10 + 40 + 20 + 10 + 10)
        got = _offline_values(offline)
        assert sum(len(v) for v in expected.values()) == 130
        for p, values in expected.items():
            assert got[p] == values, f"orders-{p}: offline ({len(got[p])}) differs from live read_committed " \
                                     f"({len(values)}); mirror log: {mirror.log_text()[-2000:]}"
    finally:
        mirror.stop()
        tx.flush(5)

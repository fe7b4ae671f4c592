"""`ferry mirror status` shows what the mirror copies: its own filter, --exclude honoured (ZooKeeper only)."""

from __future__ import annotations

from ferry.client.group_store import write_offset
from ferry.mirror.status import mirror_status
from tests.client.group_helpers import write_topic, zk_client


def test_status_lists_what_the_mirror_copies_and_honours_exclude(zk_connect: str) -> None:
    zk = zk_client(zk_connect)
    try:
        for name, partitions in {"events": 2, "secret": 1, "_audit": 1, "__consumer_offsets": 1}.items():
            write_topic(zk, name, partitions)
        write_offset(zk, "ferry-mirror", "secret", 0, 7)  # committed before it was excluded
        write_offset(zk, "ferry-mirror", "events", 0, 3)
    finally:
        zk.stop()
        zk.close()

    def rows(include: str | None, exclude: str | None) -> list[tuple[str, int, int | None]]:
        status = mirror_status(zk_connect, None, "ferry-mirror", include, exclude)
        return [(p.topic, p.partition, p.committed) for p in status.partitions]

    assert rows(None, None) == [("events", 0, 3), ("secret", 0, 7)]
    assert rows(None, "sec.*") == [("events", 0, 3)]
    # the mirror's filter: the include pattern plus `_audit`, which it names; never `__consumer_offsets`
    assert rows(".*", "sec.*") == [("_audit", 0, None), ("events", 0, 3), ("events", 1, None)]
    assert rows(".*", "sec.*|_audit") == [("events", 0, 3), ("events", 1, None)]

"""Partition placement: round-robin over the live brokers.

Brokers are sorted by id; the first partition goes to a broker picked by a stable hash of the
topic name, so that many small topics do not all put their partition 0 on the lowest broker id.
The hash is CRC-32 rather than Python's ``hash`` (randomised per process) so every process and
every re-run places a topic's partitions the same way.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from ferry.zk.errors import NoBrokersError


def start_index(topic: str, broker_count: int) -> int:
    return zlib.crc32(topic.encode("utf-8")) % broker_count


def assign_round_robin(topic: str, broker_ids: Iterable[int], first: int, count: int) -> dict[int, tuple[int, ...]]:
    """Leaders for partitions ``first .. first+count-1`` of ``topic`` (replication factor 1)."""
    brokers = sorted(set(int(b) for b in broker_ids))
    if not brokers:
        raise NoBrokersError(f"no live brokers are registered; cannot place the partitions of topic {topic!r}")
    start = start_index(topic, len(brokers))
    return {p: (brokers[(start + p) % len(brokers)],) for p in range(first, first + count)}

"""The standalone mirror's lag in seconds and rate as `ferry mirror status` reads them from outside the mirror.

Lag in seconds means what it means for a link (copy_lag.lag_seconds): the age of the last copied message while
messages wait. A link's leader reads that message's time from its own offline log; here the group's committed
offset names it (the live record just before it), and a Fetch of that offset from the live leader gives its
batch, whose header holds the batch's largest timestamp: the last copied record's, the mirror copying whole
batches. The rate is the committed offsets' movement between two readings of the group's offset znodes, timed
by the znodes' own modification times (the commits', not this command's).
"""

from __future__ import annotations

import time

from kazoo.client import KazooClient

from ferry.client.errors import BrokerUnavailableError, ClientError
from ferry.client.wire_client import WireClient
from ferry.wire.protocol import fetch
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, read_header
from ferry.zk.zookeeper_group_offsets import fetch_zookeeper_commits

TopicPartition = tuple[str, int]
FETCH_BYTES = 64 * 1024  # the first batch comes back whole even when larger (KIP-74)


def last_copied_timestamps(client: WireClient, copied_to: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """{partition: timestamp (ms) of the live record just before ``copied_to``}, for the partitions whose live
    leader answers and still holds that record; the others are left out (their lag in seconds is unknown)."""
    by_leader: dict[int, list[tuple[TopicPartition, int]]] = {}
    for tp, offset in copied_to.items():
        if offset <= 0:
            continue
        try:
            node = client.leader(*tp)
        except (ClientError, BrokerUnavailableError, OSError):
            continue
        if node is not None:
            by_leader.setdefault(node, []).append((tp, offset - 1))
    out: dict[TopicPartition, int] = {}
    for node, wanted in by_leader.items():
        topics: dict[str, list[fetch.FetchPartition]] = {}
        for (topic, p), offset in wanted:
            topics.setdefault(topic, []).append(fetch.FetchPartition(p, offset, FETCH_BYTES))
        try:
            body = client.connection(node).request(*fetch.encode_request(
                topics.items(), max_wait_ms=0, min_bytes=0, max_bytes=FETCH_BYTES * len(wanted),
                isolation_level=fetch.READ_COMMITTED))
            answer = fetch.parse_response(body)
        except (ClientError, BrokerUnavailableError, OSError):
            client.close_connection(node)
            continue
        targets = dict(wanted)
        for topic, results in answer.topics.items():
            for res in results:
                tp = (topic, res.partition)
                if res.error_code == ErrorCode.NONE and res.records is not None and tp in targets:
                    ts = batch_timestamp(res.records, targets[tp])
                    if ts is not None:
                        out[tp] = ts
    return out


def batch_timestamp(records: memoryview | bytes, offset: int) -> int | None:
    """The largest timestamp of the batch holding ``offset`` among ``records`` (None if none holds it)."""
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(records):
        h = read_header(records, pos)
        if h.base_offset <= offset <= h.last_offset:
            return h.max_timestamp
        pos += h.size
    return None


def commit_rates(zk: KazooClient, group: str, keys: list[TopicPartition], interval_s: float
                 ) -> tuple[dict[TopicPartition, float], dict[TopicPartition, int]]:
    """(messages per second, the committed offsets at the second reading) per partition: the committed offsets
    read now and after ``interval_s``, their movement divided by the time between the two commits (the
    znodes' modification times); 0 where no commit moved meanwhile (the copy stands still)."""
    before = fetch_zookeeper_commits(zk, group, keys)
    time.sleep(interval_s)
    after = fetch_zookeeper_commits(zk, group, keys)
    rates: dict[TopicPartition, float] = {}
    for tp, (offset, mtime) in after.items():
        old = before.get(tp)
        if old is None:
            continue
        moved, dt_ms = offset - old[0], mtime - old[1]
        rates[tp] = round(moved * 1000.0 / dt_ms, 1) if moved > 0 and dt_ms > 0 else 0.0
    return rates, {tp: offset for tp, (offset, _) in after.items()}

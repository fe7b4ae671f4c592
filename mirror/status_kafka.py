"""`ferry mirror status --bootstrap-server LIVE`: the standalone mirror's rows over the Kafka protocol alone.

The group's committed offsets come from OffsetFetch v0 (Kafka 0.8.1's read of a ZooKeeper group, which the
brokers answer from the group's ZooKeeper offsets: zk/zookeeper_group_offsets.py), the live ends from ListOffsets,
the last copied records' times from a Fetch (copy_timestamps.py), all through the --command-config settings
(TLS, SASL). What only the live ZooKeeper holds is not shown: the group's members and which one owns a
partition (the paper's groups register them there, not with a coordinator): --source-zookeeper shows them.
"""

from __future__ import annotations

import time

from ferry.client.errors import BrokerUnavailableError, ClientError
from ferry.client.topic_selection import TopicFilter
from ferry.client.wire_client import WireClient
from ferry.mirror.copy_lag import lag_seconds as age_of_last_copied
from ferry.mirror.copy_timestamps import last_copied_timestamps
from ferry.mirror.mirror_maker import mirrored_include
from ferry.mirror.status import MirrorStatus, PartitionStatus
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol import offset_fetch
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.list_offsets import LATEST_TIMESTAMP

TopicPartition = tuple[str, int]


def mirror_status_over_kafka(bootstrap: str, group: str, include: str | None = None, exclude: str | None = None,
                             *, client: ClientConfig | None = None, rate_interval_s: float = 0.0) -> MirrorStatus:
    """The group's committed partitions (with ``include``: also the matching ones nobody committed yet), less
    what ``exclude`` takes out; owners and members unknown (None)."""
    config = client or ClientConfig.plaintext()
    wire = WireClient(bootstrap, "ferry-mirror-status", timeout_s=10, security=config.security())
    try:
        wire.refresh_metadata(None)
        if include is not None:
            mirrored = TopicFilter(mirrored_include(include), exclude)
            candidates = [(t, p) for t, n in wire.partition_counts.items() if mirrored.matches(t) for p in range(n)]
        else:  # whatever the group committed: every topic but the brokers' own (`__`)
            candidates = [(t, p) for t, n in wire.partition_counts.items()
                          if not t.startswith("__") and not (exclude and TopicFilter(".*", exclude).excludes(t))
                          for p in range(n)]
        first, at = _committed(wire, group, candidates), time.monotonic()
        committed, rates = first, {}
        if rate_interval_s > 0:
            time.sleep(rate_interval_s)
            committed = _committed(wire, group, candidates)
            dt = time.monotonic() - at
            rates = {tp: round(max(o - first.get(tp, o), 0) / dt, 1) for tp, o in committed.items()}
        wanted = sorted(candidates if include is not None else committed)
        ends = {tp: r.offset for tp, r in wire.list_offsets({tp: LATEST_TIMESTAMP for tp in wanted}).items()
                if r.error_code == ErrorCode.NONE and r.offset >= 0}
        behind = {tp: c for tp, c in committed.items() if ends.get(tp, 0) > c}
        copied_ts = last_copied_timestamps(wire, behind) if behind else {}
    finally:
        wire.close()
    rows = []
    for tp in wanted:
        end, done = ends.get(tp), committed.get(tp)
        lag = None if end is None else max(end - (done if done is not None else 0), 0)
        rows.append(PartitionStatus(tp[0], tp[1], end, done, lag, None, None, age_of_last_copied(lag, copied_ts.get(tp)),
                                    rates.get(tp), owners_known=False))
    return MirrorStatus(group, None, rows)


def _committed(wire: WireClient, group: str, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """OffsetFetch v0 of ``partitions`` from any broker that answers: {partition: committed offset} (-1 left out).
    A broker that refuses (authorization) is one line, raised: an empty group is not what it should look like."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    errors = []
    for node in list(wire.brokers):
        try:
            body = wire.connection(node).request(*offset_fetch.encode_zookeeper_group_request(group,
                                                                                              list(by_topic.items())))
        except (ClientError, BrokerUnavailableError, OSError) as e:
            wire.close_connection(node)
            errors.append(f"broker {node}: {e}")
            continue
        out: dict[TopicPartition, int] = {}
        for topic, rows in offset_fetch.parse_response(body, 0).items():
            for r in rows:
                if r.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                    raise ClientError(f"OffsetFetch of group {group!r}: GROUP_AUTHORIZATION_FAILED (Describe on "
                                          "the group is needed)")
                if r.error_code == ErrorCode.NONE and r.offset >= 0:
                    out[(topic, r.partition)] = r.offset
        return out
    raise BrokerUnavailableError("no broker answered OffsetFetch: " + ("; ".join(errors) or "no brokers known"))

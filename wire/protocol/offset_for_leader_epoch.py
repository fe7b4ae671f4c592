"""OffsetForLeaderEpoch (key 23), versions 0-3 (non-flexible; v4+ is flexible and not spoken).

A replica becoming follower asks the leader where its latest leader epoch ended there and truncates its
own log to that offset (KIP-101), rather than to its high watermark. The broker side parses requests and
encodes responses; the client side (a follower's fetcher) encodes requests (`encode_request`, v3 unless told)
and parses responses.

    request:  [replica_id int32 (v3+)] topics[ name, partitions[ partition, current_leader_epoch (v2+),
              leader_epoch ] ]
    response: [throttle_time_ms (v2+)] topics[ name, partitions[ error_code, partition,
              leader_epoch (v1+), end_offset ] ]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

MIN_VERSION, MAX_VERSION = 0, 3
REQUEST_VERSION = 3  # what followers send (carries the replica id)
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
DEBUGGING_REPLICA_ID = -2  # Kafka's default for requests before v3 (no replica id on the wire)


@dataclass(slots=True)
class EpochRequestPartition:
    partition: int
    leader_epoch: int  # the epoch whose end offset is asked for
    current_leader_epoch: int = -1  # the asker's idea of the current leader epoch, for fencing (v2+)


@dataclass(slots=True)
class OffsetForLeaderEpochRequest:
    topics: list[tuple[str, list[EpochRequestPartition]]]
    replica_id: int = DEBUGGING_REPLICA_ID  # on the wire from v3


@dataclass(slots=True)
class EpochEndOffset:
    partition: int
    error_code: int = 0
    leader_epoch: int = UNDEFINED_EPOCH  # on the wire from v1
    end_offset: int = UNDEFINED_EPOCH_OFFSET


def _check_version(version: int) -> None:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"OffsetForLeaderEpoch v{version} is not supported (v{MIN_VERSION}-{MAX_VERSION})")


# ---------------------------------------------------------------------- broker side


def parse_request(r: Reader, version: int) -> OffsetForLeaderEpochRequest:
    replica_id = r.int32() if version >= 3 else DEBUGGING_REPLICA_ID

    def partition(r: Reader) -> EpochRequestPartition:
        p = r.int32()
        current = r.int32() if version >= 2 else -1
        return EpochRequestPartition(p, r.int32(), current)

    return OffsetForLeaderEpochRequest(r.topic_array(partition), replica_id)


def encode_response(version: int, topics: list[tuple[str, list[EpochEndOffset]]], throttle_time_ms: int = 0
                    ) -> bytes:
    _check_version(version)

    def partition(w: Writer, p: EpochEndOffset) -> None:
        w.error_code(p.error_code).int32(p.partition)
        if version >= 1:
            w.int32(p.leader_epoch)
        w.int64(p.end_offset)

    w = Writer()
    if version >= 2:
        w.int32(throttle_time_ms)
    return bytes(w.topic_array(topics, partition).buf)


# ---------------------------------------------------------------------- client side


def encode_request(topics: Iterable[tuple[str, Sequence[EpochRequestPartition]]], replica_id: int,
                   version: int = REQUEST_VERSION) -> tuple[int, int, Buffers]:
    """OffsetForLeaderEpoch ``version`` (v3: ``replica_id`` on the wire, a follower's broker id)."""
    _check_version(version)

    def partition(w: Writer, p: EpochRequestPartition) -> None:
        w.int32(p.partition)
        if version >= 2:
            w.int32(p.current_leader_epoch)
        w.int32(p.leader_epoch)

    w = Writer().int32(replica_id) if version >= 3 else Writer()
    return ApiKey.OFFSET_FOR_LEADER_EPOCH, version, [w.topic_array(list(topics), partition).buf]


def parse_response(body: bytes | bytearray | memoryview, version: int = REQUEST_VERSION
                   ) -> dict[str, list[EpochEndOffset]]:
    """An OffsetForLeaderEpoch answer (after the correlation id): {topic: [EpochEndOffset]}."""
    def partition(r: Reader) -> EpochEndOffset:
        error_code, partition = r.int16(), r.int32()
        epoch = r.int32() if version >= 1 else UNDEFINED_EPOCH
        return EpochEndOffset(partition, error_code, epoch, r.int64())

    r = Reader(body)
    if version >= 2:
        r.int32()  # throttle
    return r.topic_map(partition)

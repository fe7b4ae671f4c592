"""DescribeLogDirs (key 35), versions 0-1 (v2+ is flexible): per log directory, the size of each partition
held there and how far it is behind (0: ferry has no future replicas being moved between directories)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> list[tuple[str, list[int]]] | None:
    """[(topic, [partition])], or None for every partition."""
    return r.nullable_array(lambda r: (r.string(), r.int32_array()))


@dataclass(slots=True)
class LogDirResult:
    error_code: int
    path: str
    topics: list[tuple[str, list[tuple[int, int, int]]]]  # [(topic, [(partition, size, offset_lag)])]


def encode_response(version: int, dirs: list[LogDirResult]) -> bytes:
    w = Writer().int32(0)  # throttle_time_ms
    w.array_len(len(dirs))
    for d in dirs:
        w.error_code(d.error_code).string(d.path).topic_array(d.topics, _replica_size)
    return bytes(w.buf)


def _replica_size(w: Writer, replica: tuple[int, int, int]) -> None:
    partition, size, offset_lag = replica
    w.int32(partition).int64(size).int64(offset_lag).boolean(False)  # is_future_key

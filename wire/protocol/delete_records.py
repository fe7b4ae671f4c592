"""DeleteRecords (key 21), versions 0-1 (v2+ is flexible): move each partition's log start offset up to the
given offset (-1: the high watermark); the answer is the new low watermark. Sent to each partition's leader."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer

HIGH_WATERMARK = -1


@dataclass(slots=True)
class DeleteRecordsRequest:
    topics: list[tuple[str, list[tuple[int, int]]]]  # [(topic, [(partition, offset)])]
    timeout_ms: int


def parse_request(r: Reader, version: int) -> DeleteRecordsRequest:
    topics = r.topic_array(lambda r: (r.int32(), r.int64()))
    return DeleteRecordsRequest(topics, r.int32())


def encode_response(version: int, topics: list[tuple[str, list[tuple[int, int, int]]]]) -> bytes:
    """``topics``: [(topic, [(partition, low_watermark, error_code)])]."""
    w = Writer().int32(0)  # throttle_time_ms
    return bytes(w.topic_array(topics, _low_watermark).buf)


def _low_watermark(w: Writer, result: tuple[int, int, int]) -> None:
    partition, low_watermark, error_code = result
    w.int32(partition).int64(low_watermark).error_code(error_code)

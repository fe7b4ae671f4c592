"""ProduceFastPath: the common Produce request (one topic, one partition, acks 1 or -1, no transaction)
read with a few `struct` calls and answered from a pre-encoded template.

The general path builds a request object, a result object per partition and encodes the answer field by
field: at 50 messages per request that was a third of the broker's CPU per message (py-spy,
bench/RESULTS.md), and the producers that matter (a client's batch for one partition, the mirror's
copies) send exactly this shape. Anything else, and any append that fails, goes to the general path,
which parses everything and answers with the precise error; a failed append wrote nothing, so running
the general path after it is safe.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable
from typing import Any

from ferry.wire.protocol import produce

log = logging.getLogger(__name__)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")
_PARTITION_SIZE = struct.Struct(">ii")
_OFFSETS = struct.Struct(">qqq")  # base offset, log append time, log start offset
_V3_4 = struct.Struct(">qq")  # base offset, log append time

FIRST_VERSION, LAST_VERSION = 3, 8


class ProduceFastPath:
    def __init__(self, replicas: Any, flusher: Any) -> None:
        self._replicas = replicas
        self._flusher = flusher
        self._names: dict[bytes, str] = {}
        self._templates: dict[tuple[int, str, int], tuple[bytes, bytes]] = {}
        self.topic_bytes: dict[str, int] = {}  # record bytes appended per topic (the broker's metrics read it)

    def handle(self, frame: bytes | bytearray, version: int) -> bytes | Awaitable[bytes] | None:
        """The answer body (or a coroutine for acks=-1), or None: use the general path."""
        end = len(frame)
        pos = 8
        if end < pos + 2:
            return None
        client_id_len = _I16.unpack_from(frame, pos)[0]
        pos += 2 + max(client_id_len, 0)
        if end < pos + 12 or _I16.unpack_from(frame, pos)[0] != -1:  # a transactional id: general path
            return None
        acks, timeout_ms, topics = _ACKS_TIMEOUT_COUNT.unpack_from(frame, pos + 2)
        pos += 12
        if topics != 1 or not (acks == 1 or acks == -1) or end < pos + 2:
            return None
        name_len = _I16.unpack_from(frame, pos)[0]
        pos += 2
        if name_len <= 0 or end < pos + name_len + 12:
            return None
        raw = bytes(frame[pos:pos + name_len])
        topic = self._names.get(raw)
        if topic is None:
            try:
                topic = raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
            if len(self._names) < 10_000:
                self._names[raw] = topic
        pos += name_len
        if _I32.unpack_from(frame, pos)[0] != 1:
            return None
        partition, size = _PARTITION_SIZE.unpack_from(frame, pos + 4)
        pos += 12
        if size <= 0 or pos + size != end:
            return None
        part, code = self._replicas.leader_partition(topic, partition)
        if code or (acks == -1 and not part.enough_replicas()):
            return None
        try:
            info = self._replicas.append(part, memoryview(frame)[pos:])
        except Exception:
            return None
        tb = self.topic_bytes
        tb[topic] = tb.get(topic, 0) + size
        body = self._answer(version, topic, partition, info.first_offset, info.log_append_time,
                            part.log.log_start_offset)
        if acks == -1:
            return self._after_ack(part, info.last_offset + 1, body, version, topic, partition, timeout_ms)
        return body

    async def _after_ack(self, part: Any, end: int, body: bytes, version: int, topic: str, partition: int,
                         timeout_ms: int) -> bytes:
        code, message = await self._replicas.acknowledge(part, end, timeout_ms, self._flusher)
        if code:
            res = produce.PartitionProduceResult(partition, code, error_message=message)
            return produce.encode_response(version, [(topic, [res])])
        return body

    def _answer(self, version: int, topic: str, partition: int, base_offset: int, append_time: int,
                log_start: int) -> bytes:
        key = (version, topic, partition)
        t = self._templates.get(key)
        if t is None:
            t = self._templates[key] = _template(version, topic, partition)
        head, tail = t
        if version >= 5:
            return head + _OFFSETS.pack(base_offset, append_time, log_start) + tail
        return head + _V3_4.pack(base_offset, append_time) + tail


def _template(version: int, topic: str, partition: int) -> tuple[bytes, bytes]:
    """The answer's bytes before and after the offsets, for one partition without error: cut out of what
    the general encoder writes, so both paths answer byte for byte alike."""
    full = produce.encode_response(version, [(topic, [produce.PartitionProduceResult(partition)])])
    at = 4 + 2 + len(topic.encode("utf-8")) + 4 + 4 + 2  # topics count, name, partitions count, index, error
    offsets = (_OFFSETS if version >= 5 else _V3_4).size
    return full[:at], full[at + offsets:]

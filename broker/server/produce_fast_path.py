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

from ferry.broker.log import log_append
from ferry.broker.server import produce_parse
from ferry.broker.server.produce_parse import FIRST_VERSION as FIRST_VERSION  # kafka_apis reads them here
from ferry.broker.server.produce_parse import LAST_VERSION as LAST_VERSION
from ferry.broker.server.produce_parse import parse
from ferry.wire.protocol import produce

log = logging.getLogger(__name__)



class ProduceFastPath:
    def __init__(self, replicas: Any, flusher: Any) -> None:
        self._replicas = replicas
        self._flusher = flusher
        # (topic name bytes, partition, version) -> (topic, struct of the framed answer, its size, fixed head, tail)
        self._routes: dict[tuple[bytes, int, int], tuple[str, struct.Struct, int, bytes, bytes]] = {}
        self.topic_bytes: dict[str, int] = {}  # record bytes appended per topic (the broker's metrics read it)
        log.info("produce fast path: native request parse %s, native batch write %s (scripts/build_native.py)",
                 "on" if produce_parse.NATIVE else "off", "on" if log_append.native_write_batch else "off")

    def handle(self, frame: bytes | bytearray, version: int) -> bytes | Awaitable[bytes] | None:
        """The answer body (or a coroutine for acks=-1), or None: use the general path."""
        out = self.handle_framed(frame)
        if out is None or type(out) is not bytes:
            return out
        return out[8:]

    def handle_framed(self, frame: bytes | bytearray) -> bytes | Awaitable[bytes] | None:
        """The whole answer as it goes on the wire (size prefix and correlation id included: one `pack`, no
        copies), or a coroutine producing the answer's body for acks=-1, or None: use the general path.
        ``frame`` is a request of any API key and version (the caller checked neither). The request is read
        and its one batch checked by produce_parse.parse (native when built); the batch is then written
        straight from ``frame`` (Log.append_batch). Records that are not one valid batch go to the log's
        general append, which refuses them with the precise error (and this path then declines)."""
        p = parse(frame)
        if p is None:
            return None
        version, correlation_id, acks, timeout_ms, raw, partition, pos, h = p
        route = self._routes.get((raw, partition, version))
        if route is None:
            route = self._route(raw, partition, version)
            if route is None:
                return None
        topic, packer, size, head, tail = route
        replicas = self._replicas
        part = replicas.partitions.get((topic, partition))
        if part is None or not part.is_leader or part.log.offline:  # leader_partition says why (or acts on a watch)
            part, code = replicas.leader_partition(topic, partition)
            if code:
                return None
        if acks == -1 and not part.enough_replicas():
            return None
        try:
            if h is not None:
                info = part.append_batch(frame, pos, h)
                if part.followers and replicas.purgatory is not None:  # as ReplicaManager.append does
                    replicas.purgatory.notify(part.log)
            else:
                info = replicas.append(part, memoryview(frame)[pos:])
        except Exception:
            return None
        tb = self.topic_bytes
        tb[topic] = tb.get(topic, 0) + len(frame) - pos
        if version >= 5:
            out = packer.pack(size, correlation_id, head, info[0], info[3], part.log.log_start_offset, tail)
        else:
            out = packer.pack(size, correlation_id, head, info[0], info[3], tail)
        if acks == -1:
            return self._after_ack(part, info[1] + 1, out[8:], version, topic, partition, timeout_ms)
        return out

    def _route(self, raw: bytes, partition: int, version: int) -> tuple[str, struct.Struct, int, bytes, bytes] | None:
        """The topic's name and the answer's template for a (topic, partition, version) first seen; None when the
        name is not UTF-8 (the general path refuses it)."""
        try:
            topic = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        packer, head, tail = _template(version, topic, partition)
        route = (topic, packer, packer.size - 4, head, tail)
        if len(self._routes) < 10_000:
            self._routes[(raw, partition, version)] = route
        return route

    async def _after_ack(self, part: Any, end: int, body: bytes, version: int, topic: str, partition: int,
                         timeout_ms: int) -> bytes:
        code, message = await self._replicas.acknowledge(part, end, timeout_ms, self._flusher)
        if code:
            res = produce.PartitionProduceResult(partition, code, error_message=message)
            return produce.encode_response(version, [(topic, [res])])
        return body


def _template(version: int, topic: str, partition: int) -> tuple[struct.Struct, bytes, bytes]:
    """The answer's bytes before and after the offsets, for one partition without error, and the struct that
    frames them with the offsets: cut out of what the general encoder writes, so both paths answer byte for
    byte alike."""
    full = produce.encode_response(version, [(topic, [produce.PartitionProduceResult(partition)])])
    at = 4 + 2 + len(topic.encode("utf-8")) + 4 + 4 + 2  # topics count, name, partitions count, index, error
    offsets = "qqq" if version >= 5 else "qq"
    head, tail = full[:at], full[at + struct.calcsize(">" + offsets):]
    return struct.Struct(f">ii{len(head)}s{offsets}{len(tail)}s"), head, tail

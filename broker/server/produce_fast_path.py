"""ProduceFastPath: the common Produce request (one topic, one partition, an answer wanted, no transaction)
read with a few `struct` calls and answered from a pre-encoded template (a part of ProduceApis, which routes
every Produce here first).

The general path builds a request object, a result object per partition and encodes the answer field by
field: at 50 messages per request that was a third of the broker's CPU per message (py-spy,
bench/RESULTS.md), and the producers that matter (a client's batch for one partition, the mirror's
copies) send exactly this shape. Anything else, and any append that fails, goes to the general path,
which parses everything and answers with the precise error; a failed append wrote nothing, so running
the general path after it is safe. What acks means and whether a partition takes the append are
produce_rules' (the general path asks the same functions); the append and the wake-up of parked fetches after
it are ReplicaManager's.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable

from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.partition import Partition
from ferry.broker.server.produce_parse import Parsed, parse
from ferry.broker.server.produce_rules import LEADER, ack_mode, produce_target
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.request_metrics import PRODUCE, count_error
from ferry.wire import native
from ferry.wire.protocol import produce

log = logging.getLogger(__name__)


class ProduceFastPath:
    """Appends and answers the common Produce shape without building request or result objects."""

    def __init__(self, replicas: ReplicaManager, flusher: LogFlusher | None) -> None:
        self._replicas = replicas
        self._flusher = flusher
        self._append_batch = replicas.append_batch  # bound once: called per request
        # (topic name bytes, partition, version) -> (topic, struct of the framed answer, its size, fixed head, tail)
        self._routes: dict[tuple[bytes, int, int], tuple[str, struct.Struct, int, bytes, bytes]] = {}
        self.topic_bytes: dict[str, int] = {}  # record bytes appended per topic (the broker's metrics read it)
        self.topic_messages: dict[str, int] = {}  # records appended per topic (a retried duplicate: none)
        self.error_codes: dict[tuple[int, int], int] = {}  # (0, error code) -> partitions answered with it
        native.log_parts(log)  # produce (the request parse) and append (the batch write) among them

    def handle(self, frame: bytes | bytearray, version: int) -> bytes | Awaitable[bytes] | None:
        """The answer body (or a coroutine for acks=-1), or None: use the general path."""
        out = self.handle_framed(frame)
        if out is None or type(out) is not bytes:
            return out
        return out[8:]

    def handle_framed(self, frame: bytes | bytearray, parsed: Parsed | None = None,
                      allowed: Callable[[str], bool] | None = None) -> bytes | Awaitable[bytes] | None:
        """The whole answer as it goes on the wire (size prefix and correlation id included: one `pack`, no
        copies), or a coroutine producing the answer's body for acks=-1, or None: use the general path.
        ``frame`` is a request of any API key and version (the caller checked neither). The request is read
        and its one batch checked by produce_parse.parse (native when built); the batch is then written
        straight from ``frame`` (Log.append_batch). Records that are not one valid batch go to the log's
        general append, which refuses them with the precise error (and this path then declines). ``parsed``:
        what produce_parse.parse gave for ``frame`` already. ``allowed``: with an authorizer, whether the sender may
        Write the topic (if not, the general path answers TOPIC_AUTHORIZATION_FAILED and logs the denial)."""
        p = parse(frame) if parsed is None else parsed
        if p is None:
            return None
        version, correlation_id, acks, timeout_ms, raw, partition, pos, h = p
        mode = ack_mode(acks)
        if mode is None or not mode.answers:  # no answer wanted, or acks invalid: the general path's business
            return None
        route = self._routes.get((raw, partition, version))
        if route is None:
            route = self._route(raw, partition, version)
            if route is None:
                return None
        topic, packer, size, head, tail = route
        if allowed is not None and not allowed(topic):
            return None
        part, code, _message = produce_target(self._replicas, topic, partition, mode, len(frame) - pos)
        if code:
            return None  # the general path answers with the error
        try:
            if h is not None:
                info = self._append_batch(part, frame, pos, h)
            else:
                info = self._replicas.append(part, memoryview(frame)[pos:])
        except Exception:
            return None
        tb = self.topic_bytes
        tb[topic] = tb.get(topic, 0) + len(frame) - pos
        if not info[2]:
            tm = self.topic_messages
            tm[topic] = tm.get(topic, 0) + info[1] - info[0] + 1
        if version >= 5:
            out = packer.pack(size, correlation_id, head, info[0], info[3], part.log.log_start_offset, tail)
        else:
            out = packer.pack(size, correlation_id, head, info[0], info[3], tail)
        if mode.waits_for_isr:
            return self._after_ack(part, info[1] + 1, out[8:], version, topic, partition, timeout_ms)
        return out

    def handle_run(self, frames: list, allowed: Callable[[str], bool] | None = None) -> list:
        """handle_framed of consecutive requests of one connection, in order, for as long as none is declined:
        the answers of the first of ``frames`` (the caller sends the next one, if any, to the general path).
        Requests in a row for one partition, each one batch with acks=1 and no producer id, are appended with
        one write (Log.append_batches): a pipelining producer's burst costs one pwritev. ``allowed``: as
        handle_framed's."""
        out: list = []
        i, n, single_until = 0, len(frames), 0
        while i < n:
            p = parse(frames[i])
            if i >= single_until and _groupable(p):
                j, part, group = self._group(frames, i, p, allowed)
                if j - i >= 2:
                    if self._append_group(part, group, out):
                        i = j
                        continue
                    single_until = j  # they go one by one (a roll, a limit, a failure: append_batch decides)
            r = self.handle_framed(frames[i], p, allowed)
            if r is None:
                return out
            out.append(r)
            i += 1
        return out

    def _group(self, frames: list, i: int, p: Parsed, allowed: Callable[[str], bool] | None = None
               ) -> tuple[int, Partition | None, list]:
        """How far from ``i`` the requests go to one led partition with one batch, acks=1, no producer id: (the
        end, the partition, [(frame, parsed, route)]). The first request's partition is accepted by
        produce_target; the others only need to go to that same partition (nothing changed it meanwhile)."""
        group: list = []
        part = None
        n = len(frames)
        partitions = self._replicas.partitions
        while True:
            route = self._routes.get((p[4], p[5], p[0])) or self._route(p[4], p[5], p[0])
            if route is None:
                break
            if part is None:
                if allowed is not None and not allowed(route[0]):
                    break  # one partition: the others of the group are of the same topic
                part, code, _message = produce_target(self._replicas, route[0], p[5], LEADER, len(frames[i]) - p[6])
                if code:
                    break
            elif partitions.get((route[0], p[5])) is not part:
                break
            group.append((frames[i], p, route))
            i += 1
            if i >= n or len(group) >= 256:
                break
            p = parse(frames[i])
            if not _groupable(p):
                break
        return i if len(group) >= 2 else i - len(group), part, group

    def _append_group(self, part: Partition, group: list, out: list) -> bool:
        """Append a group with one write and add its answers to ``out``; False when nothing was done."""
        try:
            infos = self._replicas.append_batches(part, [(frame, p[6], p[7]) for frame, p, _ in group])
        except Exception:
            return False  # nothing written: one by one, the first meets the failure (and the general path says it)
        if infos is None:
            return False
        tb, tm = self.topic_bytes, self.topic_messages
        log_start = part.log.log_start_offset
        for (frame, p, (topic, packer, size, head, tail)), info in zip(group, infos, strict=True):
            tb[topic] = tb.get(topic, 0) + len(frame) - p[6]
            tm[topic] = tm.get(topic, 0) + info[1] - info[0] + 1  # no producer id here: never a duplicate
            if p[0] >= 5:
                out.append(packer.pack(size, p[1], head, info[0], -1, log_start, tail))
            else:
                out.append(packer.pack(size, p[1], head, info[0], -1, tail))
        return True

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

    async def _after_ack(self, part: Partition, end: int, body: bytes, version: int, topic: str, partition: int,
                         timeout_ms: int) -> bytes:
        code, message = await self._replicas.acknowledge(part, end, timeout_ms, self._flusher)
        if code:
            count_error(self.error_codes, PRODUCE, code)
            res = produce.PartitionProduceResult(partition, code, error_message=message)
            return produce.encode_response(version, [(topic, [res])])
        return body


def _groupable(p: Parsed | None) -> bool:
    """A parsed request Log.append_batches may take with others: acks=1 (answered at once), one valid batch, no
    producer id."""
    return p is not None and p[7] is not None and ack_mode(p[2]) is LEADER and p[7].producer_id < 0


def _template(version: int, topic: str, partition: int) -> tuple[struct.Struct, bytes, bytes]:
    """The answer's bytes before and after the offsets, for one partition without error, and the struct that
    frames them with the offsets: cut out of what the general encoder writes, so both paths answer byte for
    byte alike."""
    full = produce.encode_response(version, [(topic, [produce.PartitionProduceResult(partition)])])
    at = 4 + 2 + len(topic.encode("utf-8")) + 4 + 4 + 2  # topics count, name, partitions count, index, error
    offsets = "qqq" if version >= 5 else "qq"
    head, tail = full[:at], full[at + struct.calcsize(">" + offsets):]
    return struct.Struct(f">ii{len(head)}s{offsets}{len(tail)}s"), head, tail

"""A lean pipelined Fetch client for one partition: the consumer-side twin of lean_producer.py.

The paper's consumer pulls ~200 KB message sets and iterates them; this does that and nothing else.
Per fetch: one `sendall` of a request template packed with the correlation id and the offset, the
answer read in bulk (`recv_into` one large buffer). Fetch v4 (RecordBatch v2, no sessions).

Pipelining: when an answer arrives, the next fetch offset comes from the batch headers alone (last whole
batch's baseOffset + lastOffsetDelta + 1, a struct walk over the 61-byte headers) and the next fetch is
sent *before* the records of the current answer are parsed, so the broker serves fetch k+1 while the
client parses answer k. Fetches are for consecutive offsets, so at most one is in flight (plus the one
being parsed). The broker answers whole batches only (Log.read), but a partial last batch (as a real
Kafka broker may send when max_bytes cuts one) is tolerated: it is left for the next fetch.

Records are parsed by aiokafka's Cython RecordBatch v2 reader (`aiokafka.record._crecords`); every
record's value is materialised as `bytes` and its length summed. CRCs are not verified by default (as
librdkafka's `check.crcs=false` in the confluent-kafka consumer row).
"""

from __future__ import annotations

import operator
import socket
import struct
import time

import window
from common import MESSAGE_SIZE, rate

FETCH, VERSION = 1, 4
_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_FRAME = struct.Struct(">ii")  # size, correlation_id
# after the topic name: partitions count, partition, error_code, high_watermark, last_stable_offset,
# aborted_transactions count
_PART = struct.Struct(">iihqqi")
_BATCH = struct.Struct(">qi")  # baseOffset, batchLength (counts the bytes after itself)
_LAST_DELTA = struct.Struct(">i")  # at +23: after epoch (4), magic (1), crc (4), attributes (2)
_OFFSET_BATCH_HEAD = 12
_LAST_DELTA_AT = 23
_BATCH_MIN = 61

_value = operator.attrgetter("value")


class FetchError(RuntimeError):
    """The broker answered the partition with an error code, or an answer did not make sense."""


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def walk_batches(records: bytes) -> tuple[int, int, int, int]:
    """(whole batches, bytes they span, base offset of the first, next offset after the last) of a
    RecordBatch v2 byte string, from the headers only. A trailing partial batch is not counted."""
    pos = 0
    end = len(records)
    batches = 0
    first = next_offset = -1
    unpack_b, unpack_d = _BATCH.unpack_from, _LAST_DELTA.unpack_from
    while end - pos >= _BATCH_MIN:
        base, length = unpack_b(records, pos)
        stop = pos + _OFFSET_BATCH_HEAD + length
        if stop > end:
            break
        if length < _BATCH_MIN - _OFFSET_BATCH_HEAD:
            raise FetchError(f"batch at byte {pos} has an impossible length {length}")
        if first < 0:
            first = base
        next_offset = base + unpack_d(records, pos + _LAST_DELTA_AT)[0] + 1
        batches += 1
        pos = stop
    return batches, pos, first, next_offset


class LeanConsumer:
    """One connection to the partition's leader; `fetch(offset)` sends, `answer()` reads the next answer."""

    def __init__(self, host: str, port: int, topic: str, partition: int, max_bytes: int = 204_800,
                 max_wait_ms: int = 100, client_id: str = "bench-lean-consumer", timeout_s: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.topic = topic.encode()
        self.partition = partition
        self.max_bytes = max_bytes
        # replica_id -1, max_wait, min_bytes 1, response max_bytes, isolation 0 (read uncommitted),
        # one topic with one partition; the fetch offset and the partition's max_bytes follow
        self._before_offset = (_string(client_id) + struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0)
                               + _I32.pack(1) + _string(topic) + _I32.pack(1) + _I32.pack(partition))
        self._after_offset = _I32.pack(max_bytes)
        self.corr = 0
        self.expected = 0
        # an answer can exceed max_bytes (a first batch larger than it is sent whole): grown on demand
        self._buf = bytearray(max(4 << 20, 4 * max_bytes))
        self._view = memoryview(self._buf)
        self._len = 0
        self._topic_at = 4 + 4 + 4  # correlation id, throttle_time_ms, topics count

    @property
    def in_flight(self) -> int:
        return self.corr - self.expected

    def fetch(self, offset: int) -> None:
        body = self._before_offset + struct.pack(">q", offset) + self._after_offset
        self.sock.sendall(_HEAD.pack(8 + len(body), FETCH, VERSION, self.corr) + body)
        self.corr += 1

    def _fill(self, need: int, deadline: float) -> None:
        """Receive until the buffer holds at least `need` bytes."""
        if need > len(self._buf):
            grown = bytearray(need)
            grown[: self._len] = self._view[: self._len]
            self._buf, self._view = grown, memoryview(grown)
        while self._len < need:
            if time.monotonic() > deadline:
                raise TimeoutError("no complete fetch answer before the deadline")
            k = self.sock.recv_into(self._view[self._len:])
            if k == 0:
                raise ConnectionError("broker closed the connection")
            self._len += k

    def answer(self, deadline: float) -> tuple[int, bytes]:
        """(high watermark, record bytes) of the next answer; FetchError on any partition error."""
        self._fill(4, deadline)
        size = _I32.unpack_from(self._buf, 0)[0]
        self._fill(4 + size, deadline)
        buf = self._buf
        corr = _I32.unpack_from(buf, 4)[0]
        if corr != self.expected:
            raise FetchError(f"answer {corr} out of order (expected {self.expected})")
        self.expected += 1
        pos = 4 + self._topic_at
        if _I32.unpack_from(buf, pos - 4)[0] != 1:
            raise FetchError("answer without exactly one topic")
        n = _I16.unpack_from(buf, pos)[0]
        if bytes(buf[pos + 2: pos + 2 + n]) != self.topic:
            raise FetchError("answer for another topic")
        pos += 2 + n
        count, partition, error, hw, _lso, aborted = _PART.unpack_from(buf, pos)
        if count != 1 or partition != self.partition:
            raise FetchError(f"answer for partition {partition} ({count} partitions)")
        if error:
            raise FetchError(f"partition {partition} answered with error code {error}")
        pos += _PART.size + max(aborted, 0) * 16
        rsize = _I32.unpack_from(buf, pos)[0]
        pos += 4
        if rsize < 0:
            rsize = 0
        if pos + rsize != 4 + size:
            raise FetchError(f"answer framing: records end at {pos + rsize}, frame at {4 + size}")
        records = bytes(self._view[pos: pos + rsize])  # aiokafka's reader takes bytes only
        rest = self._len - (4 + size)
        if rest:
            self._view[:rest] = self._view[4 + size: self._len]
        self._len = rest
        return hw, records

    def close(self) -> None:
        self.sock.close()


def _parser(check_crcs: bool):
    try:
        from aiokafka.record._crecords.memory_records import MemoryRecords
    except ImportError as e:  # the pure-Python reader costs ~2.5 µs/record: not worth measuring
        raise RuntimeError("aiokafka's C record reader is missing (pip install aiokafka==0.14.0)") from e

    def parse(records: bytes, from_offset: int) -> tuple[int, int]:
        """(records, value bytes) of every whole batch; records below `from_offset` are skipped."""
        mr = MemoryRecords(records)
        n = nbytes = 0
        while (batch := mr.next_batch()) is not None:
            if check_crcs and not batch.validate_crc():
                raise FetchError(f"CRC mismatch in the batch at offset {batch.base_offset}")
            recs = list(batch)
            if batch.base_offset < from_offset:  # a fetch from the middle of a batch gets all of it
                recs = [r for r in recs if r.offset >= from_offset]
            n += len(recs)
            nbytes += sum(map(len, map(_value, recs)))
        return n, nbytes

    return parse


def consume(bootstrap: str, topic: str, partition: int, messages: int, time_limit_s: float,
            max_bytes: int = 204_800, check_crcs: bool = False) -> dict:
    """Read `messages` from the partition's log start; count them and their value bytes."""
    from ferry_client import leader_address, watermarks

    parse = _parser(check_crcs)
    start = watermarks(bootstrap, topic)[0]
    end = start + messages
    host, port = leader_address(bootstrap, topic, partition)
    c = LeanConsumer(host, port, topic, partition, max_bytes)
    errors: list[str] = []
    got = nbytes = fetches = batches = 0
    t0 = None
    seconds = 0.0
    try:
        deadline = time.monotonic() + time_limit_s
        offset = start  # next offset to fetch
        c.fetch(offset)
        while got < messages:
            _hw, records = c.answer(deadline)
            fetches += 1
            k, whole, first, nxt = walk_batches(records)
            parse_from = offset
            if k:
                if nxt <= offset:
                    raise FetchError(f"fetch at {offset} answered with batches ending at {nxt}")
                offset = nxt
            elif records:
                raise FetchError(f"fetch at {offset}: {len(records)} bytes without one whole batch "
                                 f"(max_bytes {max_bytes} smaller than a batch?)")
            if offset < end:
                c.fetch(offset)  # before parsing: the broker serves it meanwhile
            if not k:
                if time.monotonic() > deadline:
                    errors.append(f"time limit {time_limit_s}s reached at offset {offset}")
                    break
                continue
            if t0 is None:  # the first records mark the start: setup and metadata are not consumption
                window.begin()
                t0 = time.perf_counter()
            batches += k
            n, b = parse(records if whole == len(records) else records[:whole], parse_from)
            got += n
            nbytes += b
            if time.monotonic() > deadline:
                errors.append(f"time limit {time_limit_s}s reached at offset {offset}")
                break
        seconds = time.perf_counter() - t0 if t0 else 0.0
        window.end()
        if got != offset - start and not errors:
            errors.append(f"parsed {got} records but the batch headers span {offset - start} offsets")
    except (FetchError, OSError) as e:
        errors.append(f"{type(e).__name__}: {e}")
    finally:
        c.close()
    return {"messages": got, "seconds": seconds, "msgs_per_s": rate(got, seconds), "bytes": nbytes,
            "fetches": fetches, "batches": batches,
            "ok": got == messages and nbytes == messages * MESSAGE_SIZE and not errors, "errors": errors[:5],
            "client": "message sets: lean pipelined Fetch v4 client (bench) + aiokafka's C RecordBatch reader",
            "settings": f"from the log start, max_bytes={max_bytes} per fetch, next fetch sent before parsing, "
                        f"CRCs {'checked' if check_crcs else 'not checked (as check.crcs=false)'}"}


def census(bootstrap: str, topic: str, partition: int, time_limit_s: float = 60.0,
           max_bytes: int = 4 << 20) -> dict:
    """How the partition's log is batched, from the batch headers only: batches, records, codecs.

    Storage overhead per message depends on records per batch (61 header bytes per batch), so the
    storage rows report what the producer really wrote, not what it was asked for.
    """
    from ferry_client import leader_address, watermarks

    start, hw = watermarks(bootstrap, topic)
    host, port = leader_address(bootstrap, topic, partition)
    c = LeanConsumer(host, port, topic, partition, max_bytes, max_wait_ms=0)
    batches = nbytes = 0
    codecs: dict[int, int] = {}
    offset = start
    try:
        deadline = time.monotonic() + time_limit_s
        while offset < hw:
            c.fetch(offset)
            _, records = c.answer(deadline)
            k, whole, _first, nxt = walk_batches(records)
            if not k:
                break
            pos = 0
            while pos < whole:  # attributes (codec in the low 3 bits) at +21
                length = _I32.unpack_from(records, pos + 8)[0]
                codec = records[pos + 22] & 7
                codecs[codec] = codecs.get(codec, 0) + 1
                pos += _OFFSET_BATCH_HEAD + length
            batches += k
            nbytes += whole
            offset = nxt
    finally:
        c.close()
    names = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    records = offset - start
    return {"ok": True, "messages": records, "batches": batches, "records": records, "log_bytes": nbytes,
            "records_per_batch": round(records / batches, 1) if batches else None,
            "log_bytes_per_record": round(nbytes / records, 2) if records else None,
            "codecs": {names.get(k, str(k)): v for k, v in codecs.items()}}

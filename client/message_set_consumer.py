"""MessageSetConsumer: the paper's low-level consumer, pulling message sets of one partition by offset.

The paper's consumer asks a broker for the bytes after an offset (~hundreds of KB), iterates the messages
of that set and computes the next offset itself; the broker keeps no consumer state. This does that with
Fetch v4 over one lean socket to the partition's leader (found from Metadata through `WireClient`).

Pipelining: when an answer arrives, the next fetch offset comes from the batch headers alone (last whole
batch's baseOffset + lastOffsetDelta + 1) and the next fetch is sent *before* the set is handed to the
caller, so the broker serves fetch k+1 while the caller parses set k. One fetch is in flight at a time, on
one `BrokerConnection` whose read buffer the answer is parsed in (a pre-encoded request, no per-fetch
request or response objects).
CRC-32C of every batch is checked on arrival (``check_crcs=False`` skips it, like librdkafka's
check.crcs=false). A partial last batch (a Kafka broker may cut one at max_bytes) is left for the next
fetch; a first batch larger than max_bytes makes the consumer double its fetch size (up to
``max_fetch_bytes``). Records are decoded by aiokafka's C RecordBatch reader, which also decompresses
gzip/snappy/lz4/zstd batches.
"""

from __future__ import annotations

import operator
import struct
import time
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from ferry.client.errors import (  # noqa: F401 - FetchError and the others are this module's public errors
    BrokerUnavailableError,
    ClientError,
    CorruptMessageSetError,
    FetchError,
    KafkaResponseError,
    OffsetOutOfRangeError,
)
from ferry.client.leader_lookup import connect_cluster, partition_leader
from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.record.read_committed import ReadCommitted
from ferry.wire.record.record_batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    CRC_POS,
    CURRENT_MAGIC,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    MIN_BATCH_LENGTH,
    SIZE_PREFIX_STRUCT,
    read_header,
)

FETCH, FETCH_VERSION = int(ApiKey.FETCH), 4  # v4: the smallest answer that has what this needs
_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
# after the topic name: partitions count, partition, error_code, high_watermark, last_stable_offset,
# aborted_transactions count
_PART = struct.Struct(">iihqqi")
_ABORTED = struct.Struct(">qq")  # an aborted transaction: producer id, first offset
_LAST_DELTA = struct.Struct(">i")
_CRC = struct.Struct(">I")
_TOPIC_AT = 4 + 4  # in the answer's body: throttle_time_ms, topics count

_value = operator.attrgetter("value")
_fields = operator.attrgetter("offset", "timestamp", "key", "value")


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def walk_batches(data: bytes, check_crcs: bool) -> tuple[int, int, int]:
    """(whole batches, bytes they span, next offset after the last) of RecordBatch v2 bytes, from the
    headers (and CRCs) only; a trailing partial batch is not counted."""
    pos = 0
    end = len(data)
    batches = 0
    next_offset = -1
    unpack_b, unpack_d = SIZE_PREFIX_STRUCT.unpack_from, _LAST_DELTA.unpack_from
    while end - pos >= BATCH_HEADER_SIZE:
        base, length = unpack_b(data, pos)
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            break
        if length < MIN_BATCH_LENGTH or data[pos + MAGIC_POS] != CURRENT_MAGIC:
            raise CorruptMessageSetError(f"batch at offset {base}: not a RecordBatch v2 (length {length}, "
                                         f"magic {data[pos + MAGIC_POS]})")
        if check_crcs and crc32c.crc32c(data[pos + ATTRIBUTES_POS: stop]) != _CRC.unpack_from(data, pos + CRC_POS)[0]:
            raise CorruptMessageSetError(f"CRC-32C mismatch in the batch at offset {base}")
        next_offset = base + unpack_d(data, pos + LAST_OFFSET_DELTA_POS)[0] + 1
        batches += 1
        pos = stop
    return batches, pos, next_offset


def _reader():
    try:
        from aiokafka.record._crecords.memory_records import MemoryRecords
    except ImportError:  # the pure-Python reader: correct, ~5x slower
        from aiokafka.record.memory_records import MemoryRecords
    return MemoryRecords


class MessageSet:
    """The whole batches of one fetch answer; records from ``offset`` (the fetch offset) on.

    ``data`` is the raw RecordBatch v2 bytes (possibly starting before ``offset``: a fetch from the middle
    of a batch gets all of it). ``next_offset`` is where the next fetch starts.
    """

    __slots__ = ("offset", "next_offset", "high_watermark", "data", "batches")

    def __init__(self, offset: int, next_offset: int, high_watermark: int, data: bytes, batches: int) -> None:
        self.offset, self.next_offset, self.high_watermark = offset, next_offset, high_watermark
        self.data, self.batches = data, batches

    def __repr__(self) -> str:
        return (f"MessageSet(offset={self.offset}, next_offset={self.next_offset}, batches={self.batches}, "
                f"{len(self.data)} bytes)")

    def _batches(self):
        mr = _MemoryRecords(self.data)
        while (batch := mr.next_batch()) is not None:
            if not batch.is_control_batch:
                yield batch

    def values(self) -> list[bytes | None]:
        """Every record's value, in offset order (the fast path: no per-record tuple)."""
        out: list = []
        start = self.offset
        for batch in self._batches():
            if batch.base_offset >= start:
                out += map(_value, batch)
            else:
                out += [r.value for r in batch if r.offset >= start]
        return out

    def records(self) -> list[Record]:
        """Every record as Record(offset, timestamp, key, value), in offset order."""
        out: list[Record] = []
        start = self.offset
        make = Record._make
        for batch in self._batches():
            recs = map(make, map(_fields, batch))
            out += recs if batch.base_offset >= start else [r for r in recs if r.offset >= start]
        return out

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())


_MemoryRecords = _reader()
_full_fields = operator.attrgetter("offset", "timestamp", "key", "value", "headers")


def record_batches(data: bytes) -> Iterator[tuple[int, int, list[tuple]]]:
    """(base offset, last offset, records) of each data batch in ``data`` (whole RecordBatch v2 bytes, any
    codec); a record is ``(offset, timestamp_ms, key, value, headers)``, the timestamp the broker's for a
    LogAppendTime batch. One C-level pass per batch: what a bulk reader (the warehouse load) wants."""
    mr = _MemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        if not batch.is_control_batch:
            yield batch.base_offset, batch.next_offset - 1, list(map(_full_fields, batch))


def _without_aborted(data: bytes, aborted: list[tuple[int, int]]) -> tuple[bytes, int]:
    """``data`` (whole batches) without the batches of aborted transactions and the markers (read_committed,
    wire/record/read_committed.py); returns (bytes, batches kept)."""
    rule = ReadCommitted(aborted)
    mv = memoryview(data)
    parts, pos = [], 0
    while pos < len(mv):
        h = read_header(mv, pos)
        if not rule.drops(h, mv, pos):
            parts.append(mv[pos:pos + h.size])
        pos += h.size
    return b"".join(parts), len(parts)


class MessageSetConsumer:
    """Iterates one partition from ``offset`` (an int, "earliest" or "latest").

    ``message_sets()`` yields MessageSet per fetch answer; iterating the consumer yields Records.
    ``stop_at_end``: stop once the position reaches the high watermark of the latest answer;
    ``idle_timeout_s``: stop after that long without new records. Otherwise iteration long-polls forever.
    ``position`` is the next offset after the last set handed out. ``metadata_wait_s``: how long a topic or
    partition the brokers do not know yet (just created), or one without a leader, is looked up again.
    ``read_committed``: fetch up to the last stable offset only and leave aborted transactions' batches out of
    the sets (Kafka's isolation.level).
    """

    def __init__(self, bootstrap: str | None, topic: str, partition: int = 0, offset: int | str = "earliest",
                 max_bytes: int = 204_800, *, zookeeper: str | None = None, max_wait_ms: int = 100,
                 check_crcs: bool = True, stop_at_end: bool = False, idle_timeout_s: float | None = None,
                 max_fetch_bytes: int = 64 << 20, timeout_s: float = 30.0,
                 client_id: str = "ferry-message-set-consumer", metadata_wait_s: float = 5.0,
                 read_committed: bool = False, client_config: ClientConfig | None = None) -> None:
        if max_bytes < BATCH_HEADER_SIZE:
            raise ValueError(f"max_bytes must be at least {BATCH_HEADER_SIZE}")
        self.topic, self.partition = topic, partition
        self.max_bytes, self.max_fetch_bytes = max_bytes, max(max_fetch_bytes, max_bytes)
        self.max_wait_ms, self.check_crcs = max_wait_ms, check_crcs
        self.stop_at_end, self.idle_timeout_s, self.timeout_s = stop_at_end, idle_timeout_s, timeout_s
        self.client_id = client_id
        self.read_committed = read_committed
        self.high_watermark = -1
        self.cluster = connect_cluster(bootstrap, zookeeper, client_id, timeout_s, client_config)
        try:
            self.node, host, port = partition_leader(self.cluster, topic, partition, metadata_wait_s)
            self.position = self._resolve(offset)
            # an answer can exceed max_bytes (a first batch larger than it is sent whole): the read buffer
            # grows on demand
            self.conn = BrokerConnection(self.node, host, port, client_id, timeout_s, timeout_s,
                                         receive_buffer_bytes=4 << 20, read_buffer_bytes=max(4 << 20, 4 * max_bytes),
                                         security=self.cluster.security)
            self.conn.connect()
        except BaseException:
            self.cluster.close()
            raise
        self._topic = topic.encode()
        self._template(max_bytes)
        self._fetch_at: int | None = None  # offset of the fetch in flight

    def _template(self, max_bytes: int) -> None:
        # replica_id -1, max_wait, min_bytes 1, response max_bytes, isolation (0 read uncommitted, 1 read
        # committed), one topic with one partition; the fetch offset and the partition's max_bytes follow
        self._before_offset = (_I16.pack(len(self.client_id.encode())) + self.client_id.encode()
                               + struct.pack(">iiiib", -1, self.max_wait_ms, 1, max_bytes, int(self.read_committed))
                               + _I32.pack(1) + _I16.pack(len(self._topic)) + self._topic + _I32.pack(1)
                               + _I32.pack(self.partition))
        self._after_offset = _I32.pack(max_bytes)

    def _watermarks(self) -> tuple[int | None, int | None]:
        """(log start, log end) by ListOffsets; None where the broker would not say."""
        res = self.cluster.list_offsets({(self.topic, self.partition): -2})[(self.topic, self.partition)]
        start = res.offset if res.error_code == 0 else None
        res = self.cluster.list_offsets({(self.topic, self.partition): -1})[(self.topic, self.partition)]
        return start, (res.offset if res.error_code == 0 else None)

    def _resolve(self, offset: int | str) -> int:
        if isinstance(offset, int) and not isinstance(offset, bool):
            if offset < 0:
                raise ValueError(f"offset must be >= 0, 'earliest' or 'latest', not {offset}")
            return offset
        if offset not in ("earliest", "latest"):
            raise ValueError(f"offset must be an int, 'earliest' or 'latest', not {offset!r}")
        start, end = self._watermarks()
        value = start if offset == "earliest" else end
        if value is None:
            raise BrokerUnavailableError(f"{self.topic}[{self.partition}]: ListOffsets {offset} failed")
        return value

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> MessageSetConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()
        self.cluster.close()

    # ------------------------------------------------------------------ the wire
    def _fetch(self, offset: int) -> None:
        conn = self.conn
        if not conn.connected:  # closed, or failed: never reconnects behind the caller's back
            raise ClientError("the consumer is closed")
        body = self._before_offset + _I64.pack(offset) + self._after_offset
        try:
            conn.send_frame([_HEAD.pack(8 + len(body), FETCH, FETCH_VERSION, conn.correlation_id) + body])
        except BrokerUnavailableError as e:
            raise self._fail(e) from None
        self._fetch_at = offset

    def _fail(self, err: BrokerUnavailableError | str) -> BrokerUnavailableError:
        """The error naming the partition (a str: a bad answer, the connection is closed first)."""
        if isinstance(err, str):
            err = self.conn.fail(err)
        return BrokerUnavailableError(f"{self.topic}[{self.partition}]: {err}")

    def _answer(self) -> tuple[int, bytes, list[tuple[int, int]]]:
        """(end, record bytes, aborted transactions) of the answer to the fetch in flight: the end is the high
        watermark, or read_committed the last stable offset; aborted: (producer id, first offset)."""
        try:
            _, body = self.conn.next_answer()
        except BrokerUnavailableError as e:
            raise self._fail(e) from None
        size = len(body)
        if size < _TOPIC_AT + 2:
            raise self._fail(f"bad answer size {size + 4}")
        pos = _TOPIC_AT
        n = _I16.unpack_from(body, pos)[0]
        if _I32.unpack_from(body, pos - 4)[0] != 1 or bytes(body[pos + 2: pos + 2 + n]) != self._topic:
            raise self._fail("answer for another topic")
        pos += 2 + n
        count, partition, error, hw, lso, aborted = _PART.unpack_from(body, pos)
        if count != 1 or partition != self.partition:
            raise self._fail(f"answer for partition {partition} ({count} partitions)")
        pos += _PART.size
        transactions = [_ABORTED.unpack_from(body, pos + 16 * i) for i in range(max(aborted, 0))]
        pos += max(aborted, 0) * 16
        rsize = max(_I32.unpack_from(body, pos)[0], 0)
        pos += 4
        if pos + rsize != size:
            raise self._fail(f"answer framing: records end at {pos + rsize}, answer at {size}")
        records = bytes(body[pos: pos + rsize]) if rsize else b""  # aiokafka's reader takes bytes
        if error:
            self._error(error)
        return (lso if self.read_committed and lso >= 0 else hw), records, transactions

    def _error(self, code: int) -> None:
        offset, self._fetch_at = self._fetch_at, None
        where = f"fetch {self.topic}[{self.partition}] at offset {offset}"
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            try:
                start, end = self._watermarks()
            except ClientError:
                start = end = None
            raise OffsetOutOfRangeError(f"{where}: the log holds offsets {start}..{end} (exclusive)", start, end)
        raise FetchError(code, where)

    # ------------------------------------------------------------------ iteration
    def message_sets(self) -> Iterator[MessageSet]:
        """Message sets from ``position`` on; the next fetch is in flight while the caller holds a set."""
        idle_since = time.monotonic()
        while True:  # ends by return/raise: stop_at_end, idle timeout, an error, or the caller stops
            if self._fetch_at is None:
                self._fetch(self.position)
            offset = self._fetch_at
            assert offset is not None
            hw, data, aborted = self._answer()
            self._fetch_at = None
            self.high_watermark = hw
            batches, whole, nxt = walk_batches(data, self.check_crcs) if data else (0, 0, -1)
            kept = batches
            if batches and aborted:  # read_committed: leave out what aborted transactions wrote
                data, kept = _without_aborted(data[:whole], aborted)
                whole = len(data)
            if batches:
                if nxt <= offset:
                    raise CorruptMessageSetError(f"fetch at {offset} answered with batches ending at {nxt}")
            elif data:  # the first batch is larger than max_bytes: ask for more
                if self.max_bytes >= self.max_fetch_bytes:
                    raise FetchError(ErrorCode.MESSAGE_TOO_LARGE,
                                     f"fetch {self.topic}[{self.partition}] at {offset}: a batch is larger "
                                     f"than max_fetch_bytes ({self.max_fetch_bytes})")
                self.max_bytes = min(2 * self.max_bytes, self.max_fetch_bytes)
                self._template(self.max_bytes)
                nxt = offset
            else:
                nxt = offset
            at_end = nxt >= hw
            if not (self.stop_at_end and at_end):
                self._fetch(nxt)  # before handing out this set: the broker serves it meanwhile
            self.position = nxt
            if batches:
                idle_since = time.monotonic()
                if kept:
                    yield MessageSet(offset, nxt, hw, data if whole == len(data) else data[:whole], kept)
            elif self.idle_timeout_s is not None and time.monotonic() - idle_since > self.idle_timeout_s:
                return
            if self.stop_at_end and at_end:
                return

    def __iter__(self) -> Iterator[Record]:
        for s in self.message_sets():
            yield from s.records()

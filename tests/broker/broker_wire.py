"""A deliberately dumb Kafka wire client for broker tests: raw sockets, hand-encoded requests, so that a test
can send exactly the bytes it means (including broken ones) and read exactly what comes back.

Record batches are built with kafka-python's own builder, an independent implementation of RecordBatch v2.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from ferry.wire.protocol.primitives import Reader, Writer

PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = (
    0, 1, 2, 3, 10, 18, 19, 22)


def build_batch(values: list[bytes], compression: int = 0, base_timestamp: int | None = None,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytearray:
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=base_sequence, batch_size=1 << 30)
    for i, v in enumerate(values):
        b.append(i, timestamp=ts + i, key=None, value=v, headers=[])
    return b.build()


def decode_values(records: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a record set; validates each batch's CRC."""
    out = []
    mr = MemoryRecords(bytes(records))
    while mr.has_next():
        batch = mr.next_batch()
        if batch is None:
            break
        assert batch.validate_crc(), "CRC mismatch in fetched batch"
        out.extend((r.offset, r.value) for r in batch)
    return out


class WireClient:
    def __init__(self, address: str, client_id: str = "wire-test", timeout: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self, api_key: int, version: int, body: bytes, correlation_id: int | None = None) -> bytes:
        if correlation_id is None:
            self._corr += 1
            correlation_id = self._corr
        header = Writer().int16(api_key).int16(version).int32(correlation_id).string(self.client_id).buf
        payload = bytes(header) + body
        return struct.pack(">i", len(payload)) + payload

    def send(self, api_key: int, version: int, body: bytes, correlation_id: int | None = None) -> int:
        data = self.frame(api_key, version, body, correlation_id)
        self.sock.sendall(data)
        return struct.unpack_from(">i", data, 8)[0]

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            c = self.sock.recv(n)
            if not c:
                return None
            chunks.append(c)
            n -= len(c)
        return b"".join(chunks)

    def recv(self) -> tuple[int, Reader] | None:
        """(correlation id, reader over the body) or None when the broker closed the connection."""
        head = self._recv_exact(4)
        if head is None:
            return None
        size = struct.unpack(">i", head)[0]
        payload = self._recv_exact(size)
        assert payload is not None, "connection closed inside a response"
        return struct.unpack_from(">i", payload)[0], Reader(payload, 4)

    def request(self, api_key: int, version: int, body: bytes) -> Reader:
        corr = self.send(api_key, version, body)
        got = self.recv()
        assert got is not None, "broker closed the connection"
        assert got[0] == corr, f"correlation id {got[0]} != {corr}"
        return got[1]

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


# ---------------------------------------------------------------------------------------------------- requests

def produce_body(topic: str, partition: int, records: bytes | None, acks: int = -1, timeout_ms: int = 5000,
                 version: int = 8) -> bytes:
    w = Writer()
    if version >= 3:
        w.string(None)
    w.int16(acks).int32(timeout_ms).array_len(1).string(topic).array_len(1).int32(partition).bytes_(records)
    return bytes(w.buf)


def produce_frame(correlation_id: int, topic: str, records: bytes, client_id: str, acks: int = 1,
                  version: int = 8) -> bytes:
    """A whole Produce request of one partition (0) as it goes on a socket, size prefix included: for tests
    that pipeline many requests in one sendall."""
    body = struct.pack(">hhi", PRODUCE, version, correlation_id) + bytes(Writer().string(client_id).buf)
    body += produce_body(topic, 0, records, acks=acks, version=version)
    return struct.pack(">i", len(body)) + body


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``; ConnectionError if the peer closes first."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


@dataclass
class ProducePartition:
    error: int
    base_offset: int
    log_start_offset: int = -1


def parse_produce(r: Reader, version: int = 8) -> dict[tuple[str, int], ProducePartition]:
    out = {}
    for _ in range(r.int32()):
        topic = r.string()
        for _ in range(r.int32()):
            p, err, base = r.int32(), r.int16(), r.int64()
            if version >= 2:
                r.int64()
            lso = r.int64() if version >= 5 else -1
            if version >= 8:
                for _ in range(r.int32()):
                    r.int32()
                    r.nullable_string()
                r.nullable_string()
            out[(topic, p)] = ProducePartition(err, base, lso)
    return out


def produce(client: WireClient, topic: str, partition: int, records: bytes | None, acks: int = -1,
            version: int = 8) -> ProducePartition:
    r = client.request(PRODUCE, version, produce_body(topic, partition, records, acks, version=version))
    return parse_produce(r, version)[(topic, partition)]


def fetch_body(topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1,
               max_bytes: int = 1 << 20, version: int = 11) -> bytes:
    w = Writer().int32(-1).int32(max_wait_ms).int32(min_bytes).int32(max_bytes).int8(0)
    if version >= 7:
        w.int32(0).int32(-1)
    w.array_len(1).string(topic).array_len(1).int32(partition)
    if version >= 9:
        w.int32(-1)
    w.int64(offset)
    if version >= 5:
        w.int64(-1)
    w.int32(max_bytes)
    if version >= 7:
        w.array_len(0)
    if version >= 11:
        w.string("")
    return bytes(w.buf)


@dataclass
class FetchPartition:
    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes


def parse_fetch(r: Reader, version: int = 11) -> dict[tuple[str, int], FetchPartition]:
    r.int32()
    if version >= 7:
        assert r.int16() == 0
        r.int32()
    out = {}
    for _ in range(r.int32()):
        topic = r.string()
        for _ in range(r.int32()):
            p, err, hw, _lso = r.int32(), r.int16(), r.int64(), r.int64()
            start = r.int64() if version >= 5 else -1
            n = r.int32()
            for _ in range(max(n, 0)):
                r.int64()
                r.int64()
            if version >= 11:
                r.int32()
            rec = r.nullable_bytes()
            out[(topic, p)] = FetchPartition(err, hw, start, bytes(rec) if rec is not None else b"")
    assert r.remaining() == 0
    return out


def fetch(client: WireClient, topic: str, partition: int, offset: int, max_wait_ms: int = 0,
          version: int = 11, min_bytes: int = 1, max_bytes: int = 1 << 20) -> FetchPartition:
    body = fetch_body(topic, partition, offset, max_wait_ms, min_bytes, max_bytes, version)
    return parse_fetch(client.request(FETCH, version, body), version)[(topic, partition)]


def list_offsets(client: WireClient, topic: str, partition: int, timestamp: int, version: int = 5
                 ) -> tuple[int, int, int]:
    """(error, timestamp, offset)"""
    w = Writer().int32(-1)
    if version >= 2:
        w.int8(0)
    w.array_len(1).string(topic).array_len(1).int32(partition)
    if version >= 4:
        w.int32(-1)
    w.int64(timestamp)
    r = client.request(LIST_OFFSETS, version, bytes(w.buf))
    if version >= 2:
        r.int32()
    assert r.int32() == 1
    assert r.string() == topic
    assert r.int32() == 1
    assert r.int32() == partition
    err, ts, off = r.int16(), r.int64(), r.int64()
    return err, ts, off


def metadata(client: WireClient, topics: list[str] | None, version: int = 8) -> dict:
    w = Writer()
    if topics is None:
        w.array_len(-1)
    else:
        w.array_len(len(topics))
        for t in topics:
            w.string(t)
    if version >= 4:
        w.boolean(False)
    if version >= 8:
        w.boolean(False).boolean(False)
    r = client.request(METADATA, version, bytes(w.buf))
    if version >= 3:
        r.int32()
    brokers = {}
    for _ in range(r.int32()):
        node, host, port = r.int32(), r.string(), r.int32()
        rack = r.nullable_string() if version >= 1 else None
        brokers[node] = (host, port, rack)
    cluster_id = r.nullable_string() if version >= 2 else None
    controller = r.int32() if version >= 1 else -1
    topics_out = {}
    for _ in range(r.int32()):
        err, name = r.int16(), r.string()
        if version >= 1:
            r.boolean()
        parts = {}
        for _ in range(r.int32()):
            perr, p, leader = r.int16(), r.int32(), r.int32()
            if version >= 7:
                r.int32()
            r.int32_array()
            r.int32_array()
            if version >= 5:
                r.int32_array()
            parts[p] = (perr, leader)
        if version >= 8:
            r.int32()
        topics_out[name] = (err, parts)
    if version >= 8:
        r.int32()
    assert r.remaining() == 0
    return {"brokers": brokers, "cluster_id": cluster_id, "controller": controller, "topics": topics_out}


def api_versions(client: WireClient, version: int = 2) -> tuple[int, dict[int, tuple[int, int]]]:
    r = client.request(API_VERSIONS, version, b"")
    err = r.int16()
    ranges = {}
    for _ in range(r.int32()):
        k, lo, hi = r.int16(), r.int16(), r.int16()
        ranges[k] = (lo, hi)
    return err, ranges


def create_topic(client: WireClient, name: str, partitions: int, version: int = 4,
                 configs: dict[str, str] | None = None, replication_factor: int = 1) -> tuple[int, str | None]:
    w = Writer().array_len(1).string(name).int32(partitions).int16(replication_factor).array_len(0)
    cfg = configs or {}
    w.array_len(len(cfg))
    for k, v in cfg.items():
        w.string(k).string(v)
    w.int32(10_000)
    if version >= 1:
        w.boolean(False)
    r = client.request(CREATE_TOPICS, version, bytes(w.buf))
    if version >= 2:
        r.int32()
    assert r.int32() == 1
    assert r.string() == name
    err = r.int16()
    msg = r.nullable_string() if version >= 1 else None
    return err, msg


# ---------------------------------------------------------------------------------------------------- clusters

def start_brokers(zk_connect_base: str, root, n: int, extra_args: tuple[str, ...] = (), datacenter: str = "live"):
    """Start `n` broker processes (ferry.embedded.BrokerProcess) in a fresh chroot; returns (zk_connect, brokers)."""
    import uuid

    from ferry.embedded import BrokerProcess

    zk = f"{zk_connect_base}/t/{uuid.uuid4().hex[:12]}/{datacenter}"
    brokers = []
    try:
        for i in range(1, n + 1):
            b = BrokerProcess(i, root / f"broker-{i}" / "data", zk, datacenter, extra_args=extra_args)
            brokers.append(b)
            b.start()
    except BaseException:
        for b in brokers:
            b.stop()
        raise
    return zk, brokers


def leaders(client: WireClient, topic: str, expect_partitions: int, timeout: float = 10.0) -> dict[int, int]:
    """partition -> leader id, once Metadata shows all partitions with leaders."""
    deadline = time.monotonic() + timeout
    while True:
        md = metadata(client, [topic])
        err, parts = md["topics"].get(topic, (3, {}))
        if err == 0 and len(parts) == expect_partitions and all(e == 0 for e, _ in parts.values()):
            return {p: leader for p, (_e, leader) in parts.items()}
        if time.monotonic() > deadline:
            raise AssertionError(f"metadata for {topic} not ready: {md}")
        time.sleep(0.05)

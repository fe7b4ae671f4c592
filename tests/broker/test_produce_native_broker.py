"""A real broker process with the native produce path and one with its pure-Python twins
(FERRY_NATIVE_DISABLE=produce,append) answer a pipelined burst alike: good one-message requests with consecutive offsets (appended a burst at a
time), and bad ones — a broken CRC, magic 1, a batch cut short, a control batch — with the error codes the
general path always gave, in their place among the good ones. Each broker says at start which path it runs."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import crc32c
import pytest
from broker_wire import (
    WireClient,
    build_batch,
    create_topic,
    leaders,
    parse_produce,
    produce_frame,
    recv_exact,
    start_brokers,
)

from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader

TOPIC = "native"


def _request(correlation_id: int, records: bytes) -> bytes:
    return produce_frame(correlation_id, TOPIC, records, "native-test")




def _bad() -> list[tuple[bytes, int]]:
    good = bytes(build_batch([b"bad"]))
    crc = bytearray(good)
    crc[-1] ^= 0xFF
    magic = bytearray(good)
    magic[16] = 1
    control = bytearray(good)
    struct.pack_into(">h", control, 21, 0x20)
    struct.pack_into(">I", control, 17, crc32c.crc32c(bytes(control[21:])))
    return [(bytes(crc), ErrorCode.CORRUPT_MESSAGE), (bytes(magic), ErrorCode.INVALID_RECORD),
            (good[:-4], ErrorCode.CORRUPT_MESSAGE), (bytes(control), ErrorCode.INVALID_RECORD)]


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_burst_with_bad_requests_is_answered_as_before(zk_connect: str, tmp_path: Path, monkeypatch, native):
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "" if native == "1" else "produce,append")
    _zk, brokers = start_brokers(zk_connect, tmp_path, 1)
    try:
        b = brokers[0]
        client = WireClient(b.bootstrap)
        assert create_topic(client, TOPIC, 1)[0] == 0
        leaders(client, TOPIC, 1)
        client.close()
        bad = _bad()
        requests, expected, offset = [], [], 0
        for i in range(100):
            if i % 20 == 10:
                records, code = bad[(i // 20) % len(bad)]
                requests.append(_request(i, records))
                expected.append((i, code, -1))
                continue
            requests.append(_request(i, bytes(build_batch([b"m%d" % i]))))
            expected.append((i, 0, offset))
            offset += 1
        host, port = b.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=15) as s:
            s.sendall(b"".join(requests))
            got = []
            for _ in requests:
                frame = recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
                res = parse_produce(Reader(frame, 4), 8)[(TOPIC, 0)]
                got.append((struct.unpack_from(">i", frame)[0], res.error, res.base_offset))
        assert got == expected
        line = "native parts: " if native == "1" else "produce off (disabled by FERRY_NATIVE_DISABLE)"
        assert line in Path(b.log_file).read_text()
        assert ("produce on, append on" in Path(b.log_file).read_text()) == (native == "1")
    finally:
        for x in brokers:
            x.stop()

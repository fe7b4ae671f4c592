"""Topic compression.type: the log converts batches to the topic's codec on append (Kafka's broker-side
recompression), keeps every header field that is not about the codec, and refuses what does not decompress."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import crc32c
import lz4.frame
import pytest
import snappy
import zstandard

from ferry.broker.log.log import Log
from ferry.broker.server.broker_config import BrokerConfig, ConfigError
from ferry.wire.log_config import LogConfig
from ferry.wire.record.compression import Codec, compress, decompress
from ferry.wire.record.errors import CorruptRecordError, RecordTooLargeError
from ferry.wire.record.message_set_builder import MessageSetBuilder
from ferry.wire.record.recompress import count_records, recompress_batches
from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, assign_offsets, validate_batches
from tests.wire.storage_batches import CODECS, build_batch, decode


def log_bytes(log: Log) -> bytes:
    log.flush()
    return b"".join(p.read_bytes() for p in sorted(log.dir.glob("*.log")))


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
def test_codec_round_trip_and_bounds(codec: Codec) -> None:
    data = b"".join(b"record %d of a batch; " % i for i in range(5000))
    packed = compress(codec, data)
    assert len(packed) < len(data) // 3
    assert decompress(codec, packed, len(data)) == data
    with pytest.raises(RecordTooLargeError, match="decompresses to more than"):
        decompress(codec, packed, len(data) - 1)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2], len(data))
    with pytest.raises(CorruptRecordError):
        decompress(codec, os.urandom(64), 1 << 20)


def test_a_decompression_bomb_is_refused_before_it_inflates() -> None:
    zeros = bytes(64 << 20)  # 64 MiB of zeros: a few KiB compressed
    for codec, packed in ((Codec.GZIP, gzip.compress(zeros)), (Codec.ZSTD, zstandard.compress(zeros)),
                          (Codec.LZ4, lz4.frame.compress(zeros)), (Codec.SNAPPY, snappy.compress(zeros))):
        assert len(packed) < 4 << 20
        with pytest.raises(RecordTooLargeError):
            decompress(codec, packed, 1 << 20)
    # a gzip stream whose size is not in any header: stopped after limit + 1 bytes of output
    d = zlib.compressobj(9, zlib.DEFLATED, 31)
    with pytest.raises(RecordTooLargeError):
        decompress(Codec.GZIP, d.compress(zeros) + d.flush(), 1 << 20)


def test_raw_and_xerial_snappy_both_read() -> None:
    data = b"abc" * 1000
    assert decompress(Codec.SNAPPY, snappy.compress(data), 10_000) == data  # raw (librdkafka may send it)
    assert compress(Codec.SNAPPY, data).startswith(b"\x82SNAPPY\x00")  # xerial, what Java clients expect
    assert decompress(Codec.SNAPPY, compress(Codec.SNAPPY, data), 10_000) == data


@pytest.mark.parametrize("source", list(CODECS))
@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_log_converts_every_codec_to_the_topic_codec(tmp_path: Path, source: str, target: str) -> None:
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config({"compression.type": target}))
    values = [(b"value %d " % i) * 20 for i in range(30)]
    sent = build_batch(30, codec=CODECS[source], values=values, timestamp=1_700_000_000_000)
    info = log.append(sent + build_batch(5, codec=CODECS[source], timestamp=1_700_000_000_500))
    assert (info.first_offset, info.last_offset) == (0, 34)
    batches = list(decode(log_bytes(log)))  # the oracle checks each CRC
    want = 0 if target == "uncompressed" else CODECS[target]
    assert [b.compression_type for b, _ in batches] == [want, want]
    first, records = batches[0]
    assert [r.value for r in records] == values
    assert [r.key for r in records] == [str(i).encode() for i in range(30)]
    assert [r.offset for r in records] == list(range(30))
    assert {r.timestamp for r in records} == {1_700_000_000_000}
    assert [r.offset for r in batches[1][1]] == list(range(30, 35))
    log.close()
    assert Log(tmp_path / "t-0").log_end_offset == 35  # recovery walks the converted batches


def test_producer_keeps_what_the_producer_sent(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config({"compression.type": "producer"}))
    sent = build_batch(10, codec=CODECS["gzip"]) + build_batch(10)
    log.append(sent)
    expected = bytearray(sent)
    assign_offsets(expected, 0)  # the only bytes the broker changes: each batch's baseOffset
    assert log_bytes(log) == bytes(expected)


def test_idempotent_batch_converted_keeps_producer_id_and_deduplicates(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config({"compression.type": "zstd"}))
    batch = build_batch(20, producer_id=7, producer_epoch=0, base_sequence=0)
    first = log.append(batch)
    again = log.append(batch)  # a retried send: found by its sequence numbers, not written twice
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    log.append(build_batch(5, producer_id=7, producer_epoch=0, base_sequence=20))
    batches = list(decode(log_bytes(log)))
    assert [(b.producer_id, b.base_sequence, b.compression_type) for b, _ in batches] == [(7, 0, 4), (7, 20, 4)]
    assert log.log_end_offset == 25


def test_append_time_and_conversion_together(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config(
        {"compression.type": "lz4", "message.timestamp.type": "LogAppendTime"}), now_ms=lambda: 1_900_000_000_000)
    log.append(build_batch(4, timestamp=5))
    [(batch, records)] = list(decode(log_bytes(log)))
    assert batch.compression_type == 3 and batch.timestamp_type == 1
    assert {r.timestamp for r in records} == {1_900_000_000_000}


def test_message_set_builder_sets_converted(tmp_path: Path) -> None:
    """ferry's own message sets (no keys, one timestamp) convert like any producer's."""
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config({"compression.type": "gzip"}))
    values = [os.urandom(8).hex().encode() * 25 for _ in range(50)]
    log.append(MessageSetBuilder().build(values))
    [(batch, records)] = list(decode(log_bytes(log)))
    assert batch.compression_type == 1 and [r.value for r in records] == values


def test_a_batch_whose_records_disagree_with_its_header_is_refused_and_nothing_written(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config({"compression.type": "zstd"}))
    good = build_batch(3)
    h = validate_batches(good)[0]
    # claim 4 records in the header (CRC made valid again): the records section holds 3
    forged = bytearray(good)
    forged[57:61] = (4).to_bytes(4, "big")
    forged[23:27] = (3).to_bytes(4, "big")  # lastOffsetDelta 3 so that the header is self-consistent
    forged[17:21] = crc32c.crc32c(bytes(forged[21:])).to_bytes(4, "big")
    assert h.records_count == 3
    with pytest.raises(CorruptRecordError, match="holds 3 records, its header says 4"):
        log.append(bytes(good) + bytes(forged))
    # a compressed section that does not decompress (CRC valid: the producer compressed garbage)
    bad = bytearray(build_batch(3, codec=CODECS["gzip"]))
    body = os.urandom(len(bad) - BATCH_HEADER_SIZE)
    bad[BATCH_HEADER_SIZE:] = body
    bad[17:21] = crc32c.crc32c(bytes(bad[21:])).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="gzip data does not decompress"):
        log.append(bytes(bad))
    assert log.log_end_offset == 0 and log_bytes(log) == b""


def test_converted_batch_over_max_message_bytes_is_refused(tmp_path: Path) -> None:
    cfg = LogConfig.from_topic_config({"compression.type": "uncompressed", "max.message.bytes": "3000"})
    log = Log(tmp_path / "t-0", cfg)
    packed = build_batch(100, codec=CODECS["zstd"], value_size=100)
    assert len(packed) < 3000
    with pytest.raises(RecordTooLargeError, match="after conversion exceeds max.message.bytes 3000"):
        log.append(packed)
    assert log.log_end_offset == 0


def test_count_records() -> None:
    body = bytes(build_batch(7))[BATCH_HEADER_SIZE:]
    assert count_records(body) == 7
    with pytest.raises(CorruptRecordError):
        count_records(body[:-1])
    assert recompress_batches(memoryview(build_batch(2)), validate_batches(build_batch(2)), 0, None, 1 << 20) is None


def test_compression_settings_are_checked() -> None:
    for bad, msg in (({"compression.type": "brotli"}, "expected one of producer, uncompressed"),
                     ({"compression.zstd.level": "23"}, "at most 22"),
                     ({"compression.gzip.level": "x"}, "expected an integer")):
        with pytest.raises(ValueError, match=msg):
            LogConfig.from_topic_config(bad)
    cfg = BrokerConfig.from_properties({
        "broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/tmp/x",
        "zookeeper.connect": "127.0.0.1:2181", "datacenter": "live", "compression.type": "zstd",
        "compression.zstd.level": "9"})
    assert (cfg.log.compression_type, cfg.log.compression_level) == ("zstd", 9)
    with pytest.raises(ConfigError, match="compression.type: expected one of"):
        BrokerConfig.from_properties({
            "broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/tmp/x",
            "zookeeper.connect": "127.0.0.1:2181", "datacenter": "live", "compression.type": "none"})

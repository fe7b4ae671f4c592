"""RecordBatch v2 header parsing, validation and offset assignment against kafka-python's bytes."""

from __future__ import annotations

import struct

import crc32c
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from ferry.wire.record import errors
from ferry.wire.record.record_batch import (
    BATCH_HEADER_SIZE,
    assign_offsets,
    read_header,
    validate_batches,
)
from tests.wire.storage_batches import CODECS, build_batch, decode


def test_header_fields_match_kafka_python() -> None:
    data = build_batch(7, codec=CODECS["gzip"], timestamp=1_700_000_000_123,
                       producer_id=42, producer_epoch=3, base_sequence=10)
    h = read_header(data)
    batch, records = next(decode(data))
    assert BATCH_HEADER_SIZE == 61
    assert h.size == len(data) == batch.size_in_bytes
    assert h.magic == 2 and h.crc == batch.crc
    assert h.records_count == 7 == len(records)
    assert h.last_offset_delta == 6 and h.last_offset == 6 and h.next_offset == 7
    assert h.compression == 1
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 10)
    assert h.last_sequence == 16
    assert h.base_timestamp == h.max_timestamp == 1_700_000_000_123
    assert not h.is_transactional and not h.is_control


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_validate_accepts_every_codec(codec: str) -> None:
    data = build_batch(20, codec=CODECS[codec])
    [h] = validate_batches(data)
    assert h.compression == CODECS[codec]


def test_validate_several_batches() -> None:
    parts = [build_batch(n) for n in (1, 5, 3)]
    headers = validate_batches(b"".join(parts))
    assert [h.records_count for h in headers] == [1, 5, 3]


def test_crc_failure_detected() -> None:
    data = bytearray(build_batch(3))
    data[-5] ^= 0xFF
    with pytest.raises(errors.CorruptRecordError, match="CRC"):
        validate_batches(data)
    assert errors.CorruptRecordError.kafka_error_code == 2


def test_fresh_crcs_skip_only_the_crc() -> None:
    """check_crcs=False (the embedded mirror's append of batches whose CRC its walk just computed): the CRC is not
    recomputed, every other check still refuses."""
    data = bytearray(build_batch(3))
    data[-5] ^= 0xFF
    assert [h.records_count for h in validate_batches(data, check_crcs=False)] == [3]
    data[16] = 1  # magic
    with pytest.raises(errors.InvalidRecordError, match="magic 1"):
        validate_batches(data, check_crcs=False)
    with pytest.raises(errors.CorruptRecordError):
        validate_batches(bytes(build_batch(3))[:-1], check_crcs=False)


def test_crc_ignores_base_offset_and_leader_epoch() -> None:
    data = bytearray(build_batch(3))
    struct.pack_into(">qii", data, 0, 12345, len(data) - 12, 99)
    validate_batches(data)


@pytest.mark.parametrize("cut", [1, 30, 61, 100])
def test_truncated_payload(cut: int) -> None:
    data = build_batch(3) + build_batch(2)
    with pytest.raises(errors.CorruptRecordError):
        validate_batches(data[:-cut])


def test_trailing_garbage() -> None:
    with pytest.raises(errors.CorruptRecordError):
        validate_batches(build_batch(2) + b"\x00" * 20)


def test_empty_payload() -> None:
    with pytest.raises(errors.InvalidRecordError):
        validate_batches(b"")


def test_old_magic_refused() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=1, key=None, value=b"v")
    data = bytes(builder.build())
    # pad so it is long enough to look like a v2 header
    data = data + b"\x00" * max(0, BATCH_HEADER_SIZE - len(data))
    with pytest.raises(errors.InvalidRecordError, match="magic 1"):
        validate_batches(data)
    assert errors.InvalidRecordError.kafka_error_code == 87


def _recrc(data: bytearray) -> bytearray:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return data


def test_offset_delta_inconsistent_with_count() -> None:
    data = bytearray(build_batch(5))
    struct.pack_into(">i", data, 23, 2)  # lastOffsetDelta 2 < recordsCount - 1
    with pytest.raises(errors.CorruptRecordError, match="lastOffsetDelta"):
        validate_batches(_recrc(data))


def test_batch_length_too_small() -> None:
    data = bytearray(build_batch(2))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(errors.CorruptRecordError):
        validate_batches(data)


def test_transactional_and_control_refused() -> None:
    with pytest.raises(errors.InvalidRecordError, match="transactional"):
        validate_batches(build_batch(2, producer_id=1, producer_epoch=0, base_sequence=0, transactional=True))
    data = bytearray(build_batch(1))
    struct.pack_into(">h", data, 21, 0x20)
    with pytest.raises(errors.InvalidRecordError, match="control"):
        validate_batches(_recrc(data))


def test_zero_records_refused() -> None:
    data = bytearray(build_batch(1))
    struct.pack_into(">i", data, 57, 0)
    with pytest.raises(errors.InvalidRecordError, match="no records"):
        validate_batches(_recrc(data))


def test_too_large() -> None:
    data = build_batch(10, value_size=1000)
    with pytest.raises(errors.RecordTooLargeError):
        validate_batches(data, max_batch_bytes=len(data) - 1)
    validate_batches(data, max_batch_bytes=len(data))
    assert errors.RecordTooLargeError.kafka_error_code == 10


def test_short_header() -> None:
    with pytest.raises(errors.CorruptRecordError):
        read_header(b"\x00" * 60)


def test_assign_offsets_in_place() -> None:
    buf = bytearray(build_batch(3, codec=CODECS["lz4"]) + build_batch(4) + build_batch(1, codec=CODECS["zstd"]))
    assert assign_offsets(buf, 1000) == 1008
    offsets = [r.offset for _, records in decode(bytes(buf)) for r in records]
    assert offsets == list(range(1000, 1008))


def test_error_codes() -> None:
    assert {cls.__name__: cls.kafka_error_code for cls in (
        errors.LogOffsetOutOfRangeError, errors.OutOfOrderSequenceError, errors.DuplicateSequenceError,
        errors.InvalidProducerEpochError)} == {
        "LogOffsetOutOfRangeError": 1, "OutOfOrderSequenceError": 45, "DuplicateSequenceError": 46,
        "InvalidProducerEpochError": 47}

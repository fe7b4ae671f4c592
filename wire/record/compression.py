"""Kafka's record-batch codecs (attributes bits 0-2), with decompression bounded in size.

The broker compresses and decompresses only when a topic's ``compression.type`` differs from the codec a
producer used (see recompress.py). The framings are Kafka's: gzip streams, Snappy in xerial-java framing
(what the Java client writes; raw Snappy is read too, as librdkafka may send it), LZ4 frames with
independent 64 KiB blocks, zstd frames with the content size. Decompression never produces more than
``limit`` bytes: a small batch that inflates to gigabytes is refused instead of exhausting memory.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard
from kafka.codec import snappy_encode

from ferry.wire.record.errors import CorruptRecordError, RecordTooLargeError


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's topic/broker `compression.type` values; "producer" keeps whatever the producer sent.
PRODUCER = -1
COMPRESSION_TYPES: dict[str, int] = {
    "producer": PRODUCER,
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}
COMPRESSION_NAMES = {v: k for k, v in COMPRESSION_TYPES.items()}

# KIP-390 levels: (minimum, maximum, default). gzip -1 means zlib's default (6).
LEVELS: dict[Codec, tuple[int, int, int]] = {
    Codec.GZIP: (-1, 9, -1),
    Codec.LZ4: (1, 17, 9),
    Codec.ZSTD: (-131072, 22, 3),
}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic (8) + version (4) + compatible version (4)
_U32 = struct.Struct(">I")


def parse_compression_type(name: str, text: str) -> int:
    """A ``compression.type`` value -> PRODUCER or a Codec; ValueError listing the choices."""
    value = COMPRESSION_TYPES.get(text.strip().lower())
    if value is None:
        raise ValueError(f"{name}: expected one of {', '.join(COMPRESSION_TYPES)}, got {text!r}")
    return value


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """``data`` (the records of a batch) in ``codec``'s framing; ``level`` None = Kafka's default."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        lvl = -1 if level is None else level
        c = zlib.compressobj(lvl, zlib.DEFLATED, 31)  # wbits 16+15: a gzip stream, as Java's GZIPOutputStream
        return c.compress(data) + c.flush()
    if codec == Codec.SNAPPY:
        return snappy_encode(bytes(data), xerial_compatible=True)
    if codec == Codec.LZ4:
        return lz4.frame.compress(
            data, compression_level=LEVELS[Codec.LZ4][2] if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False)
    if codec == Codec.ZSTD:
        lvl = LEVELS[Codec.ZSTD][2] if level is None else level
        return zstandard.ZstdCompressor(level=lvl, write_content_size=True).compress(data)
    raise CorruptRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """The records inside a compressed batch. CorruptRecordError if ``data`` is not a complete, valid
    stream of ``codec``; RecordTooLargeError if it inflates beyond ``limit`` bytes."""
    name = COMPRESSION_NAMES.get(codec, str(codec))
    try:
        if codec == Codec.NONE:
            out = bytes(data)
        elif codec == Codec.GZIP:
            out = _gunzip(data, limit)
        elif codec == Codec.SNAPPY:
            out = _unsnappy(bytes(data), limit)
        elif codec == Codec.LZ4:
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(data, max_length=limit + 1)
            if len(out) <= limit and not d.eof:
                raise CorruptRecordError("lz4 frame is truncated")
        elif codec == Codec.ZSTD:
            size = zstandard.get_frame_parameters(data).content_size
            if size != zstandard.CONTENTSIZE_UNKNOWN and size > limit:
                _too_large(name, limit)
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=limit, allow_extra_data=False)
        else:
            raise CorruptRecordError(f"unknown compression codec {codec} (attributes bits 0-2)")
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except Exception as e:  # each library has its own error types; all mean the bytes are not valid
        raise CorruptRecordError(f"{name} data does not decompress: {e}") from None
    if len(out) > limit:
        _too_large(name, limit)
    return out


def _too_large(name: str, limit: int) -> None:
    raise RecordTooLargeError(f"{name} record batch decompresses to more than {limit} bytes")


def _gunzip(data: bytes | memoryview, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    while rest:  # a gzip file may hold several members
        d = zlib.decompressobj(31)
        piece = d.decompress(rest, limit + 1 - total)
        total += len(piece)
        parts.append(piece)
        if total > limit:
            break
        if not d.eof:
            raise CorruptRecordError("gzip stream is truncated")
        rest = d.unused_data
    return b"".join(parts)


def _unsnappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _raw_snappy(data, limit)
    parts: list[bytes] = []
    total = 0
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("snappy (xerial) block length is truncated")
        (n,) = _U32.unpack_from(data, pos)
        pos += 4
        if pos + n > len(data):
            raise CorruptRecordError("snappy (xerial) block is truncated")
        piece = _raw_snappy(data[pos : pos + n], limit - total)
        total += len(piece)
        parts.append(piece)
        pos += n
    return b"".join(parts)


def _raw_snappy(block: bytes, limit: int) -> bytes:
    """Raw Snappy starts with the uncompressed length (a little-endian base-128 varint): check it first."""
    size = shift = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        size |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    else:
        raise CorruptRecordError("snappy block has no valid length preamble")
    if size > 32 * len(block):  # a copy element (at least 2 bytes) yields at most 64: no stream says more
        raise CorruptRecordError(f"snappy block of {len(block)} bytes claims {size} bytes uncompressed")
    if size > limit:
        _too_large("snappy", limit)
    return snappy.uncompress(block)

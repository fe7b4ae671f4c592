"""Build Kafka RecordBatch v2 message sets from byte strings, fast enough not to be the bottleneck.

The paper's producer API sends a *message set* (`producer.send(messageSet)`); this is that, for the
benchmark's message-set producer. All records of a set share one timestamp (delta 0), have no key and
no headers, so the per-record prefix (length, attributes, deltas, key and value lengths) depends only
on the record's position and the value length: it is computed once per (batch size, value size).
Format: the Kafka protocol's RecordBatch v2 (magic 2), CRC-32C over attributes..end.
"""

from __future__ import annotations

import struct
import time

import crc32c

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_HEAD = struct.Struct(">qiibI")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, count
_TAIL = struct.Struct(">hiqqqhii")


def varint(n: int) -> bytes:
    """Zig-zag varint (Kafka's record fields)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


class MessageSetBuilder:
    """Encodes lists of equally sized values into RecordBatch v2 bytes."""

    def __init__(self, value_size: int) -> None:
        self.value_size = value_size
        self._prefixes: list[bytes] = []

    def _prefix(self, i: int) -> bytes:
        while len(self._prefixes) <= i:
            j = len(self._prefixes)
            body = b"\x00" + varint(0) + varint(j) + varint(-1) + varint(self.value_size)
            length = len(body) + self.value_size + 1  # + headers count
            self._prefixes.append(varint(length) + body)
        return self._prefixes[i]

    def build(self, values: list[bytes], timestamp_ms: int | None = None) -> bytes:
        n = len(values)
        if n == 0:
            raise ValueError("a message set needs at least one message")
        self._prefix(n - 1)
        p = self._prefixes
        records = b"".join([b for i, v in enumerate(values) for b in (p[i], v, b"\x00")])
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        tail = _TAIL.pack(0, n - 1, ts, ts, -1, -1, -1, n)
        crc = crc32c.crc32c(records, crc32c.crc32c(tail))
        # batchLength counts from partitionLeaderEpoch (4) + magic (1) + crc (4) + tail + records
        head = _HEAD.pack(0, 9 + len(tail) + len(records), -1, 2, crc)
        return head + tail + records

"""The native batch walk (mirror/_forward_scan.pyx) against the Python walk it stands in for.

forward_batches must give the same bytes, spans, headers, offsets, counts and errors whichever walk ran:
the sequences stamped into the copy and the resume offsets the mirror keeps depend on every one of them.
Random mixes of what a Fetch answer can hold: small and large batches, several codecs, control batches,
empty ones, LogAppendTime, compacted (not dense) batches, a fetch offset inside the data, a cut-off tail,
and corrupt batches (bad CRC, magic, length).
"""

from __future__ import annotations

import random
import struct

import crc32c
import pytest
from mirror_batches import build_batch, make_control, records

from ferry.mirror import batch_rewrite
from ferry.mirror.batch_rewrite import CorruptBatchError, forward_batches
from ferry.wire.record.read_committed import ReadCommitted
from tests.wire.native_parts import needs_native

T0 = 1_700_000_000_000

pytestmark = needs_native("forward_scan")


def _restamp(batch: bytearray, **fields: int) -> bytes:
    for pos, fmt, value in ((21, ">h", fields.get("attributes")), (23, ">i", fields.get("last_delta"))):
        if value is not None:
            struct.pack_into(fmt, batch, pos, value)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _answer(rnd: random.Random) -> tuple[bytes, int]:
    """A random Fetch answer's records and the offset after them."""
    parts: list[bytes] = []
    offset = rnd.randrange(0, 1000)
    for _ in range(rnd.randrange(1, 40)):
        kind = rnd.choices(["small", "big", "zstd", "control", "lat", "gap"], [60, 8, 8, 8, 8, 8])[0]
        n = rnd.randrange(1, 30) if kind != "big" else rnd.randrange(300, 700)
        batch = bytearray(build_batch(records(n, T0 + offset, prefix=f"p{offset}"), offset,
                                      "zstd" if kind == "zstd" else "none"))
        if kind == "control":
            batch = bytearray(make_control(bytes(batch)))
        elif kind == "lat":
            batch = bytearray(_restamp(batch, attributes=0x08))
        elif kind == "gap":  # compacted: the batch spans more offsets than it has records
            batch = bytearray(_restamp(batch, last_delta=n + 3))
            n += 4
        parts.append(bytes(batch))
        offset += n
    return b"".join(parts), offset


def _both(data: bytes, fetch_offset: int, coalesce: int, committed: bool):
    """forward_batches' outcome (or error) with the native walk and with the Python one."""
    results = []
    for scan in (batch_rewrite._scan, None):
        saved = batch_rewrite._scan
        batch_rewrite._scan = scan
        try:
            out = forward_batches(data, fetch_offset, 7, 1, 100, coalesce, ReadCommitted(None) if committed else None)
            results.append((bytes(out.records), out.spans, out.headers, out.resume_offsets, out.end_offsets,
                            out.coalesced, out.counts, out.next_offset, out.next_sequence, out.messages,
                            out.skipped_batches, out.truncated))
        except CorruptBatchError as e:
            results.append(("corrupt", str(e), e.offset))
        finally:
            batch_rewrite._scan = saved
    return results


@pytest.mark.parametrize("seed", range(40))
def test_the_native_walk_forwards_what_the_python_walk_does(seed: int) -> None:
    rnd = random.Random(seed)
    data, end = _answer(rnd)
    cut = len(data) - rnd.randrange(1, 200) if rnd.random() < 0.3 else len(data)  # a fetch size limit
    fetch_offset = rnd.randrange(0, end) if rnd.random() < 0.3 else 0
    coalesce = rnd.choice([0, 4 << 10, 960 << 10])
    native, python = _both(data[:cut], fetch_offset, coalesce, rnd.random() < 0.5)
    assert native == python
    assert native[0] != "corrupt"


@pytest.mark.parametrize("damage", ["crc", "magic", "length"])
def test_a_corrupt_batch_raises_the_same_error(damage: str) -> None:
    good = [build_batch(records(5, T0), i * 5) for i in range(6)]
    bad = bytearray(good[3])
    if damage == "crc":
        bad[-1] ^= 0xFF
    elif damage == "magic":
        bad[16] = 1
    else:
        struct.pack_into(">i", bad, 8, 10)
    data = b"".join(good[:3]) + bytes(bad) + b"".join(good[4:])
    native, python = _both(data, 0, 960 << 10, False)
    assert native == python
    assert native[0] == "corrupt" and native[2] == 15


def test_aborted_transactions_take_the_python_walk() -> None:
    """The native walk knows no aborted transactions: forward_batches does not hand it such an answer."""
    assert ReadCommitted([(9, 0)]).aborts and not ReadCommitted(None).aborts and not ReadCommitted([]).aborts


def _damaged(rnd: random.Random, data: bytes) -> tuple[bytes, int]:
    """``data`` with one byte of one batch's body flipped (its CRC-32C no longer matches); that batch's offset."""
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    start = rnd.choice(starts)
    end = start + struct.unpack_from(">i", data, start + 8)[0] + 12
    buf = bytearray(data)
    buf[rnd.randrange(start + 61, end)] ^= 1 << rnd.randrange(8)
    return bytes(buf), struct.unpack_from(">q", data, start)[0]


@pytest.mark.parametrize("seed", range(40))
def test_a_damaged_batch_anywhere_raises_at_it_whichever_walk(seed: int) -> None:
    """The native scan leaves the CRC-32C of uncompressed runs to the concatenation: a flipped bit in any batch
    (alone, in a run, compressed, control, a run of one) still raises at that batch, as the Python walk does."""
    rnd = random.Random(seed)
    data, _ = _answer(rnd)
    damaged, offset = _damaged(rnd, data)
    native, python = _both(damaged, 0, rnd.choice([0, 4 << 10, 960 << 10]), False)
    assert native == python
    assert native[0] == "corrupt" and native[2] == offset


def test_the_scan_leaves_uncompressed_runs_to_the_concatenation() -> None:
    """With defer_run_crcs the scan passes a damaged batch of an uncompressed run on (the concatenation
    checks it) and still stops at a damaged batch forwarded alone or a damaged control batch."""
    small = [build_batch(records(5, T0), i * 5) for i in range(4)]
    bad = bytearray(small[1])
    bad[-1] ^= 0xFF
    data = small[0] + bytes(bad) + b"".join(small[2:])
    items, pos, *_ = batch_rewrite._scan.scan(data, 0, 0, 960 << 10, batch_rewrite.COALESCE_MAX_SOURCE, True)
    assert pos == len(data) and len(items) == 1 and len(items[0]) == 4
    items, pos, *_ = batch_rewrite._scan.scan(data, 0, 0, 960 << 10, batch_rewrite.COALESCE_MAX_SOURCE, False)
    assert pos == len(small[0])
    for alone in (bytearray(make_control(small[1])), bytearray(build_batch(records(5, T0), 5, "zstd"))):
        alone[-1] ^= 0xFF
        data = small[0] + bytes(alone) + b"".join(small[2:])
        _, pos, *_ = batch_rewrite._scan.scan(data, 0, 0, 960 << 10, batch_rewrite.COALESCE_MAX_SOURCE, True)
        assert pos == len(small[0])
    with pytest.raises(CorruptBatchError) as raised:
        forward_batches(small[0] + bytes(bad) + b"".join(small[2:]), 0, 7, 1, 100, 960 << 10)
    assert raised.value.offset == 5


def test_a_run_that_does_not_walk_is_still_checked() -> None:
    """A run the strict concatenation refuses (a non-UTF-8 header key) goes to aiokafka's path; a damaged
    batch later in it raises before that path can re-stamp (and so launder) it."""
    refused = bytearray(build_batch(records(3, T0), 0))
    key_at = refused.index(b"ferry.host") if b"ferry.host" in refused else -1
    assert key_at > 0
    refused[key_at] = 0xFF  # the header key is no longer UTF-8
    struct.pack_into(">I", refused, 17, crc32c.crc32c(bytes(refused[21:])))
    later = bytearray(build_batch(records(5, T0), 3))
    later[-1] ^= 0xFF
    data = bytes(refused) + bytes(later) + build_batch(records(5, T0), 8)
    native, python = _both(data, 0, 960 << 10, False)
    assert native == python
    assert native[0] == "corrupt" and native[2] == 3


def _positions_both(data: bytes, fetch_offset: int):
    """copy_positions (the embedded mirror's one native pass) and forward_batches(source_positions=True)."""
    results = []
    for native in (True, False):
        try:
            if native:
                stamped, messages, nxt = batch_rewrite.copy_positions(data, fetch_offset, 7, ReadCommitted(None))
                results.append((bytes(stamped), messages, nxt))
            else:
                out = forward_batches(data, fetch_offset, 7, 0, 0, source_positions=True)
                results.append((bytes(out.records), out.messages, out.next_offset))
        except CorruptBatchError as e:
            results.append(("corrupt", str(e), e.offset))
    return results


@pytest.mark.parametrize("seed", range(40))
def test_the_embedded_mirrors_native_pass_stamps_what_the_python_walk_does(seed: int) -> None:
    """Same bytes (live base offset in epoch/sequence, fresh CRC), records and next offset; control, empty and
    already copied batches passed over; a cut-off tail left for the next fetch; a damaged batch raised at it."""
    rnd = random.Random(1000 + seed)
    data, end = _answer(rnd)
    if rnd.random() < 0.3:
        data, offset = _damaged(rnd, data)
        native, python = _positions_both(data, 0)
        assert native == python and native[0] == "corrupt" and native[2] == offset
        return
    cut = len(data) - rnd.randrange(1, 200) if rnd.random() < 0.3 else len(data)
    fetch_offset = rnd.randrange(0, end) if rnd.random() < 0.3 else 0
    native, python = _positions_both(data[:cut], fetch_offset)
    assert native == python
    assert native[0] != "corrupt"


def test_the_native_pass_spells_large_live_offsets() -> None:
    """Offsets past 2^31 carry into the producer epoch (batch_rewrite.source_position)."""
    base = (3 << 31) + 12345
    data = build_batch(records(4, T0), base)
    native, python = _positions_both(data, base)
    assert native == python
    epoch, seq = struct.unpack_from(">hi", native[0], 51)
    assert batch_rewrite.live_offset_of(epoch, seq) == base

"""The offline log's tail mapped back to a live offset (tail_sync.py), against in-memory logs served through
the real Fetch encoding: units of the mirror's batches after a checkpoint, walked over live batches with
control batches and compacted (sparse) batches among them; a moved group offset; an offline log that went
back below its checkpoint; batches of other producers in the same offline partition."""

from __future__ import annotations

import struct

import crc32c
import pytest
from mirror_batches import build_batch, make_control, records

from ferry.mirror.batch_rewrite import forward_batches
from ferry.mirror.checkpoint import Checkpoint, Stored
from ferry.mirror.tail_sync import SyncError, sync_partition
from ferry.wire.protocol import fetch
from ferry.wire.protocol.fetch import PartitionFetchResult
from ferry.wire.protocol.list_offsets import EARLIEST_TIMESTAMP
from ferry.wire.record.record_batch import read_header

TP = ("t", 0)
PID = 42
T0 = 1_800_000_000_000


class LogClient:
    """A WireClient stand-in serving one partition's batches (bytes with their base offsets)."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.leaders = {TP: 1}

    @property
    def end(self) -> int:
        return read_header(self.batches[-1]).next_offset if self.batches else 0

    def append(self, batch: bytes) -> None:
        buf = bytearray(batch)
        struct.pack_into(">q", buf, 0, self.end)
        self.batches.append(bytes(buf))

    def leader(self, _topic: str, _partition: int) -> int:
        return 1

    def connection(self, _node: int):
        return self

    def close_connection(self, _node: int) -> None:
        pass

    def request(self, _api: int, _version: int, body) -> memoryview:
        offset = struct.unpack_from(">q", bytes(body[0]), 4 + 4 + 4 + 4 + 1 + 4 + 4 + 4 + 2 + 1 + 4 + 4 + 4)[0]
        data = b"".join(b for b in self.batches if read_header(b).next_offset > offset)
        res = PartitionFetchResult(0, 0, self.end, self.end, 0, data)
        return memoryview(b"".join(fetch.encode_response(11, [("t", [res])])))

    def offsets(self, wanted: dict) -> dict:
        return {tp: 0 if ts == EARLIEST_TIMESTAMP else self.end for tp, ts in wanted.items()}


def sparse(batch: bytes, last_delta: int) -> bytes:
    """A batch whose offsets were compacted: its records keep their deltas, the header spans more."""
    buf = bytearray(batch)
    struct.pack_into(">i", buf, 23, last_delta)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def live_log() -> LogClient:
    live = LogClient()
    for i in range(12):
        live.append(build_batch(records(5, T0 + i), 0))
        if i % 4 == 1:
            live.append(make_control(build_batch(records(1, T0), 0)))
        if i == 6:
            live.append(sparse(build_batch(records(3, T0), 0), 6))  # 3 records over 7 offsets
    return live


def copy(live: LogClient, offline: LogClient, start: int, seq: int, n_batches: int, coalesce: int) -> tuple[int, int]:
    """What a mirror writes: forward_batches from ``start``, the first ``n_batches`` appended offline."""
    data = b"".join(live.batches)
    fw = forward_batches(data, start, PID, 0, seq, coalesce)
    for (pos, size), _end in list(zip(fw.spans, fw.end_offsets, strict=True))[:n_batches]:
        offline.append(bytes(fw.records[pos:pos + size]))
    end = fw.end_offsets[n_batches - 1] if n_batches else start
    last = read_header(offline.batches[-1]) if n_batches else None
    return end, (last.base_sequence + last.last_offset_delta + 1) if last else seq


@pytest.mark.parametrize("coalesce", [0, 1 << 20])
@pytest.mark.parametrize("copied", [0, 1, 3, 7])
def test_the_tail_maps_back_to_the_first_live_offset_not_copied(coalesce: int, copied: int) -> None:
    live, offline = live_log(), LogClient()
    offline.append(build_batch(records(4, T0), 0, producer_id=7, producer_epoch=0, base_sequence=0))  # not ours
    ck = Checkpoint(0, offline.end, 0, 0, offline.end)
    end, seq = copy(live, offline, 0, 0, copied, coalesce if copied != 7 else 0)
    offline.append(build_batch(records(2, T0), 0, producer_id=7, producer_epoch=0, base_sequence=4))  # not ours
    res = sync_partition(live, offline, TP, PID, 0, Stored(ck, 3, 0), None, count=True)
    assert (res.resume, res.seq, res.write) == (end, seq, False)
    assert sum(res.open_counts.values()) == sum(read_header(b).records_count for b in offline.batches
                                                if read_header(b).producer_id == PID)


def test_a_moved_group_offset_is_honoured_and_becomes_the_anchor() -> None:
    live, offline = live_log(), LogClient()
    end, seq = copy(live, offline, 0, 0, 4, 0)
    res = sync_partition(live, offline, TP, PID, 0, Stored(Checkpoint(0, 0, 0, 0, 0), 3, 5), None, count=False)
    assert res.write and res.resume == 5 and res.seq == seq and res.anchor == Checkpoint(5, offline.end, seq, 0, 0)


def test_an_offline_log_below_its_checkpoint_goes_on_under_the_next_epoch() -> None:
    live, offline = live_log(), LogClient()
    copy(live, offline, 0, 0, 2, 0)
    ck = Checkpoint(30, offline.end + 20, 99, 3, offline.end + 20)
    res = sync_partition(live, offline, TP, PID, 0, Stored(ck, 3, 30), None, count=False)
    assert res.write and (res.resume, res.seq, res.epoch, res.offline) == (30, 0, 4, offline.end)
    assert "OFFLINE DATA LOST" in res.note


def test_a_checkpoint_that_disagrees_with_the_tail_is_not_copied_from() -> None:
    live, offline = live_log(), LogClient()
    copy(live, offline, 0, 0, 3, 0)
    with pytest.raises(SyncError, match="checkpoint"):
        sync_partition(live, offline, TP, PID, 0, Stored(Checkpoint(0, 0, 17, 0, 0), 3, 0), None, count=False)


def test_no_checkpoint_starts_at_the_committed_offset_or_the_live_log_start() -> None:
    live, offline = live_log(), LogClient()
    res = sync_partition(live, offline, TP, PID, 2, Stored(None, -1, 10), None, count=True)
    assert res.write and res.anchor == Checkpoint(10, 0, 0, 2, 0)
    res = sync_partition(live, offline, TP, PID, 2, Stored(None), 7, count=True)
    assert res.resume == 7
    res = sync_partition(live, offline, TP, PID, 2, Stored(None), None, count=True)
    assert res.resume == 0

"""Where an embedded mirror's copy ends, read back from the offline log (no processes: a Log in a directory).

The copied batches' producer epoch and sequence spell the live offsets they came from; the log's producer
state (or, once it forgot the link's producer, a scan of the log) gives the live offset to resume at, across
the gaps markers and aborted transactions leave, and past the 2^31 sequence boundary.
"""

from __future__ import annotations

import time
from collections import Counter

from mirror_batches import build_batch, make_control, records

from ferry.broker.log.log import Log
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.client.audit.bucket import bucket_start
from ferry.mirror.batch_rewrite import forward_batches, live_offset_of, source_position
from ferry.mirror.embedded_audit import count_range
from ferry.mirror.embedded_copier import copy_position
from ferry.wire.record.read_committed import ReadCommitted
from ferry.wire.record.record_batch import read_header

LINK_PID = 42
T0 = int(time.time() * 1000) - 3_600_000


def live_answer(start: int) -> tuple[bytes, int, Counter]:
    """A live fetch answer from ``start``: 3 data batches, a marker between them, then an aborted batch.
    Returns (bytes, offset after all, expected bucket counts of the data that is copied)."""
    out, offset, counts = b"", start, Counter()
    for i in range(3):
        recs = records(5, T0 + i * 700_000, prefix=f"b{i}")
        out += build_batch(recs, base_offset=offset, producer_id=7, producer_epoch=0, base_sequence=0)
        counts.update(bucket_start(r[0]) for r in recs)
        offset += 5
        if i == 0:
            out += make_control(build_batch(records(1, T0), base_offset=offset, producer_id=9, producer_epoch=0,
                                            base_sequence=0))
            offset += 1
    aborted = build_batch(records(4, T0, prefix="x"), base_offset=offset, producer_id=11, producer_epoch=0,
                          base_sequence=0, transactional=True)
    return out + aborted, offset + 4, counts


def test_the_position_comes_back_from_the_log_across_gaps_and_the_sequence_boundary(tmp_path) -> None:
    lg = Log(tmp_path / "t-0")
    try:
        for start in (0, (1 << 31) - 7):  # the second answer crosses the int32 sequence boundary
            data, end, _ = live_answer(start)
            out = forward_batches(data, start, LINK_PID, 0, 0, committed=ReadCommitted([(11, end - 4)]),
                                  source_positions=True)
            assert out.next_offset == end and len(out.headers) == 3  # the marker and the aborted batch passed over
            lg.append(out.records, leader_epoch=0, check_sequences=False)
            # resume after the last copied data batch (the aborted one after it is walked over again, not copied)
            assert copy_position(lg, LINK_PID) == end - 4
        pos = 0
        bases = []
        while pos < len(out.records):
            h = read_header(out.records, pos)
            bases.append(live_offset_of(h.producer_epoch, h.base_sequence))
            pos += h.size
        assert bases == [(1 << 31) - 7, (1 << 31) - 1, (1 << 31) + 4]
        assert source_position((1 << 31) + 4) == (1, 4)
        # the producer state forgot the link (producer.id.expiration.ms): the scan of the log finds the same
        lg.producer_state.reset(ProducerStateManager())
        assert copy_position(lg, LINK_PID) == (1 << 31) - 7 + 16
        assert copy_position(lg, 99) is None
    finally:
        lg.close()


def test_a_repeat_of_a_copied_batch_is_a_duplicate_and_the_counts_are_the_copied_records(tmp_path) -> None:
    lg = Log(tmp_path / "t-0")
    try:
        data, end, counts = live_answer(0)
        out = forward_batches(data, 0, LINK_PID, 0, 0, committed=ReadCommitted([(11, end - 4)]),
                              source_positions=True)
        first = lg.append(out.records, leader_epoch=0, check_sequences=False)
        last = read_header(out.records, out.spans[-1][0])
        again = lg.append(out.records[out.spans[-1][0]:], leader_epoch=0, check_sequences=False)
        assert again.duplicate and again.last_offset == first.last_offset and last.records_count == 5
        assert lg.log_end_offset == 15
        assert count_range(lg, LINK_PID, 0, lg.log_end_offset) == counts
    finally:
        lg.close()

"""The committer's books without processes: checkpoints move with the progress, ranges of counts are declared
in the checkpoint before their events go out, and whoever publishes a declared range again (after a crash or
a failed send) publishes the very same events, so the mirror tier counts each message once."""

from __future__ import annotations

from collections import Counter

from ferry.mirror.checkpoint import ABSENT, Checkpoint, CheckpointConflict, MemoryCheckpoints, write_one
from ferry.mirror.checkpoint_keeper import CheckpointKeeper
from ferry.mirror.partition_mirror import PartitionProgress
from ferry.mirror.tail_sync import SyncResult

TP = ("t", 0)
B1, B2 = 1_800_000_000_000, 1_800_000_600_000  # two bucket starts


class Sink:
    """A publish function that acknowledges (or not) and remembers every event it saw."""

    def __init__(self) -> None:
        self.ok = True
        self.events: list = []

    def __call__(self, events: list) -> bool:
        self.events += events
        return self.ok

    def books(self) -> Counter:
        """Counts per bucket with events deduplicated by guid, as the reconciler reads them."""
        seen: dict = {}
        for e in self.events:
            seen.setdefault(e.guid, e)
        out: Counter = Counter()
        for e in seen.values():
            out[e.bucket_start] += e.count
        return out


def keeper(store: MemoryCheckpoints, sink: Sink) -> CheckpointKeeper:
    return CheckpointKeeper(store, "g", sink, lambda: {"host": "h", "datacenter": "offline", "application": "m"})


def adopt_fresh(k: CheckpointKeeper, store: MemoryCheckpoints, generation: int = 1) -> None:
    stored = store.read(TP)
    ck = stored.checkpoint or Checkpoint(0, 0, 0, 0, 0)
    res = SyncResult(ck.live, ck.seq, ck.epoch, ck.offline, ck, stored.checkpoint is None)
    assert k.adopt(TP, res, stored.version, generation, True)


def test_checkpoints_move_and_counts_are_published_once_per_range() -> None:
    store, sink = MemoryCheckpoints(), Sink()
    k = keeper(store, sink)
    adopt_fresh(k, store)
    assert k.commit({TP: PartitionProgress(100, 100, 100, 1, Counter({B1: 100}))}) == set()
    assert store.read(TP).checkpoint == Checkpoint(100, 100, 100, 0, 0)  # counted, not published yet
    k.commit({TP: PartitionProgress(150, 150, 150, 1, Counter({B2: 50}))}, audit_due=True)
    ck = store.read(TP).checkpoint
    assert ck.audit == 150 and ck.publishing is None
    assert sink.books() == Counter({B1: 100, B2: 50})
    k.commit({TP: PartitionProgress(160, 160, 160, 1, Counter())}, audit_due=True)
    assert len(sink.events) == 2  # nothing new to publish


def test_a_declared_range_is_published_again_under_the_same_guids_after_a_crash() -> None:
    store, sink = MemoryCheckpoints(), Sink()
    first = keeper(store, sink)
    adopt_fresh(first, store)
    sink.ok = False  # the events go out but are never acknowledged; then the process dies
    first.commit({TP: PartitionProgress(100, 100, 100, 1, Counter({B1: 60, B2: 40}))}, audit_due=True)
    assert store.read(TP).checkpoint.publishing == (0, 100)
    sent = {e.guid for e in sink.events}

    sink.ok = True
    second = keeper(store, sink)  # the next owner: the sync recounted [0, 100) from the offline log
    stored = store.read(TP)
    res = SyncResult(100, 100, 0, 100, stored.checkpoint, False, Counter({B1: 60, B2: 40}), Counter())
    assert second.adopt(TP, res, stored.version, 1, True)
    second.commit({})
    assert {e.guid for e in sink.events[len(sent):]} == sent  # the same events again
    assert sink.books() == Counter({B1: 60, B2: 40})  # counted once
    assert store.read(TP).checkpoint.audit == 100 and store.read(TP).checkpoint.publishing is None


def test_a_stale_writer_is_refused_and_told_to_sync() -> None:
    store, sink = MemoryCheckpoints(), Sink()
    old = keeper(store, sink)
    adopt_fresh(old, store)
    new = keeper(store, sink)
    adopt_fresh(new, store, generation=1)
    assert new.commit({TP: PartitionProgress(10, 10, 10, 1, Counter({B1: 10}))}) == set()
    assert old.commit({TP: PartitionProgress(5, 5, 5, 1, Counter({B1: 5}))}) == {TP}  # its view is stale: dropped
    assert TP not in old.books
    assert store.read(TP).checkpoint.live == 10


def test_progress_of_an_older_sync_is_ignored() -> None:
    store, sink = MemoryCheckpoints(), Sink()
    k = keeper(store, sink)
    adopt_fresh(k, store, generation=2)
    k.commit({TP: PartitionProgress(99, 99, 99, 1, Counter({B1: 99}))})
    assert store.read(TP).checkpoint.live == 0


def test_memory_checkpoints_are_conditional_on_the_version() -> None:
    store = MemoryCheckpoints()
    v = write_one(store, TP, Checkpoint(1, 1, 1, 0, 1), ABSENT)
    try:
        write_one(store, TP, Checkpoint(2, 2, 2, 0, 2), ABSENT)
        raise AssertionError("a second create must conflict")
    except CheckpointConflict:
        pass
    assert write_one(store, TP, Checkpoint(2, 2, 2, 0, 2), v) == v + 1
    assert Checkpoint.decode(Checkpoint(3, 4, 5, 6, 7, (7, 4)).encode()) == Checkpoint(3, 4, 5, 6, 7, (7, 4))

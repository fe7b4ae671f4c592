"""The committer's books per owned partition: checkpoints written, and the mirror tier's counts published once.

Every ``commit_interval_s`` the streams' progress (live offset, offline offset, sequence, and the record
counts of what the offline cluster acknowledged since) is written as the partition's checkpoint together
with the group's committed offset (checkpoint.py). That write is conditional on the checkpoint's version:
if another process wrote it meanwhile, this one's view is stale and the partition is synced again from
the offline log (tail_sync.py) instead of being committed over.

Audit counts are exact, not at-least-once: counts are kept per offline range of a partition and published
under guids derived from that range (topic, partition, epoch, first and end offline offset, bucket). A range
is first *declared* in the checkpoint (``publishing``), then its events are sent, then the checkpoint's
``audit`` moves past it. Whoever finds a declared range in a checkpoint (this process after an error, or
the next owner after a crash) counts it again from the offline log and publishes the same events under the
same guids, which the reconciler counts once; records after the declared range are counted from the
offline log too and published as a range of their own. No record is in two ranges and every range is
published, so the mirror tier counts each message once, whatever process dies when.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ferry.client.audit.bucket import BUCKET_MS
from ferry.client.audit.event import AuditEvent
from ferry.mirror.checkpoint import Checkpoint, CheckpointConflict, CheckpointStore, write_one
from ferry.mirror.partition_mirror import PartitionProgress, TopicPartition
from ferry.mirror.tail_sync import SyncResult

log = logging.getLogger("ferry.mirror")

GUID_NAMESPACE = uuid.UUID("5b6c2f0e-9a57-4a2b-8f0d-6d1f1c3f2a10")  # mirror-tier audit events
Publish = Callable[[list[AuditEvent]], bool]  # True once every event is acknowledged


@dataclass
class PartitionBooks:
    ck: Checkpoint  # as stored
    version: int
    live: int  # the stream's progress (may be ahead of ck)
    offline: int
    seq: int
    generation: int  # the stream's sync generation this state belongs to
    count: bool  # the mirror tier counts this partition's records
    frozen: Counter | None = None  # counts of ck.publishing while it is being published
    open: Counter = field(default_factory=Counter)  # counts of [publishing end or ck.audit, offline)

    def target(self) -> Checkpoint:
        ck = self.ck.moved(self.live, self.offline, self.seq)
        return ck if self.count else replace(ck, audit=self.offline, publishing=None)


class CheckpointKeeper:
    def __init__(self, store: CheckpointStore, group: str, publish: Publish, event_fields: Callable[[], dict],
                 on_error: Callable[[str], None] = lambda kind: None) -> None:
        """``event_fields``: host, datacenter and application of the events; ``on_error(kind)``: a metric."""
        self.store = store
        self.group = group
        self.publish = publish
        self.event_fields = event_fields
        self.on_error = on_error
        self.books: dict[TopicPartition, PartitionBooks] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ from the streams
    def adopt(self, tp: TopicPartition, result: SyncResult, version: int, generation: int, count: bool) -> bool:
        """A stream synced ``tp``: store a new anchor first (False if another writer got there before), then
        keep its books from here. Other store errors propagate (the stream retries the sync later)."""
        with self._lock:
            if result.write:
                try:
                    version = write_one(self.store, tp, result.anchor, version)
                except CheckpointConflict:
                    return False
            self.books[tp] = PartitionBooks(result.anchor, version, result.resume, result.offline, result.seq,
                                            generation, count,
                                            result.frozen_counts if result.anchor.publishing else None,
                                            Counter(result.open_counts))
            return True

    def committed(self) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: b.ck.live for tp, b in self.books.items()}

    # ------------------------------------------------------------------ the committer
    def commit(self, progress: dict[TopicPartition, PartitionProgress], audit_due: bool = False,
               force: Iterable[TopicPartition] = ()) -> set[TopicPartition]:
        """Apply progress, write moved checkpoints (declaring ranges to publish when ``audit_due``, or for the
        ``force``d partitions), publish declared ranges. Returns the partitions found written by another
        process (their books are dropped: the caller syncs them again)."""
        force = set(force)
        with self._lock:
            for tp, p in progress.items():
                b = self.books.get(tp)
                if b is None or b.generation != p.generation:
                    continue  # taken away, or progress of an older sync
                b.live, b.offline, b.seq = p.live, p.offline, p.seq
                if b.count:
                    b.open.update(p.counts)
            conflicts: set[TopicPartition] = set()
            writes: dict[TopicPartition, tuple[Checkpoint, int]] = {}
            for tp, b in self.books.items():
                ck = b.target()
                if b.count and b.frozen is None and (audit_due or tp in force) and b.offline != ck.audit:
                    ck = replace(ck, publishing=(ck.audit, b.offline)) if b.open else replace(ck, audit=b.offline)
                if ck != b.ck:
                    writes[tp] = (ck, b.version)
            for tp, ck in self._write(writes, conflicts).items():
                b = self.books[tp]
                if ck.publishing and b.frozen is None:
                    b.frozen, b.open = b.open, Counter()
            self._publish_declared(conflicts)
            return conflicts

    def release(self, final: dict[TopicPartition, PartitionProgress]) -> set[TopicPartition]:
        """Partitions handed back: a last checkpoint with their counts published, then forget them."""
        with self._lock:
            conflicts = self.commit(final, force=final)
            for tp in final:
                self.books.pop(tp, None)
            return conflicts

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self.books.pop(tp, None)

    # ------------------------------------------------------------------ internals
    def _write(self, writes: dict[TopicPartition, tuple[Checkpoint, int]],
               conflicts: set[TopicPartition]) -> dict[TopicPartition, Checkpoint]:
        """Write, update the books of what was written; returns {tp: checkpoint written}."""
        if not writes:
            return {}
        done: dict[TopicPartition, Checkpoint] = {}
        failed = 0
        last: Exception | None = None
        for tp, result in self.store.write_many(writes).items():
            ck = writes[tp][0]
            if isinstance(result, CheckpointConflict):
                conflicts.add(tp)
                self.books.pop(tp, None)
                self.on_error("checkpoint_conflict")
                log.warning("%s-%d: checkpoint written by another mirror meanwhile; syncing again from the "
                            "offline log", tp[0], tp[1])
            elif isinstance(result, Exception):
                failed += 1
                last = result
            else:
                b = self.books[tp]
                b.ck, b.version = ck, result
                done[tp] = ck
        if failed:
            self.on_error("commit")
            log.warning("%d checkpoints not written (%s); retrying", failed, last)
        return done

    def _publish_declared(self, conflicts: set[TopicPartition]) -> None:
        declared = {tp: b for tp, b in self.books.items() if b.frozen is not None and b.ck.publishing}
        if not declared:
            return
        now = int(time.time() * 1000)
        fields = self.event_fields()
        events = [self.event(tp, b.ck, bucket, n, now, fields) for tp, b in declared.items()
                  for bucket, n in sorted(b.frozen.items()) if n > 0]
        if events and not self.publish(events):
            self.on_error("audit")
            log.warning("mirror audit counts of %d partitions not acknowledged by the offline cluster; "
                        "publishing the same events again later", len(declared))
            return
        writes = {}
        for tp, b in declared.items():
            assert b.ck.publishing is not None
            writes[tp] = (replace(b.target(), audit=b.ck.publishing[1], publishing=None), b.version)
        for tp in self._write(writes, conflicts):
            self.books[tp].frozen = None

    def event(self, tp: TopicPartition, ck: Checkpoint, bucket: int, n: int, now_ms: int,
              fields: dict) -> AuditEvent:
        """The event for one bucket of a declared range: its guid depends on the range only, so a second
        publication of the range (after a crash or takeover) repeats the guid and is counted once."""
        assert ck.publishing is not None
        a, b = ck.publishing
        return range_event(f"{self.group}/{tp[0]}/{tp[1]}/{ck.epoch}/{a}-{b}/{bucket}", tp[0], bucket, n, now_ms,
                           fields)


def range_event(range_name: str, topic: str, bucket: int, n: int, now_ms: int, fields: dict) -> AuditEvent:
    """The mirror tier's event for one bucket of one declared range, its guid derived from ``range_name`` (which
    names the range and the bucket) alone: both mirror kinds publish a range's events this way."""
    return AuditEvent(uuid.uuid5(GUID_NAMESPACE, range_name).hex, topic, "mirror", bucket, bucket + BUCKET_MS, n,
                      fields.get("host", ""), fields.get("datacenter", ""), fields.get("application", ""), now_ms)


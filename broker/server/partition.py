"""Partition: this broker's replica of one partition — its log, its role, and while leader the followers'
progress (Kafka's Partition and Replica).

The leader appends, stamps every batch with its leader epoch, learns each follower's log end offset (LEO)
from the offset the follower fetches at, and moves the high watermark (HW) to the smallest LEO in the ISR:
what every in-sync replica has is committed, consumers may read it and acks=-1 producers get their answer.
The HW never moves back on a leader. A partition whose ISR is the leader alone leaves the log unbounded
(``replication_hw`` None): the HW is the leader's own LEO, exactly today's single-copy behaviour and cost.

All methods run on the event loop, except that ISR changes are written to ZooKeeper from the executor by
ReplicaManager (conditionally on the state's znode version).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ferry.broker.log.append_info import AppendInfo
from ferry.broker.log.log import Log
from ferry.wire.record.record_batch import RecordBatchHeader
from ferry.zk.znodes import NO_LEADER, PartitionState

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FollowerProgress:
    """A follower as its leader sees it (Kafka's Replica on the leader)."""

    leo: int = -1  # -1: not fetched from this leader yet
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log_: Log) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log_
        self.replicas: tuple[int, ...] = ()
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.zk_version = -1
        self.controller_epoch = 0  # of the state acted on (recorded again with our ISR changes)
        self.followers: dict[int, FollowerProgress] = {}
        self.isr_change_pending = False  # a ZooKeeper write of our ISR is in flight
        # replication latency (leader append -> HW covers it), for the commit-latency histogram
        self.observe_commit: Callable[[float], None] | None = None
        self.role_log: Callable[[str, int, str, str], None] | None = None  # RoleChangeLog.note (set by ReplicaManager)
        self._uncommitted: deque[tuple[int, float]] = deque()

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.partition}, leader={self.leader}, epoch={self.leader_epoch}, "
                f"isr={list(self.isr)})")

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    @property
    def min_isr(self) -> int:
        """min.insync.replicas: the topic's, else the broker's (the log's LogConfig merges both)."""
        return self.log.config.min_insync_replicas

    @property
    def replication_hw(self) -> int:
        """The committed end: the HW as replication sees it (flushing may bound what consumers see further)."""
        hw = self.log.replication_hw
        return self.log.log_end_offset if hw is None else hw

    # ------------------------------------------------------------------ role changes
    def make_leader(self, state: PartitionState, version: int, replicas: tuple[int, ...], now_ms: int) -> bool:
        """Become (or stay) leader for ``state``; True when this is a new leader epoch for us."""
        new_epoch = not self.is_leader or state.leader_epoch != self.leader_epoch
        self.replicas, self.isr, self.zk_version = replicas, state.isr, version
        self.leader, self.leader_epoch = state.leader, state.leader_epoch
        self.controller_epoch = state.controller_epoch
        if new_epoch:
            lg = self.log
            lg.leader_epoch_cache.assign(state.leader_epoch, lg.log_end_offset)
            # Everyone in the ISR counts as caught up now; their LEOs are unknown until they fetch.
            self.followers = {r: FollowerProgress(last_caught_up_ms=now_ms) for r in replicas
                              if r != self.broker_id}
            if lg.replication_hw is None and len(self.isr) > 1:
                lg.set_replication_hw(lg.high_watermark)  # what consumers may have seen; never less
            self._role_changed("leader", f"leader (epoch {self.leader_epoch}, isr {list(self.isr)}, LEO "
                               f"{lg.log_end_offset}, HW {self.replication_hw})")
        else:
            for r in replicas:
                if r != self.broker_id and r not in self.followers:
                    self.followers[r] = FollowerProgress(last_caught_up_ms=now_ms)
        self.maybe_advance_hw()
        return new_epoch

    def make_follower(self, state: PartitionState, version: int, replicas: tuple[int, ...]) -> bool:
        """Follow ``state.leader``; True when the leader or its epoch changed (the fetcher must truncate)."""
        changed = self.leader != state.leader or self.leader_epoch != state.leader_epoch
        was_leader = self.is_leader
        self.replicas, self.isr, self.zk_version = replicas, state.isr, version
        self.leader, self.leader_epoch = state.leader, state.leader_epoch
        self.controller_epoch = state.controller_epoch
        self.followers = {}
        if was_leader and self.log.replication_hw is None:
            self.log.set_replication_hw(self.log.log_end_offset)  # bound it: truncation may follow
        if changed:
            self._role_changed("follower", f"follower of {state.leader if state.leader != NO_LEADER else 'nobody (offline)'}"
                               f" (epoch {state.leader_epoch})")
        return changed

    def _role_changed(self, role: str, line: str) -> None:
        if self.role_log is not None:
            self.role_log(self.topic, self.partition, role, line)  # summed up per topic when many change
        else:
            log.info("%s-%d: %s", self.topic, self.partition, line)

    # ------------------------------------------------------------------ leader duties
    def append(self, records: bytes | bytearray | memoryview, allow: int = 0, check_sequences: bool = True,
               crcs_fresh: bool = False) -> AppendInfo:
        """Append as leader (stamping the leader epoch); AppendInfo as Log.append returns it. ``allow``:
        transactional/control attribute bits accepted; ``check_sequences``, ``crcs_fresh``: see Log.append."""
        info = self.log.append(records, leader_epoch=self.leader_epoch, allow=allow, check_sequences=check_sequences,
                               crcs_fresh=crcs_fresh)
        if len(self.isr) <= 1:
            self.maybe_advance_hw()
        elif self.observe_commit is not None and len(self._uncommitted) < 10_000:
            self._uncommitted.append((info.last_offset + 1, time.monotonic()))
        return info

    def append_batch(self, buf: bytes | bytearray, pos: int, h: RecordBatchHeader) -> AppendInfo:
        """append() of the one batch at ``pos`` in ``buf`` that produce_parse checked (Log.append_batch)."""
        info = self.log.append_batch(buf, pos, h, self.leader_epoch)
        isr = self.isr
        if len(isr) <= 1:
            if (isr and isr != (self.broker_id,)) or self.log.replication_hw is not None:
                self.maybe_advance_hw()  # else it would do nothing: the leader alone, HW = LEO already
        elif self.observe_commit is not None and len(self._uncommitted) < 10_000:
            self._uncommitted.append((info.last_offset + 1, time.monotonic()))
        return info

    def append_batches(self, items: list) -> list[AppendInfo] | None:
        """append_batch of several batches with one write (Log.append_batches), or None: nothing done."""
        infos = self.log.append_batches(items, self.leader_epoch)
        if infos is None:
            return None
        isr = self.isr
        if len(isr) <= 1:
            if (isr and isr != (self.broker_id,)) or self.log.replication_hw is not None:
                self.maybe_advance_hw()
        elif self.observe_commit is not None and len(self._uncommitted) < 10_000:
            self._uncommitted.append((infos[-1].last_offset + 1, time.monotonic()))
        return infos

    def enough_replicas(self) -> bool:
        return len(self.isr) >= self.min_isr

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched at ``fetch_offset`` (= its LEO). True when it should join the ISR."""
        f = self.followers.get(replica_id)
        if f is None:
            return False
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.leo = fetch_offset
        f.last_fetch_leader_leo, f.last_fetch_ms = leo, now_ms
        self.maybe_advance_hw()
        if replica_id in self.isr:
            return False
        epoch_start = self.log.leader_epoch_cache.end_offset_for(self.leader_epoch - 1, leo)[1] \
            if self.leader_epoch > 0 else 0
        return fetch_offset >= self.replication_hw and fetch_offset >= max(epoch_start, 0)

    def lagging(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers that have not caught up for ``max_lag_ms`` (replica.lag.time.max.ms)."""
        return [r for r in self.isr if r != self.broker_id and r in self.followers
                and now_ms - self.followers[r].last_caught_up_ms > max_lag_ms]

    def maybe_advance_hw(self) -> bool:
        """Move the HW to the smallest LEO in the ISR; True when it moved."""
        if not self.is_leader:
            return False
        lg = self.log
        if self.isr == (self.broker_id,) or not self.isr:
            if lg.replication_hw is not None:
                lg.set_replication_hw(None)  # HW = LEO from now on (the ISR is the leader alone)
                return True
            return False
        new_hw = lg.log_end_offset
        for r in self.isr:
            if r == self.broker_id:
                continue
            f = self.followers.get(r)
            if f is None or f.leo < 0:
                return False  # not fetched yet from this leader: the HW stays
            new_hw = min(new_hw, f.leo)
        current = lg.replication_hw
        if current is None:
            # The ISR grew from the leader alone: what it held was committed then, so the HW stays at the LEO.
            lg.set_replication_hw(lg.log_end_offset)
            return True
        if new_hw > current:
            lg.set_replication_hw(new_hw)
            pending = self._uncommitted
            if pending and self.observe_commit is not None:
                now = time.monotonic()
                while pending and pending[0][0] <= new_hw:
                    self.observe_commit(now - pending.popleft()[1])
            return True
        return False

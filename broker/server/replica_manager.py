"""ReplicaManager: the partitions this broker holds a replica of, and its role in each (Kafka's).

Logs are created as soon as the registry's topic watch names this broker among a partition's replicas.
Roles come from the partition state znodes (written by the controller and by leaders, watched by every
broker): a state naming us leader makes the partition a leader here (new leader epoch in the log's epoch
cache, followers tracked); any other leader makes us its follower (the replica fetcher truncates by leader
epoch, then copies). Produce and consumer Fetch go to leaders only; anything else gets
NOT_LEADER_OR_FOLLOWER so the client refreshes its metadata.

The leader's ISR duties run here on the event loop: a follower that has not caught up for
``replica.lag.time.max.ms`` leaves the ISR, one that reaches the high watermark rejoins; both are written
to ZooKeeper conditionally (a zombie leader's write fails: the controller bumped the znode's version).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Protocol

from kazoo.client import KazooClient
from prometheus_client import Histogram

from ferry.broker.log.append_info import AppendInfo
from ferry.broker.log.log import Log
from ferry.broker.log.log_manager import LogManager
from ferry.broker.server.delayed_produce import acknowledge
from ferry.broker.server.fetch_purgatory import FetchPurgatory
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.partition import Partition
from ferry.broker.server.role_change_log import RoleChangeLog
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.record.errors import KafkaStorageError
from ferry.wire.record.record_batch import RecordBatchHeader
from ferry.zk.partition_states import update_as_leader
from ferry.zk.znodes import NO_LEADER, PartitionState, TopicInfo

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class FollowerFetching(Protocol):
    """The replica fetcher as ReplicaManager drives it (replica_fetcher.py's ReplicaFetcherManager)."""

    def add_partition(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None: ...
    def remove_partition(self, tp: TopicPartition) -> None: ...


class ReplicaManager:
    """This broker's replicas and its role in each; every leader append goes through it."""

    def __init__(self, broker_id: int, metadata: MetadataCache, log_manager: LogManager | None, *,
                 replica_lag_time_max_ms: int = 30_000) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.log_manager = log_manager
        self.request_timeout_ms = 30_000  # request.timeout.ms: caps an acks=-1 wait (set by KafkaServer)
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._assigned: dict[TopicPartition, tuple[int, ...]] = {}  # replica lists as last seen
        self._lock = threading.Lock()
        # set by start(): the event loop, the purgatory, the fetcher, ZooKeeper access
        self.loop: asyncio.AbstractEventLoop | None = None
        self.purgatory: FetchPurgatory | None = None
        self.fetcher: FollowerFetching | None = None
        self.zk_client: Callable[[], KazooClient] | None = None
        self.executor: Executor | None = None
        self._isr_task: asyncio.Task | None = None
        self.shutting_down: Callable[[], set[int]] = set  # brokers in controlled shutdown (set by KafkaServer)
        # leader append -> the ISR has it (HW moved past it): Kafka's produce "remote time", per batch
        self.commit_latency = Histogram(
            "ferry_broker_replication_commit_seconds", "time from a leader's append to the HW covering it",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=None)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.role_changes = RoleChangeLog()  # leader/follower lines, summed up per topic in bursts
        metadata.add_topics_listener(self._on_topics)

    def start(self, loop: asyncio.AbstractEventLoop, purgatory: FetchPurgatory, fetcher: FollowerFetching,
              zk_client: Callable[[], KazooClient], executor: Executor | None) -> None:
        self.loop, self.purgatory, self.fetcher = loop, purgatory, fetcher
        self.role_changes.loop = loop
        self.zk_client, self.executor = zk_client, executor
        self._isr_task = loop.create_task(self._isr_check_loop())

    async def stop(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
            try:
                await self._isr_task
            except asyncio.CancelledError:
                pass

    # ------------------------------------------------------------------ logs (registry's notifier thread)
    def _on_topics(self, topics: dict[str, TopicInfo]) -> None:
        """Create logs for the partitions we hold a replica of; apply changed topic configs; re-apply the
        role of partitions whose replica list changed (a reassignment adds or removes replicas)."""
        seen: dict[TopicPartition, tuple[int, ...]] = {}
        opened: dict[str, int] = {}  # new replicas per topic: one line each (not one per partition)
        for name, info in topics.items():
            config = dict(info.config)
            changed = name in self._configs and self._configs[name] != config
            self._configs[name] = config
            for partition, replicas in _replica_lists(info).items():
                tp = (name, partition)
                seen[tp] = replicas
                before = self._assigned.get(tp)
                if before is not None and before != replicas and self.loop is not None:
                    self.loop.call_soon_threadsafe(self.reapply, tp)
                if self.broker_id not in replicas:
                    continue
                try:
                    if (name, partition) not in self._logs:
                        self._open(name, partition, info, quiet=True)
                        opened[name] = opened.get(name, 0) + 1
                    elif changed:
                        self.log_manager.get_or_create(name, partition, config)
                        log.info("applied new config of %s-%d: %s", name, partition, config)
                except KafkaStorageError:
                    pass  # the log dir is offline (logged once): opened when it is back (reopen)
                except Exception:
                    log.exception("cannot create or update the log of %s-%d", name, partition)

        self._assigned = seen
        for name, n in opened.items():
            log.info("hosting %d replica(s) of %s", n, name)

    def reapply(self, tp: TopicPartition) -> None:
        """Act again on the partition's current state (its replica list changed under it)."""
        entry = self.metadata.states.get(tp)
        if entry is not None:
            self.apply_state(tp, entry[0], entry[1], force=True)

    def reopen(self, states: Mapping[TopicPartition, tuple[PartitionState, int]]) -> None:
        """The log dir is back online with new Log objects (log_dir_failure.py): forget the old ones and act on
        the current states again, so each partition starts over as follower (truncating by leader epoch) or
        leader."""
        for tp in list(self.partitions):
            if self.fetcher is not None:
                self.fetcher.remove_partition(tp)
        self.partitions.clear()
        with self._lock:
            self._logs.clear()
        self._on_topics(self.metadata.topics)
        for tp, (state, version) in sorted(states.items()):
            self.apply_state(tp, state, version)

    def _open(self, topic: str, partition: int, info: TopicInfo, quiet: bool = False) -> Log:
        with self._lock:
            lg = self._logs.get((topic, partition))
            if lg is None:
                lg = self.log_manager.get_or_create(topic, partition, dict(info.config))
                self._logs[(topic, partition)] = lg
                if not quiet:
                    log.info("hosting a replica of %s-%d", topic, partition)
            return lg

    # ------------------------------------------------------------------ roles (from state znodes)
    def on_state_threadsafe(self, tp: TopicPartition, state: PartitionState | None, version: int) -> None:
        """Partition state watcher callback (kazoo's thread): apply on the event loop."""
        loop = self.loop
        if loop is not None and state is not None:
            loop.call_soon_threadsafe(self.apply_state, tp, state, version)

    def apply_state(self, tp: TopicPartition, state: PartitionState, version: int, force: bool = False) -> None:
        topic, p = tp
        info = self.metadata.topics.get(topic)
        replicas = _replica_lists(info).get(p, ()) if info is not None else ()
        part = self.partitions.get(tp)
        if part is not None and not force and version <= part.zk_version and \
                state.leader_epoch <= part.leader_epoch:
            return  # an older snapshot than we already act on
        if self.broker_id not in replicas:
            if part is not None:
                self.drop(part, delete=info is not None)
            return
        if part is None:
            try:
                lg = self._logs.get(tp) or self._open(topic, p, info)
            except KafkaStorageError:
                return  # the log dir is offline (logged once): acted on when it is back (reopen)
            except Exception:
                log.exception("cannot open the log of %s-%d", topic, p)
                return
            part = self.partitions[tp] = Partition(topic, p, self.broker_id, lg)
            part.observe_commit = self.commit_latency.observe
            part.role_log = self.role_changes.note
        if part.log.offline:  # its log dir failed (log_dir_failure.py): follow the role, touch no file
            part.leader, part.leader_epoch, part.isr, part.zk_version = state.leader, state.leader_epoch, \
                state.isr, version
            if self.fetcher is not None:
                self.fetcher.remove_partition(tp)
            if self.purgatory is not None:
                self.purgatory.notify(part.log)  # acks=-1 waiters learn that leadership moved
            return
        if state.leader == self.broker_id:
            if self.fetcher is not None:
                self.fetcher.remove_partition(tp)
            try:
                part.make_leader(state, version, replicas, now_ms())
            except KafkaStorageError:
                return  # the new epoch could not be written: the log dir is offline now (log_dir_failure.py)
        else:
            if part.make_follower(state, version, replicas) and self.fetcher is not None:
                if state.leader == NO_LEADER:
                    self.fetcher.remove_partition(tp)
                else:
                    self.fetcher.add_partition(tp, state.leader, state.leader_epoch)
        if self.purgatory is not None:
            self.purgatory.notify(part.log)  # parked produces and fetches re-check their partition

    def forget_log(self, tp: TopicPartition) -> None:
        """Forget a log that has no Partition yet (its topic was deleted before any state arrived)."""
        with self._lock:
            self._logs.pop(tp, None)

    def drop(self, part: Partition, delete: bool) -> None:
        """Stop replicating ``part`` here (moved away or its topic deleted); ``delete`` removes its log."""
        tp = (part.topic, part.partition)
        if self.fetcher is not None:
            self.fetcher.remove_partition(tp)
        self.partitions.pop(tp, None)
        with self._lock:
            self._logs.pop(tp, None)
        log.info("%s-%d: no longer a replica here%s", part.topic, part.partition,
                 "; deleting its log" if delete else "")
        if delete and self.executor is not None and self.loop is not None:
            self.loop.run_in_executor(self.executor, self.log_manager.delete_log, part.topic, part.partition)

    # ------------------------------------------------------------------ lookups for KafkaApis
    def leader_partition(self, topic: str, partition: int) -> tuple[Partition | None, int]:
        """(partition, NONE) when this broker leads it, else (None, error code)."""
        part = self.partitions.get((topic, partition))
        if part is not None and part.is_leader:
            return (part, ErrorCode.NONE) if not part.log.offline else (None, ErrorCode.KAFKA_STORAGE_ERROR)
        entry = self.metadata.states.get((topic, partition))
        if entry is not None and entry[0].leader == self.broker_id and self.loop is not None:
            # The watch already told us we lead, and the hop to the loop has not run yet: act on it now,
            # so that a client sent here by Metadata is not refused for a few milliseconds.
            self.apply_state((topic, partition), entry[0], entry[1])
            part = self.partitions.get((topic, partition))
            if part is not None and part.is_leader:
                return (part, ErrorCode.NONE) if not part.log.offline else (None, ErrorCode.KAFKA_STORAGE_ERROR)
        info = self.metadata.topics.get(topic)
        if info is None or partition not in info.partitions:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER

    def leader_log(self, topic: str, partition: int) -> tuple[Log | None, int]:
        """(log, NONE) when this broker leads the partition, else (None, error code)."""
        part, code = self.leader_partition(topic, partition)
        return (part.log if part is not None else None), code

    def movable_leaderships(self) -> list[TopicPartition]:
        """Partitions led here that an in-sync replica on a live broker could take over."""
        live = self.metadata.brokers
        return [tp for tp, part in self.partitions.items() if part.is_leader
                and any(b != self.broker_id and b in live for b in part.isr)]

    def under_replicated(self) -> int:
        """Partitions led here whose ISR is shorter than their replica list (a metric)."""
        return sum(1 for part in self.partitions.values() if part.is_leader and len(part.isr) < len(part.replicas))

    # ------------------------------------------------------------------ produce
    def append(self, part: Partition, records: bytes | bytearray | memoryview, allow: int = 0,
               check_sequences: bool = True, crcs_fresh: bool = False) -> AppendInfo:
        """Append as leader. ``allow``: transactional/control attribute bits accepted (a transactional produce, a
        marker); ``check_sequences`` False: the embedded mirror's copy (Log.append). This, append_batch and
        append_batches are every leader append (produce, markers, the embedded mirror)."""
        info = part.append(records, allow, check_sequences, crcs_fresh)
        self._appended(part)
        return info

    def append_batch(self, part: Partition, buf: bytes | bytearray, pos: int, header: RecordBatchHeader
                     ) -> AppendInfo:
        """append() of the one batch at ``pos`` in ``buf`` that produce_parse checked (the produce fast path)."""
        info = part.append_batch(buf, pos, header)
        if part.followers:  # (the common single replica skips the call: this is per request)
            self._appended(part)
        return info

    def append_batches(self, part: Partition, items: list) -> list[AppendInfo] | None:
        """append_batch of several checked batches with one write; None: nothing was done."""
        infos = part.append_batches(items)
        if infos is not None:
            self._appended(part)
        return infos

    def _appended(self, part: Partition) -> None:  # parked follower fetches wake at once (they read to the end)
        if part.followers and self.purgatory is not None:
            self.purgatory.notify(part.log)

    async def acknowledge(self, part: Partition, end: int, timeout_ms: int, flusher: LogFlusher
                          ) -> tuple[int, str | None]:
        """acks=-1: (error code, message) once the leader flushed up to ``end`` and the ISR has it."""
        return await acknowledge(part, end, timeout_ms, flusher, self.purgatory, self.request_timeout_ms)

    # ------------------------------------------------------------------ follower fetches (leader side)
    def record_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int) -> None:
        hw_before = part.replication_hw
        # Only a registered broker may rejoin the ISR (as KIP-841 has it): a follower whose ZooKeeper session
        # expired (a frozen process just woken) still fetches on its old connection, and re-adding it would
        # fight the controller, which removes unregistered brokers from every ISR: tens of state writes a
        # second until the follower re-registers, and acks=-1 waiting on a broker the cluster deems dead.
        if part.record_follower_fetch(replica_id, fetch_offset, now_ms()) and \
                replica_id in self.metadata.brokers and replica_id not in self.shutting_down():
            self._change_isr(part, tuple(sorted(set(part.isr) | {replica_id})), "expand")
        if part.replication_hw != hw_before and self.purgatory is not None:
            self.purgatory.notify(part.log)

    # ------------------------------------------------------------------ ISR changes
    async def _isr_check_loop(self) -> None:
        interval = max(self.replica_lag_time_max_ms / 2000.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            try:
                self.check_isr()
            except Exception:
                log.exception("ISR check failed")

    def check_isr(self) -> None:
        now = now_ms()
        for part in list(self.partitions.values()):
            if not part.is_leader or part.isr_change_pending or part.log.offline:
                continue
            lagging = part.lagging(now, self.replica_lag_time_max_ms)
            if lagging:
                self._change_isr(part, tuple(b for b in part.isr if b not in lagging), "shrink",
                                 f"{lagging} not caught up for {self.replica_lag_time_max_ms} ms")

    def _change_isr(self, part: Partition, new_isr: tuple[int, ...], kind: str, why: str = "") -> None:
        if part.isr_change_pending or self.loop is None or self.zk_client is None:
            return
        part.isr_change_pending = True
        state = PartitionState(self.broker_id, part.leader_epoch, new_isr, part.controller_epoch)
        epoch, version, old = part.leader_epoch, part.zk_version, part.isr
        tp = (part.topic, part.partition)

        def write() -> int | None:
            return update_as_leader(self.zk_client(), tp[0], tp[1], state, version)

        async def run() -> None:
            try:
                new_version = await self.loop.run_in_executor(self.executor, write)
            except Exception as e:
                log.warning("%s-%d: ISR %s not written: %s", tp[0], tp[1], kind, str(e) or type(e).__name__)
                new_version = None
            finally:
                part.isr_change_pending = False
            if new_version is None:
                log.info("%s-%d: ISR %s to %s refused (the state changed; waiting for it)", tp[0], tp[1], kind,
                         list(new_isr))
                return
            # zk_version == new_version: the state watcher applied this very write before we got here (a
            # loaded broker); it is still ours to count and log
            if part.is_leader and part.leader_epoch == epoch and part.zk_version in (version, new_version):
                part.isr, part.zk_version = new_isr, new_version
                if kind == "shrink":
                    self.isr_shrinks += 1
                else:
                    self.isr_expands += 1
                log.info("%s-%d: ISR %s %s -> %s%s", tp[0], tp[1], kind, list(old), list(new_isr),
                         f" ({why})" if why else "")
                part.maybe_advance_hw()
                if self.purgatory is not None:
                    self.purgatory.notify(part.log)

        self.loop.create_task(run())


def _replica_lists(info: TopicInfo | None) -> dict[int, tuple[int, ...]]:
    if info is None:
        return {}
    if info.replicas:
        return info.replicas
    return {p: (leader,) for p, leader in info.partitions.items()}

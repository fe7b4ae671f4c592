"""KafkaController: one broker of the cluster elects leaders, as Kafka's controller did with ZooKeeper.

Candidacy: every broker tries to create the ephemeral ``/controller``; the winner bumps the persistent
``/controller_epoch`` (conditionally, so two winners of a race cannot both succeed) and rules until its
session ends. Every state write it makes is checked against that epoch's znode version in the same
ZooKeeper transaction: a replaced controller (expired session, long pause) changes nothing.

Decisions reach the brokers through the partition state znodes they all watch (no LeaderAndIsr request).
The controller reacts to broker deaths and births, new partitions, controlled-shutdown requests
(``/admin/controlled_shutdown/<id>``) and preferred-leader elections (``/admin/preferred_replica_election``,
and a timer when ``auto.leader.rebalance.enable``). Leaders come from the ISR only, unless unclean election
is enabled for the topic; a partition whose ISR is all gone stays offline (leader -1) until one returns.
All work runs on one thread fed by a queue, so decisions never interleave.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ferry.broker.server import reassignment
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.log_config import LogConfig
from ferry.zk.partition_state_watcher import PartitionStateWatcher
from ferry.zk.partition_states import update_many_as_controller
from ferry.zk.znodes import (
    CONTROLLED_SHUTDOWN_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    NO_LEADER,
    PREFERRED_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
    PartitionState,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
SUMMARY_OVER = 20  # more state changes than this for a topic in one pass: one summary line


class KafkaController:
    def __init__(self, broker_id: int, client_getter: Callable[[], KazooClient], metadata: MetadataCache,
                 states: PartitionStateWatcher, log_defaults: LogConfig | None = None,
                 auto_rebalance: bool = True, rebalance_interval_s: float = 300.0) -> None:
        self.broker_id = broker_id
        self._client_getter = client_getter
        self.metadata = metadata
        self.states = states
        self.log_defaults = log_defaults or LogConfig()  # the broker's topic defaults
        self.auto_rebalance = auto_rebalance
        self.rebalance_interval_s = rebalance_interval_s
        self.active = False
        self.epoch = -1
        self._epoch_version = -1
        self.current_controller = -1  # who holds /controller (for Metadata answers)
        self.shutting_down: set[int] = set()
        self._preferred: set[TopicPartition] = set()
        self._events: queue.Queue[str] = queue.Queue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_rebalance = time.monotonic() + rebalance_interval_s
        self.elections = 0  # leader elections written (a metric)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        client = self._client_getter()
        client.ensure_path(CONTROLLED_SHUTDOWN_PATH)
        client.add_listener(self._on_session)
        DataWatch(client, CONTROLLER_PATH, self._on_controller_node)
        ChildrenWatch(client, CONTROLLED_SHUTDOWN_PATH, self._on_shutdown_requests)
        DataWatch(client, PREFERRED_ELECTION_PATH, self._on_admin_request)
        DataWatch(client, REASSIGN_PARTITIONS_PATH, self._on_admin_request)
        self.states.add_listener(lambda tp, st, v: self.wake("state"))
        self.metadata.add_brokers_listener(lambda brokers: self.wake("brokers"))
        self.metadata.add_topics_listener(lambda topics: self.wake("topics"))
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._thread.start()
        self.wake("start")

    def stop(self) -> None:
        """Resign (delete /controller if ours) so another broker takes over at once."""
        self._stopping.set()
        self.wake("stop")
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.active and self._client_getter().connected:  # without ZooKeeper the session's end frees it
            self._resign()

    def wake(self, why: str) -> None:
        self._events.put(why)

    # ------------------------------------------------------------------ watches (kazoo threads: no blocking)
    def _on_session(self, state: str) -> None:
        if state == KazooState.LOST:
            self.wake("session-lost")
        elif state == KazooState.CONNECTED:
            self.wake("connected")

    def _on_controller_node(self, data: bytes | None, _stat: ZnodeStat | None) -> bool:
        self.current_controller = _controller_id(data)
        self.wake("controller")
        return not self._stopping.is_set()

    def _on_shutdown_requests(self, children: list[str]) -> bool:
        self.shutting_down = {int(c) for c in children if c.isdigit()}
        self.wake("controlled-shutdown")
        return not self._stopping.is_set()

    def _on_admin_request(self, data: bytes | None, _stat: ZnodeStat | None) -> bool:
        """A preferred election or reassignment request was written: wake up (the pass reads it)."""
        if data:
            self.wake("preferred")
        return not self._stopping.is_set()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._events.get(timeout=1.0)
            except queue.Empty:
                if not (self.active and self.auto_rebalance and time.monotonic() >= self._next_rebalance):
                    continue
            while not self._events.empty():  # coalesce a burst of events into one pass
                self._events.get_nowait()
            if self._stopping.is_set():
                break
            try:
                if not self.active:
                    self._try_elect()
                elif self.current_controller != self.broker_id:
                    self._lost("another broker holds /controller")
                    self._try_elect()
                if self.active:
                    self._take_preferred_requests()
                    if self.auto_rebalance and time.monotonic() >= self._next_rebalance:
                        self._next_rebalance = time.monotonic() + self.rebalance_interval_s
                        self._preferred.update(self._all_partitions())
                    self._reconcile()
                    if self.active:
                        self._reassign()
            except Exception as e:  # ZooKeeper gone for a moment: try again on the next event or second
                log.warning("controller pass failed: %s", str(e) or type(e).__name__)
                time.sleep(0.2)
                self.wake("retry")

    def _try_elect(self) -> None:
        client = self._client_getter()
        doc = {"version": 1, "brokerid": self.broker_id, "timestamp": str(int(time.time() * 1000))}
        try:
            client.create(CONTROLLER_PATH, json.dumps(doc).encode(), ephemeral=True)
        except NodeExistsError:
            return
        try:
            data, stat = client.get(CONTROLLER_EPOCH_PATH)
            epoch = int(data or b"0") + 1
            stat = client.set(CONTROLLER_EPOCH_PATH, str(epoch).encode(), version=stat.version)
        except NoNodeError:
            epoch = 1
            try:
                client.create(CONTROLLER_EPOCH_PATH, b"1")
                stat = client.exists(CONTROLLER_EPOCH_PATH)
            except NodeExistsError:
                self._resign()
                return
        except BadVersionError:
            self._resign()
            return
        self.active, self.epoch, self._epoch_version = True, epoch, stat.version
        self.current_controller = self.broker_id
        self._preferred.clear()
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, epoch)

    def _resign(self) -> None:
        self.active = False
        try:
            client = self._client_getter()
            data, _ = client.get(CONTROLLER_PATH)
            if _controller_id(data) == self.broker_id:
                client.delete(CONTROLLER_PATH)
        except Exception:
            pass

    def _lost(self, why: str) -> None:
        if self.active:
            log.warning("broker %d is no longer the controller (epoch %d): %s", self.broker_id, self.epoch, why)
        self.active = False

    def _take_preferred_requests(self) -> None:
        client = self._client_getter()
        try:
            data, stat = client.get(PREFERRED_ELECTION_PATH)
        except NoNodeError:
            return
        try:
            doc = json.loads(data or b"{}")
            for item in doc.get("partitions", []):
                self._preferred.add((str(item["topic"]), int(item["partition"])))
        except (ValueError, KeyError, TypeError) as e:
            log.error("ignoring a malformed preferred replica election request: %s", e)
        try:
            client.delete(PREFERRED_ELECTION_PATH, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def _reassign(self) -> None:
        """Advance every pending partition reassignment by one step (reassignment.py)."""
        client = self._client_getter()
        request = reassignment.read_request(client)
        if request is None:
            return
        targets, version = request
        done: set[TopicPartition] = set()
        for tp, target in sorted(targets.items()):
            outcome = reassignment.step(client, self._epoch_version, self.epoch, tp, target, self.states.states)
            if outcome is None:
                self._lost(f"/controller_epoch moved past {self.epoch}")
                return
            if outcome:
                done.add(tp)
        if done or not targets:
            reassignment.finish(client, version, done, targets)

    def _all_partitions(self) -> set[TopicPartition]:
        return {(t, p) for t, info in self.metadata.topics.items() for p in info.partitions}

    # ------------------------------------------------------------------ decisions
    def _reconcile(self) -> None:
        """One pass over every partition: decide them all, then write every state that must change at once
        (a restart or a broker's death changes thousands; each write stays conditional and epoch-checked)."""
        if not self.metadata.brokers_seen.is_set():
            return  # who is alive is not known yet: deciding now would move every partition away (woken later)
        live = set(self.metadata.brokers)
        shutting = set(self.shutting_down)
        preferred, self._preferred = self._preferred, set()
        updates: list[tuple[TopicPartition, PartitionState, int]] = []
        olds: dict[TopicPartition, tuple[PartitionState | None, bool]] = {}
        for topic, info in sorted(self.metadata.topics.items()):
            unclean = self._unclean(info.config)
            for p, replicas in sorted(info.replicas.items()):
                tp = (topic, p)
                current = self.states.states.get(tp)
                if current is None and tp not in self.states.missing:
                    continue  # its state is being read (a new topic, a start): decided on its arrival
                new = decide(replicas, None if current is None else current[0], live, shutting, unclean,
                             tp in preferred, self.epoch)
                if new is not None:
                    updates.append((tp, new, -1 if current is None else current[1]))
                    olds[tp] = (None if current is None else current[0], unclean)
        if not updates:
            return
        still, versions = update_many_as_controller(self._client_getter(), updates, CONTROLLER_EPOCH_PATH,
                                                    self._epoch_version)
        written: list[tuple[TopicPartition, PartitionState, PartitionState | None, bool]] = []
        for tp, new, _ in updates:
            if tp not in versions:
                continue  # not sent: this broker stopped being the controller first
            version = versions[tp]
            if version is None:
                if tp in preferred:
                    self._preferred.add(tp)  # keep the request: decided again on the state's watch event
                continue  # the leader changed the ISR meanwhile: decided again on its watch event
            # Our own view first (the watch event follows), so that the next pass does not decide on a stale state.
            self.states.record(tp, new, version)
            written.append((tp, new, *olds[tp]))
        self._log_changes(written)
        if not still:
            self._lost(f"/controller_epoch moved past {self.epoch}")

    def _log_changes(self, written: list[tuple[TopicPartition, PartitionState, PartitionState | None, bool]]
                     ) -> None:
        """One line per partition for a few changes; for many, one line per topic (a restart moves thousands)."""
        per_topic: dict[str, list[str]] = {}
        for (topic, p), new, old, unclean in written:
            if old is None or new.leader != old.leader:
                self.elections += 1
                line = (f"{topic}-{p}: leader {'none' if old is None else old.leader} -> {new.leader} (leader "
                        f"epoch {new.leader_epoch}, isr {list(new.isr)})")
                if unclean and old is not None and new.leader not in old.isr and new.leader != NO_LEADER:
                    log.warning("%s UNCLEAN", line)
                    continue
            else:
                line = f"{topic}-{p}: isr {list(old.isr)} -> {list(new.isr)}"
            per_topic.setdefault(topic, []).append(line)
        for topic, lines in per_topic.items():
            if len(lines) <= SUMMARY_OVER:
                for line in lines:
                    log.info("%s", line)
            else:
                log.info("%s: %d partition states changed (first: %s; last: %s)", topic, len(lines), lines[0],
                         lines[-1])

    def _unclean(self, topic_config: dict[str, str]) -> bool:
        """unclean.leader.election.enable: the topic's, else the broker's (parsed as the logs parse it)."""
        try:
            return LogConfig.from_topic_config(topic_config, self.log_defaults).unclean_leader_election_enable
        except ValueError:
            return self.log_defaults.unclean_leader_election_enable


def decide(replicas: tuple[int, ...], state: PartitionState | None, live: set[int], shutting: set[int],
           unclean: bool, preferred: bool, controller_epoch: int) -> PartitionState | None:
    """The state a partition should have now, or None when it should stay as it is (a pure function)."""

    def alive(b: int) -> bool:
        return b in live and b not in shutting

    if state is None:  # created without a state (older registry, direct znode writes): initialise it
        members = [r for r in replicas if r in live]
        if not members:
            return None
        return PartitionState(members[0], 0, tuple(members), controller_epoch)
    isr = [b for b in state.isr if alive(b)]
    leader = state.leader
    if leader != NO_LEADER and alive(leader):
        if preferred and replicas and leader != replicas[0] and replicas[0] in isr:
            return PartitionState(replicas[0], state.leader_epoch + 1, tuple(isr), controller_epoch)
        if leader not in isr:
            isr.insert(0, leader)
        if tuple(isr) != state.isr:
            return PartitionState(leader, state.leader_epoch, tuple(isr), controller_epoch)
        return None
    candidates = [r for r in replicas if r in isr]
    if not candidates and leader in shutting and leader in live:
        return None  # a controlled shutdown with nobody in sync to take over: the leader stays until it exits
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, tuple(isr), controller_epoch)
    if unclean:
        others = [r for r in replicas if alive(r)]
        if others:
            return PartitionState(others[0], state.leader_epoch + 1, (others[0],), controller_epoch)
    if leader == NO_LEADER:
        return None  # offline already: wait for an ISR member to return
    # Offline: no in-sync replica is alive. Keep the ISR as it was so that one of them can take over.
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)


def _controller_id(data: bytes | None) -> int:
    if not data:
        return -1
    try:
        return int(json.loads(data).get("brokerid", -1))
    except (ValueError, AttributeError, TypeError):
        return -1

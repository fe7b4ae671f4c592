"""LogDirFailureHandler: what the broker does while its log directory is offline (Kafka's
ReplicaManager.handleLogDirFailure and the controller's reaction to it, with one directory per broker).

The log layer takes the directory offline at its first IO error (LogManager.dir_failed, docs/storage.md):
from then on every Log raises KafkaStorageError without touching its files, so Produce, Fetch,
OffsetForLeaderEpoch and ListOffsets for its partitions answer KAFKA_STORAGE_ERROR (56), or
NOT_LEADER_OR_FOLLOWER once leadership moved. This module does the rest, on the event loop:

- it stops the replica fetchers of the offline partitions (a follower that cannot write must not fetch);
- it asks the controller to move every leadership away, as a controlled shutdown does: the ephemeral
  ``/admin/controlled_shutdown/<id>``. The controller elects leaders among the other in-sync replicas and
  drops this broker from every ISR, and no leader adds back a broker listed there. (Kafka tells the
  controller through /log_dir_event_notification; with one directory per broker, "every replica of this
  broker is offline" is exactly what a controlled-shutdown request says.) The broker stays registered and
  keeps serving Metadata and whatever does not touch the directory;
- it probes the directory every PROBE_INTERVAL_S (a small write and fsync; twice as long each time the
  directory fails again within FLAP_WINDOW_S of coming back, up to MAX_PROBE_INTERVAL_S, so a disk a few
  blocks short does not flap every few seconds). Once that works, the LogManager
  re-opens every log with recovery, the replica manager re-applies the partitions' current states (each
  partition comes back as follower, truncates by leader epoch and catches up; one that nobody else could
  take over is led here again), and the znode is deleted so that leaders add this broker back to their
  ISR once it has caught up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.broker.log.log_manager import LogManager
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.task_cancel import cancel_and_wait
from ferry.zk.znodes import CONTROLLED_SHUTDOWN_PATH, PartitionState

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 3.0  # how often an offline directory is tried again
MAX_PROBE_INTERVAL_S = 60.0  # a directory that keeps failing right after it came back is tried less often
FLAP_WINDOW_S = 60.0  # failing again within this long after coming back doubles the probe interval


def request_leadership_moves(client: KazooClient, broker_id: int) -> None:
    """Ask the controller to move this broker's leaderships away and drop it from the ISRs (create the
    ephemeral ``/admin/controlled_shutdown/<id>`` if it is not there: a session that expired lost it)."""
    node = f"{CONTROLLED_SHUTDOWN_PATH}/{broker_id}"
    if client.exists(node) is None:
        try:
            client.create(node, b"", ephemeral=True, makepath=True)
        except NodeExistsError:
            pass


def withdraw_leadership_request(client: KazooClient, broker_id: int) -> None:
    try:
        client.delete(f"{CONTROLLED_SHUTDOWN_PATH}/{broker_id}")
    except NoNodeError:
        pass


class LogDirFailureHandler:
    def __init__(self, broker_id: int, log_manager: LogManager, replicas: ReplicaManager,
                 states: Callable[[], Mapping[tuple[str, int], tuple[PartitionState, int]]],
                 zk_client: Callable[[], KazooClient], executor: Executor,
                 probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.replicas = replicas
        self.states = states  # the partition state watcher's current states
        self.zk_client = zk_client
        self.executor = executor
        self.probe_interval_s = probe_interval_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self.recoveries = 0  # times the directory came back online
        self._task: asyncio.Task | None = None
        self._stopped = False
        self._reopen_failures = 0
        self._interval = probe_interval_s  # grows while the directory flaps (a disk just a few blocks short)
        self._back_at: float | None = None  # loop time it last came back

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.log_manager.add_dir_failure_listener(self._on_failure)
        if self.log_manager.offline:  # failed before we listened (a checkpoint at start-up)
            self._went_offline()

    async def stop(self) -> None:
        self._stopped = True  # a failure while the broker shuts down (closing the logs) starts nothing
        await cancel_and_wait([self._task])

    def _on_failure(self, data_dir: Path, reason: str) -> None:
        """LogManager's listener: runs in the thread that hit the error (a request's, the flusher's)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._went_offline)

    def _went_offline(self) -> None:
        if self._stopped:
            return
        if self._task is not None and not self._task.done():
            return  # the running round sees it (it checks again before it ends)
        assert self.loop is not None
        self._task = self.loop.create_task(self._until_back_online(), name="log-dir-failure")

    async def _until_back_online(self) -> None:
        loop = asyncio.get_running_loop()
        data_dir = self.log_manager.data_dir
        while self.log_manager.offline:
            self._stop_fetchers()
            flapping = self._back_at is not None and loop.time() - self._back_at < FLAP_WINDOW_S
            self._interval = min(self._interval * 2, MAX_PROBE_INTERVAL_S) if flapping else self.probe_interval_s
            led = sum(1 for part in self.replicas.partitions.values() if part.is_leader)
            log.info("log dir %s offline: asking the controller to move %d leadership(s) away and drop broker %d "
                     "from the ISRs; probing the directory every %.0f s", data_dir, led, self.broker_id,
                     self._interval)
            self._reopen_failures = 0
            await self._ask_controller(loop)
            while True:
                await asyncio.sleep(self._interval)
                if await self._try_to_come_back(loop):
                    break
            self._back_at = loop.time()
            try:
                await loop.run_in_executor(self.executor, withdraw_leadership_request, self.zk_client(),
                                           self.broker_id)
            except Exception as e:  # the session will end it at the latest; leaders then re-add us
                log.warning("log dir %s: could not withdraw the leadership request: %s", data_dir,
                            str(e) or type(e).__name__)
            if not self.log_manager.offline:
                self.recoveries += 1

    async def _ask_controller(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await loop.run_in_executor(self.executor, request_leadership_moves, self.zk_client(), self.broker_id)
        except Exception as e:  # ZooKeeper away for a moment: asked again at the next round
            log.debug("asking the controller to move leaderships: %s", str(e) or type(e).__name__)

    async def _try_to_come_back(self, loop: asyncio.AbstractEventLoop) -> bool:
        """One round: keep the controller asked (a new session lost the znode), probe, and when the directory
        works re-open everything."""
        await self._ask_controller(loop)
        if not await loop.run_in_executor(self.executor, self.log_manager.probe):
            return False
        try:
            await loop.run_in_executor(self.executor, self.log_manager.reopen)
        except Exception as e:
            self._reopen_failures += 1  # said once per offline spell, not at every probe
            log.log(logging.WARNING if self._reopen_failures == 1 else logging.DEBUG,
                    "log dir %s takes writes again but re-opening its logs failed (%s); still offline",
                    self.log_manager.data_dir, str(e) or type(e).__name__)
            return False
        self.replicas.reopen(self.states())
        return True

    def _stop_fetchers(self) -> None:
        fetcher = self.replicas.fetcher
        if fetcher is not None:
            for tp in list(self.replicas.partitions):
                fetcher.remove_partition(tp)

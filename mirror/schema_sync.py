"""SchemaSync: keep the offline schema registry a replica of the live one while the mirror runs.

Mirrored messages carry the live registry's schema ids (the bytes are copied unchanged), so the offline
loaders need the same id -> schema mapping. The copy itself is `schemas.replication.replicate`; this
runs it at start-up, whenever a schema id appears in the live registry (a ZooKeeper watch), and every
``interval_s`` to retry after failures.
"""

from __future__ import annotations

import logging
import threading

from broker.zk.cluster_registry import ClusterRegistry

log = logging.getLogger("ferry.mirror.schemas")


class SchemaSync:
    def __init__(self, source: ClusterRegistry, target: ClusterRegistry, interval_s: float = 30.0) -> None:
        self.source = source
        self.target = target
        self.interval_s = interval_s
        self.copied_ids = 0
        self.failures = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ferry-mirror-schema-sync", daemon=True)

    def start(self) -> SchemaSync:
        from kazoo.recipe.watchers import ChildrenWatch

        from schemas.registry import IDS

        self.source.client.ensure_path(IDS)
        ChildrenWatch(self.source.client, IDS, self._on_ids)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def _on_ids(self, _children) -> bool | None:
        if self._stop.is_set():
            return False  # stop watching
        self._synced.clear()
        self._wake.set()
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.sync_once()
                self._synced.set()
            except Exception as e:
                self.failures += 1
                log.warning("copying the live schema registry to offline failed (%s); retrying in %.0f s",
                            e, self.interval_s)

    def sync_once(self) -> int:
        from schemas.registry import SchemaRegistry
        from schemas.replication import replicate

        result = replicate(SchemaRegistry(self.source), SchemaRegistry(self.target))
        self.copied_ids += result.ids_copied
        return result.ids_copied

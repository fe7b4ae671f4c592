"""SchemaSync: keep the offline schema registry a replica of the live one while the mirror runs.

Mirrored messages carry the live registry's schema ids (the bytes are copied unchanged), so the offline
loaders need the same id -> schema mapping. The copy itself is `ferry.schemas.replication.replicate`; this
runs it at start-up, whenever a schema id appears in the live registry (a ZooKeeper watch), and every
``interval_s`` to retry after failures.
"""

from __future__ import annotations

import logging

from kazoo.recipe.watchers import ChildrenWatch

from ferry.mirror.sync_loop import SyncLoop
from ferry.schemas.registry import IDS, SchemaRegistry
from ferry.schemas.replication import replicate
from ferry.zk.cluster_registry import ClusterRegistry

log = logging.getLogger("ferry.mirror.schemas")


class SchemaSync:
    def __init__(self, source: ClusterRegistry, target: ClusterRegistry, interval_s: float = 30.0) -> None:
        self.loop = SyncLoop("ferry-mirror-schema-sync", interval_s, self.run_pass, self.pass_failed)
        self.source = source
        self.target = target
        self.copied_ids = 0
        self.failures = 0

    def start(self) -> SchemaSync:
        self.source.client.ensure_path(IDS)
        ChildrenWatch(self.source.client, IDS, self._on_ids)
        self.loop.start()
        return self

    def stop(self) -> None:
        self.loop.stop()

    def _on_ids(self, _children) -> bool | None:
        if self.loop.stopped:
            return False  # stop watching
        self.loop.wake()
        return None

    def run_pass(self) -> bool:
        self.sync_once()
        return True

    def pass_failed(self, exc: Exception) -> None:
        self.failures += 1
        log.warning("copying the live schema registry to offline failed (%s); retrying in %.0f s",
                    exc, self.loop.interval_s)

    def sync_once(self) -> int:
        result = replicate(SchemaRegistry(self.source), SchemaRegistry(self.target))
        self.copied_ids += result.ids_copied
        return result.ids_copied

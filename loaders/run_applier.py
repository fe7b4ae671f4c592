"""The warehouse brought in line with the ledger: the redo and undo steps of the commit protocol.

A committed run (its ledger record) becomes visible by flipping its hour partitions in the metastore and
publishing its warehouse audit counts; both are idempotent, so the next run repeats them when a process
died in between (redo). Files of a run that never committed are removed (undo), and versions superseded
longer ago than the grace period are deleted (readers had time to finish).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ferry.client.audit.event import AuditEvent
from ferry.client.bootstrap import discover
from ferry.loaders.catalog import PartitionVersion
from ferry.loaders.ledger import Ledger
from ferry.loaders.load_config import Say
from ferry.loaders.warehouse import Warehouse
from ferry.loaders.warehouse_audit import publish
from ferry.wire.client_config import ClientConfig
from ferry.zk import ClusterRegistry, TopicExistsError


class RunApplier:
    """Applies the ledger's runs to the warehouse. ``warehouse`` is asked for only when there is work (it may
    start Spark); the ledger must be locked by the caller."""

    def __init__(self, ledger: Ledger, warehouse: Callable[[], Warehouse], *, zookeeper: str, gc_grace_s: float,
                 say: Say, client_config: ClientConfig | None = None) -> None:
        self.ledger, self.warehouse, self.say = ledger, warehouse, say
        self.client_config = client_config or ClientConfig.plaintext()  # TLS/SASL towards the offline brokers
        self.zookeeper, self.gc_grace_s = zookeeper, gc_grace_s

    def recover(self) -> None:
        """Redo committed runs, remove files of runs that never committed, collect old versions."""
        for record in self.ledger.pending():
            self.say(f"re-applying committed run {record['run_id']} (the previous process stopped before "
                     "publishing it)")
            self.apply(record)
        in_flight = self.ledger.in_flight()
        if in_flight or self.ledger.read()["garbage"]:
            wh = self.warehouse()
            for run_id, info in in_flight.items():
                removed = 0
                for root in info.get("roots", []):
                    for path in wh.run_versions(root, run_id):
                        wh.delete(path)
                        removed += 1
                    # a killed Spark job leaves its committer's scratch space; a later job in the same
                    # application attempt would merge its committed tasks (we hold the lock: no writer now)
                    wh.delete(f"{root}/_temporary")
                self.say(f"run {run_id} never committed: removed its {removed} unpublished partition version(s)")
                self.ledger.abandon(run_id)
            for path in self.ledger.take_garbage(self.gc_grace_s):
                wh.delete(path)

    def apply(self, record: dict[str, Any]) -> int:
        """Make a committed run visible (idempotent): flip partitions, publish audit counts. The two are
        independent (a redo repeats both; the counts' guids make a second publication harmless), so the
        publication (~0.5 s: the broker acknowledges acks=all after its flush) overlaps the metastore."""
        versions = [PartitionVersion.from_dict(d) for d in record.get("partitions", [])]
        events = [AuditEvent.from_json(e) for e in record.get("audit", [])]
        wh = self.warehouse() if versions else None

        def publish_events() -> int:
            if events:
                self._ensure_audit_topic()
            protocol = self.client_config.security_protocol
            return publish(events, record.get("bootstrap") or discover(self.zookeeper, security_protocol=protocol)[0],
                           client_config=self.client_config)

        with ThreadPoolExecutor(1, thread_name_prefix="ferry-audit") as pool:
            publishing = pool.submit(publish_events)
            if wh is not None:
                wh.set_partitions(versions)
                for table in sorted({v.table for v in versions}):
                    wh.refresh(table)
            sent = publishing.result()
        superseded = [v.previous for v in versions if v.previous and v.previous.rstrip("/") != v.location.rstrip("/")]
        self.ledger.mark_applied(record["run_id"], superseded)
        if sent:
            self.say(f"published {sent} warehouse audit event(s) to _audit")
        return sent

    def _ensure_audit_topic(self) -> None:
        """The warehouse is an audit tier: create `_audit` (1 partition) if nobody did yet."""
        with ClusterRegistry(self.zookeeper) as reg:
            if reg.topic("_audit") is None:
                try:
                    reg.create_topic("_audit", 1)
                    self.say("created topic _audit (1 partition)")
                except TopicExistsError:
                    pass

"""AuditCounter: exact per-(topic, bucket) counts of one tier, snapshotted into AuditEvents.

The producer counts in its delivery callback (``on_delivery``), so only acknowledged messages count, and a
message librdkafka retried counts once (it gets one delivery report). Callbacks may run on more than one
thread (the producer's poll thread and a caller's ``flush``), hence the lock; it is held for a dict update.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable

from ferry.client.audit.bucket import BUCKET_MS
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent


class AuditCounter:
    def __init__(self, tier: str, application: str, datacenter: str = "", host: str | None = None) -> None:
        if not tier:
            raise ValueError("audit tier must not be empty")
        self.tier = tier
        self.application = application
        self.datacenter = datacenter
        self.host = host or socket.gethostname()
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {}
        self.delivered = 0  # messages counted since start (all topics but `_audit`)
        self.failed = 0  # delivery reports with an error (not counted)

    def count(self, topic: str, timestamp_ms: int, n: int = 1) -> None:
        """Count ``n`` messages of ``topic`` with event time ``timestamp_ms`` (ignored for `_audit`)."""
        if topic == AUDIT_TOPIC:
            return
        key = (topic, timestamp_ms - timestamp_ms % BUCKET_MS)
        with self._lock:
            counts = self._counts
            counts[key] = counts.get(key, 0) + n
            self.delivered += n

    def on_delivery(self, err, msg) -> None:
        """confluent-kafka delivery callback: count a delivered message, skip a failed one (hot path)."""
        if err is not None:
            with self._lock:
                self.failed += 1
            return
        ts = msg.timestamp()[1]
        key = (msg.topic(), ts - ts % BUCKET_MS)
        with self._lock:
            counts = self._counts
            counts[key] = counts.get(key, 0) + 1
            self.delivered += 1

    def pending(self) -> int:
        """Messages counted but not yet snapshotted."""
        with self._lock:
            return sum(self._counts.values())

    def snapshot_and_reset(self) -> list[AuditEvent]:
        """One event per (topic, bucket) counted since the last snapshot; the counts restart from zero."""
        with self._lock:
            counts, self._counts = self._counts, {}
        now = int(time.time() * 1000)
        return [
            AuditEvent.new(topic, self.tier, bucket, n, host=self.host, datacenter=self.datacenter,
                           application=self.application, time_ms=now)
            for (topic, bucket), n in sorted(counts.items())
            if n
        ]

    def restore(self, events: Iterable[AuditEvent]) -> None:
        """Put back the counts of events that could not be published (they go out again, with a new guid)."""
        with self._lock:
            counts = self._counts
            for e in events:
                key = (e.topic, e.bucket_start)
                counts[key] = counts.get(key, 0) + e.count

"""AuditPublisher: ships a counter's snapshots to `_audit` every N seconds and once more on close.

An event whose own delivery fails is not lost: its count goes back into the counter and is published
again with the next snapshot (under a new guid, so the reconciler cannot mistake it for a duplicate).
"""

from __future__ import annotations

import logging
import threading
import time

from ferry.client.audit.counter import AuditCounter
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent

log = logging.getLogger("ferry.audit")


class AuditPublisher:
    """``producer`` is a ferry ``ferry.client.Producer`` (anything with ``send`` and ``flush``)."""

    def __init__(self, producer, counter: AuditCounter, interval_s: float = 10.0, topic: str = AUDIT_TOPIC) -> None:
        if interval_s <= 0:
            raise ValueError(f"audit interval must be positive, not {interval_s}")
        self.producer = producer
        self.counter = counter
        self.interval_s = interval_s
        self.topic = topic
        self.published = 0  # events acknowledged by the cluster
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._publish_lock = threading.Lock()
        self._topic_checked_at: float | None = None  # monotonic time the topic was last found missing
        self._topic_exists = False

    def start(self) -> AuditPublisher:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ferry-audit-publisher", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.publish()
            except Exception:  # a publisher must never take the application down
                log.exception("audit publish failed; counts are kept for the next attempt")

    def publish(self) -> int:
        """Send one event per (topic, bucket) counted since the last call; returns how many were sent."""
        with self._publish_lock:
            if self.counter.pending() == 0 or not self._topic_ready():
                return 0
            events = self.counter.snapshot_and_reset()
            for i, event in enumerate(events):
                try:
                    self.producer.send(self.topic, event.to_json(), event.topic.encode(),
                                       on_delivery=self._delivery_callback(event))
                except Exception:
                    self.counter.restore(events[i:])
                    raise
            return len(events)

    def _topic_ready(self) -> bool:
        """Is there a topic to publish to? Without one every event would wait out the delivery timeout
        and fail; instead the counts stay in the counter (checked again every 30 s)."""
        if self._topic_exists:
            return True
        partitions_for = getattr(self.producer, "partitions_for", None)
        if partitions_for is None:
            return True
        now = time.monotonic()
        if self._topic_checked_at is not None and now - self._topic_checked_at < 30.0:
            return False
        try:
            partitions_for(self.topic, 5.0)
            self._topic_exists = True
            return True
        except Exception as exc:
            self._topic_checked_at = now
            log.warning("audit: cannot publish to %s (%s); keeping %d counted messages", self.topic, exc,
                        self.counter.pending())
            return False

    def _delivery_callback(self, event: AuditEvent):
        def done(err, _msg) -> None:
            if err is None:
                self.published += 1
            else:
                log.warning("audit event for %s/%d not delivered (%s); will publish it again",
                            event.topic, event.bucket_start, err)
                self.counter.restore([event])
        return done

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the timer, publish what is left and wait for it; False if some counts are still unpublished."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for _attempt in range(2):
            if self.counter.pending() == 0:
                return True
            self._topic_checked_at = None  # look again now
            if self.publish() == 0 and not self._topic_exists:
                break
            self.producer.flush(timeout)
        if self.counter.pending() == 0:
            return True
        log.error("audit: %d counted messages could not be published to %s", self.counter.pending(), self.topic)
        return False

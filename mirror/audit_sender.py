"""AuditEventSender: the mirror tier's audit events to the offline `_audit`, each acknowledged once.

Shared by the standalone mirror (its CheckpointKeeper) and the embedded one (embedded_audit.py): both declare
a range, count it, send its events under guids derived from the range, and move past it only once every event
is acknowledged; a repeat (after a failure or a takeover) sends the same guids, which the reconciler counts
once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ferry.client.audit.event import AuditEvent
from ferry.client.producer import Producer
from ferry.wire.client_config import ClientConfig
from ferry.zk.topic_name import AUDIT_TOPIC

log = logging.getLogger("ferry.mirror")


class AuditEventSender:
    def __init__(self, bootstrap: Callable[[], str], application: str, datacenter: str | None, *,
                 client_config: ClientConfig | None = None) -> None:
        """``bootstrap``: the offline brokers' addresses now ("" while none is registered); ``client_config``:
        TLS/SASL towards them."""
        self.bootstrap = bootstrap
        self.client_config = client_config
        self.application = application
        self.datacenter = datacenter
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()  # guids sent, not answered yet
        self._delivered: set[str] = set()  # guids acknowledged (of the ranges still being published)

    def send(self, events: list[AuditEvent], timeout: float = 15.0) -> bool:
        """Send ``events``; True once all are acknowledged. An event still in flight from an earlier call is not
        sent again (so an offline outage does not pile copies up in the producer's queue); one acknowledged
        before is not sent again either."""
        producer = self._ensure_producer()
        if producer is None:
            return False
        wanted = {e.guid for e in events}
        with self._lock:  # forget the events no longer asked for (their ranges are published)
            self._delivered &= wanted
            self._in_flight &= wanted
        try:
            for e in events:
                with self._lock:
                    if e.guid in self._delivered or e.guid in self._in_flight:
                        continue
                    self._in_flight.add(e.guid)
                producer.send(AUDIT_TOPIC, e.to_json(), e.topic.encode(), on_delivery=self._delivery(e.guid))
        except Exception as e:
            log.warning("audit publish failed: %s", e)
            return False
        producer.flush(timeout)
        with self._lock:
            return wanted <= self._delivered

    def _delivery(self, guid: str) -> Callable:
        def done(err, _msg) -> None:
            with self._lock:
                self._in_flight.discard(guid)
                if err is None:
                    self._delivered.add(guid)
        return done

    def _ensure_producer(self) -> Producer | None:
        if self._producer is not None:
            return self._producer
        bootstrap = self.bootstrap()
        if not bootstrap:
            return None
        try:
            self._producer = Producer(bootstrap, application=self.application, datacenter=self.datacenter,
                                      audit=False, linger_ms=50, compression="lz4",
                                      client_config=self.client_config)
        except Exception as e:
            log.warning("cannot create the audit producer yet: %s", e)
            return None
        return self._producer

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None

"""The warehouse audit tier and the completeness table.

A load counts the rows it added per (topic, 10-minute bucket of event time) and, once the run is
committed, publishes them to `_audit` as tier ``warehouse``. The events' guids are derived from the run
id, topic and bucket, so re-publishing after a crash (the redo step) cannot double-count: the reconciler
counts each guid once. The `_audit` topic itself is loaded like any topic into ``ferry_audit``; the
books for an hour are balanced from that table merged with the live clusters' producer counts
(ferry.audit.completeness decides an hour's status) and written to ``ferry_completeness``, one row per
topic and hour, which analysts query to know which hours are complete.
"""

from __future__ import annotations

import socket
import time
import uuid

from ferry.audit.completeness import HourStatus, books, hour_label, hour_ms_of  # noqa: F401 - re-exported
from ferry.client.audit.bucket import BUCKET_MS
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent
from ferry.client.producer import Producer
from ferry.wire.client_config import ClientConfig

WAREHOUSE_TIER = "warehouse"
_GUID_NAMESPACE = uuid.UUID("5f0b7c1e-2f4e-4d0a-9a35-6c1f0e0a7c11")


class AuditPublishError(RuntimeError):
    pass


def warehouse_events(run_id: str, counts: dict[tuple[str, int], int], *, datacenter: str,
                     application: str = "ferry-load", host: str | None = None) -> list[AuditEvent]:
    """One event per (topic, bucket) with a positive count; deterministic guid per run."""
    host = host or socket.gethostname()
    now = int(time.time() * 1000)
    out = []
    for (topic, bucket), n in sorted(counts.items()):
        if n <= 0 or topic == AUDIT_TOPIC:
            continue
        guid = uuid.uuid5(_GUID_NAMESPACE, f"{run_id}/{topic}/{bucket}").hex
        out.append(AuditEvent(guid, topic, WAREHOUSE_TIER, bucket, bucket + BUCKET_MS, n, host, datacenter,
                              application, now))
    return out


def publish(events: list[AuditEvent], bootstrap: str, timeout_s: float = 30.0,
            client_config: ClientConfig | None = None) -> int:
    """Send the events to `_audit` and wait for every acknowledgement (raises if any is missing);
    ``client_config``: TLS/SASL towards the offline brokers."""
    if not events:
        return 0
    errors: list[str] = []

    def done(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(bootstrap=bootstrap, application="ferry-load", audit=False, linger_ms=1,
                        client_config=client_config)
    try:
        for e in events:
            producer.send(AUDIT_TOPIC, e.to_json(), e.topic.encode(), timestamp_ms=e.time, on_delivery=done)
        left = producer.flush(timeout_s)
    finally:
        producer.close(timeout_s)
    if left or errors:
        raise AuditPublishError(f"{left} audit events unacknowledged, {len(errors)} failed "
                                f"({'; '.join(errors[:3])}); they are published again by the next run")
    return len(events)


def event_from_dict(d: dict) -> AuditEvent:
    return AuditEvent(**{f: d[f] for f in AuditEvent.__dataclass_fields__})

"""Reading `_audit` back from a cluster: every event from the beginning up to the current end."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent
from ferry.client.errors import UnknownTopicError
from ferry.client.simple_consumer import SimpleConsumer
from ferry.wire.client_config import ClientConfig

log = logging.getLogger("ferry.audit")


@dataclass
class AuditLog:
    events: list[AuditEvent] = field(default_factory=list)
    invalid: int = 0  # messages on `_audit` that are not audit events (reported, not fatal)


def read_audit_events(zookeeper: str | None = None, bootstrap: str | None = None, *, topic: str = AUDIT_TOPIC,
                      timeout_s: float = 10.0, client_config: ClientConfig | None = None) -> AuditLog:
    """All events on `_audit` (an absent topic reads as no events). Raises ClientError if the cluster
    cannot be reached. ``client_config``: TLS/SASL towards its brokers."""
    out = AuditLog()
    with SimpleConsumer(bootstrap, zookeeper, client_id="ferry-audit-reader", timeout_s=timeout_s,
                        client_config=client_config) as consumer:
        try:
            messages = consumer.read(topic, "earliest", until_end=True, idle_timeout_s=timeout_s)
            for m in messages:
                try:
                    out.events.append(AuditEvent.from_json(m.value or b""))
                except ValueError as exc:
                    out.invalid += 1
                    log.warning("%s/%d@%d is not an audit event: %s", topic, m.partition, m.offset, exc)
        except UnknownTopicError:
            return out
    return out

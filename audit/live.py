"""The producers' counts as the live datacenter(s) know them: read from each live cluster's own `_audit`.

Only producer-tier events are taken from a live cluster (the other tiers are the offline side's business).
A cluster that cannot be read within the timeout is reported by name, not skipped silently: the books of
every hour are then ``unknown`` (see :mod:`ferry.audit.completeness`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from ferry.audit.reader import read_audit_events
from ferry.audit.reconciler import PRODUCER
from ferry.client.audit.event import AuditEvent
from ferry.wire.client_config import ClientConfig

log = logging.getLogger("ferry.audit.live")


@dataclass
class LiveCounts:
    events: list[AuditEvent] = field(default_factory=list)  # producer-tier events of every reachable cluster
    unreachable: list[str] = field(default_factory=list)  # connect strings whose `_audit` could not be read
    invalid: int = 0


def read_live_counts(live_zookeepers: Iterable[str], timeout_s: float = 10.0,
                     client_config: ClientConfig | None = None) -> LiveCounts:
    """Producer-tier audit events of every live cluster (reached with ``client_config``'s TLS/SASL); a failing
    cluster lands in ``unreachable``."""
    out = LiveCounts()
    for zk in live_zookeepers:
        try:
            got = read_audit_events(zk, None, timeout_s=timeout_s, client_config=client_config)
        except Exception as e:  # any failure to read means: not known, never "nothing was produced"
            log.warning("live producer counts of %s unreachable: %s: %s", zk, type(e).__name__, e)
            out.unreachable.append(zk)
            continue
        out.events.extend(e for e in got.events if e.tier == PRODUCER)
        out.invalid += got.invalid
    return out

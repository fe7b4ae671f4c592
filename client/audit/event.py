"""The audit event: one tier's count of one topic's messages in one 10-minute bucket (JSON on `_audit`).

Fields (docs/audit.md): ``{guid, topic, tier, bucket_start, bucket_end, count, host, datacenter,
application, time}``. ``guid`` makes re-published or mirrored copies of one event recognisable, so the
reconciler can count each event once however many times it reached `_audit`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass

from ferry.client.audit.bucket import BUCKET_MS
from ferry.zk.topic_name import AUDIT_TOPIC  # noqa: F401 - re-exported: the audit layer names its topic

TIERS = ("producer", "mirror", "warehouse")

_INT_FIELDS = ("bucket_start", "bucket_end", "count", "time")
_STR_FIELDS = ("guid", "topic", "tier", "host", "datacenter", "application")


@dataclass(frozen=True, slots=True)
class AuditEvent:
    guid: str
    topic: str
    tier: str
    bucket_start: int
    bucket_end: int
    count: int
    host: str
    datacenter: str
    application: str
    time: int  # when the event was made (ms since the epoch)

    @classmethod
    def new(cls, topic: str, tier: str, bucket_start: int, count: int, *, host: str, datacenter: str,
            application: str, time_ms: int) -> AuditEvent:
        return cls(uuid.uuid4().hex, topic, tier, bucket_start, bucket_start + BUCKET_MS, count,
                   host, datacenter, application, time_ms)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> AuditEvent:
        """Parse and validate one event; ValueError (saying what is wrong) for anything else."""
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"audit event is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError("audit event is not a JSON object")
        missing = [f for f in _INT_FIELDS + _STR_FIELDS if f not in doc]
        if missing:
            raise ValueError(f"audit event lacks {', '.join(missing)}")
        for f in _INT_FIELDS:
            if not isinstance(doc[f], int) or isinstance(doc[f], bool):
                raise ValueError(f"audit event field {f!r} is not an integer: {doc[f]!r}")
        for f in _STR_FIELDS:
            if not isinstance(doc[f], str):
                raise ValueError(f"audit event field {f!r} is not a string: {doc[f]!r}")
        if not doc["guid"] or not doc["topic"] or not doc["tier"]:
            raise ValueError("audit event has an empty guid, topic or tier")
        if doc["count"] < 0:
            raise ValueError(f"audit event count is negative: {doc['count']}")
        if doc["bucket_start"] % BUCKET_MS or doc["bucket_end"] != doc["bucket_start"] + BUCKET_MS:
            raise ValueError(f"audit event bucket [{doc['bucket_start']}, {doc['bucket_end']}) is not a 10-minute bucket")
        return cls(**{f: doc[f] for f in cls.__dataclass_fields__})

"""Audit: per-tier message counts per (topic, 10-minute bucket), published to `_audit` and reconciled."""

from ferry.audit.reconciler import Report, reconcile
from ferry.client.audit.bucket import BUCKET_MS, bucket_start, hour_start
from ferry.client.audit.counter import AuditCounter
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent
from ferry.client.audit.publisher import AuditPublisher

__all__ = ["AUDIT_TOPIC", "BUCKET_MS", "AuditCounter", "AuditEvent", "AuditPublisher", "Report", "bucket_start",
           "hour_start", "reconcile"]

"""Audit: per-tier message counts per (topic, 10-minute bucket), published to `_audit` and reconciled."""

from audit.bucket import BUCKET_MS, bucket_start, hour_start
from audit.counter import AuditCounter
from audit.event import AUDIT_TOPIC, AuditEvent
from audit.publisher import AuditPublisher
from audit.reconciler import Report, reconcile

__all__ = ["AUDIT_TOPIC", "BUCKET_MS", "AuditCounter", "AuditEvent", "AuditPublisher", "Report", "bucket_start",
           "hour_start", "reconcile"]

"""The benchmark's message-set encoder is ferry's own: `ferry.wire.record.message_set_builder.MessageSetBuilder`
(RecordBatch v2 from a list of values; the equal-size fast path precomputes every record's prefix).
Kept as a module so that older bench scripts importing `record_set` still work."""

from __future__ import annotations

from ferry.wire.record.message_set_builder import MessageSetBuilder, varint

__all__ = ["MessageSetBuilder", "varint"]

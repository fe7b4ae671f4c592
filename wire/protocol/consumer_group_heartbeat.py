"""ConsumerGroupHeartbeat (key 68, KIP-848's consumer group protocol), versions 0-1 (flexible; the answer is the same): answered, never
served. A client with ``group.protocol=consumer`` asks for it; ferry's coordinator speaks the classic protocol
(JoinGroup/SyncGroup/Heartbeat) only, so every request is answered UNSUPPORTED_VERSION with a message saying
what to set, as Kafka's brokers answer when the new protocol is off. Not advertising the key would leave
librdkafka retrying the coordinator forever without a word; this answer is fatal to the consumer at once."""

from __future__ import annotations

from ferry.wire.protocol import flexible

REFUSAL = ("this broker serves the classic consumer group protocol only (JoinGroup/SyncGroup): set "
           "group.protocol=classic")


def encode_error_response(error_code: int, message: str = REFUSAL) -> bytes:
    """The answer to any request: the error, no member id, epoch -1, no assignment."""
    w = flexible.response_writer().int32(0).int16(error_code)  # throttle_time_ms, error_code
    flexible.put_compact_string(w, message)
    flexible.put_compact_string(w, None)  # member_id
    w.int32(-1).int32(0)  # member_epoch, heartbeat_interval_ms
    w.int8(-1)  # assignment: null
    return bytes(flexible.put_tagged_fields(w).buf)

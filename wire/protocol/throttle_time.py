"""Where an answer carries throttle_time_ms, per API (Kafka's message specs): a broker throttling a client over its
quota sets it in every answer that has the field (KIP-219), so the client can wait by itself.

In most answers it is the body's first field, from the version given here; in flexible versions the response
header's tagged fields (one byte 0 in every answer this broker writes) come before it. OffsetDelete has it after
its error code; Produce (non-flexible) as its last field. ApiVersions, SaslHandshake, SaslAuthenticate and
WriteTxnMarkers are not throttled (the first three come before a client is known, the last is a broker's).
"""

from __future__ import annotations

from ferry.wire.protocol.api_keys import ApiKey

LAST = -4  # Produce v1-v8: the field is the answer's last four bytes

# api key -> (first version with the field, first flexible version (None: none served is), offset in the body of
# a non-flexible answer)
FIELD: dict[int, tuple[int, int | None, int]] = {
    ApiKey.PRODUCE: (1, 9, LAST),
    ApiKey.FETCH: (1, 12, 0),
    ApiKey.LIST_OFFSETS: (2, 6, 0),
    ApiKey.METADATA: (3, 9, 0),
    ApiKey.OFFSET_COMMIT: (3, 8, 0),
    ApiKey.OFFSET_FETCH: (3, 6, 0),
    ApiKey.FIND_COORDINATOR: (1, 3, 0),
    ApiKey.JOIN_GROUP: (2, 6, 0),
    ApiKey.HEARTBEAT: (1, 4, 0),
    ApiKey.LEAVE_GROUP: (1, 4, 0),
    ApiKey.SYNC_GROUP: (1, 4, 0),
    ApiKey.DESCRIBE_GROUPS: (1, 5, 0),
    ApiKey.LIST_GROUPS: (1, 3, 0),
    ApiKey.CREATE_TOPICS: (2, 5, 0),
    ApiKey.DELETE_TOPICS: (1, 4, 0),
    ApiKey.DELETE_RECORDS: (0, 2, 0),
    ApiKey.INIT_PRODUCER_ID: (0, 2, 0),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3, 0),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3, 0),
    ApiKey.END_TXN: (0, 3, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3, 0),
    ApiKey.DESCRIBE_ACLS: (0, 2, 0),
    ApiKey.CREATE_ACLS: (0, 2, 0),
    ApiKey.DELETE_ACLS: (0, 2, 0),
    ApiKey.DESCRIBE_CONFIGS: (0, 4, 0),
    ApiKey.ALTER_CONFIGS: (0, 2, 0),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 2, 0),
    ApiKey.CREATE_PARTITIONS: (0, 2, 0),
    ApiKey.DELETE_GROUPS: (0, 2, 0),
    ApiKey.ELECT_LEADERS: (0, 2, 0),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1, 0),
    ApiKey.OFFSET_DELETE: (0, None, 2),  # after the group's error code
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1, 0),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1, 0),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 0, 0),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0, 0),
}


def field_offset(api_key: int, version: int) -> int | None:
    """The offset of throttle_time_ms in the answer's body (after the correlation id; LAST: the last four bytes),
    or None when this version's answer has no such field."""
    spec = FIELD.get(api_key)
    if spec is None or version < spec[0]:
        return None
    _since, flexible, at = spec
    if flexible is not None and version >= flexible and at >= 0:
        return at + 1  # after the response header's empty tagged fields
    return at

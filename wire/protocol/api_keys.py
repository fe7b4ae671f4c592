"""The API keys this broker speaks and the version ranges it advertises.

Advertise exactly what is served: clients pick the highest common version. Produce is advertised from v0
(as Kafka 4.0 does, KAFKA-18659: older librdkafka drops compression otherwise) but v0-2 get
UNSUPPORTED_VERSION because they predate RecordBatch v2.
"""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17  # SASL listeners (docs/security.md)
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23  # replication (KIP-101): followers truncate by leader epoch
    ADD_PARTITIONS_TO_TXN = 24  # transactions (KIP-98, docs/transactions.md)
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27  # coordinator -> partition leader
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29  # ACLs (docs/acls.md)
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48  # KIP-546 (broker/server/client_quota_apis.py, docs/quotas.md)
    ALTER_CLIENT_QUOTAS = 49
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_PRODUCERS = 61  # KIP-664 (transaction_admin_apis.py)
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68  # KIP-848's consumer group protocol (docs/groups.md)
    CONSUMER_GROUP_DESCRIBE = 69


# api key -> (min, max) advertised in ApiVersions.
ADVERTISED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 7),  # v6+: flexible; v7: MAX_TIMESTAMP (-3)
    ApiKey.METADATA: (0, 12),  # v10+: topic ids (KIP-848 consumers resolve their assignments by them)
    # the group coordinator (docs/groups.md): every non-flexible version (ListGroups: and the flexible ones)
    ApiKey.OFFSET_COMMIT: (0, 7),
    ApiKey.OFFSET_FETCH: (0, 5),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 5),  # v3+: flexible; v4: states (KIP-518); v5: group types (KIP-848)
    ApiKey.DELETE_GROUPS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),  # KIP-496
    # KIP-848's protocol: every request refused at once, with what to set (a key not advertised leaves
    # librdkafka's group.protocol=consumer retrying silently)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),  # v1 (the regex field) is what librdkafka asks for
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    ApiKey.API_VERSIONS: (0, 2),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # v0: raw tokens follow (broker/server/sasl_requests.py)
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_TOPICS: (0, 4),
    # admin (docs/broker.md)
    ApiKey.DELETE_TOPICS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 1),
    ApiKey.DESCRIBE_CONFIGS: (0, 2),
    ApiKey.ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 1),  # preferred elections through the controller (v2 is flexible)
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),  # client quotas (docs/quotas.md); v1 is flexible
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 3),
    # transactions (docs/transactions.md): every non-flexible version
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 2),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 2),
    ApiKey.END_TXN: (0, 2),
    ApiKey.WRITE_TXN_MARKERS: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 2),
    # operators' view of transactions and producers (KIP-664): flexible v0
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 0),
    # ACLs (docs/acls.md): every non-flexible version (v1: prefixed patterns)
    ApiKey.DESCRIBE_ACLS: (0, 1),
    ApiKey.CREATE_ACLS: (0, 1),
    ApiKey.DELETE_ACLS: (0, 1),
}

# Versions actually served; an advertised version outside this range is answered with UNSUPPORTED_VERSION.
SERVED: dict[int, tuple[int, int]] = {**ADVERTISED, ApiKey.PRODUCE: (3, 8)}


def is_advertised(api_key: int, version: int) -> bool:
    rng = ADVERTISED.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]


def is_served(api_key: int, version: int) -> bool:
    rng = SERVED.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]

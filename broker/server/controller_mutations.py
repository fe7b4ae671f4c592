"""The partitions a topic change asks for, as KIP-599's controller_mutation_rate counts them: a CreateTopics its new
topics' partitions, a CreatePartitions the partitions it adds, a DeleteTopics the partitions of the topics it
deletes (validate-only requests and topics that already exist, or do not, count nothing).

Read from the request again by the connection's quota accounting (channel_throttle.py) only while a
controller_mutation_rate is configured: these are rare admin requests.
"""

from __future__ import annotations

from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.protocol import create_partitions, create_topics, delete_topics
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import read_request_header
from ferry.wire.protocol.primitives import ProtocolError

MUTATING = frozenset((ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS))


class ControllerMutations:
    """Counts the partitions a topic-changing request creates or deletes, against the broker's metadata."""

    def __init__(self, metadata: MetadataCache, default_partitions: int) -> None:
        self._metadata = metadata
        self._default_partitions = default_partitions

    def count(self, frame: bytes | bytearray) -> int:
        """Partitions the request in ``frame`` (header included) mutates; 0 for one that cannot be read (the
        handler answers it)."""
        try:
            header, r = read_request_header(frame)
            key, version = header.api_key, header.api_version
            topics = self._metadata.topics
            if key == ApiKey.CREATE_TOPICS:
                req = create_topics.parse_request(r, version)
                if req.validate_only:
                    return 0
                return sum(len(t.assignments) or (t.num_partitions if t.num_partitions > 0
                                                  else self._default_partitions)
                           for t in req.topics if t.name not in topics)
            if key == ApiKey.CREATE_PARTITIONS:
                req = create_partitions.parse_request(r, version)
                if req.validate_only:
                    return 0
                return sum(max(0, t.count - len(topics[t.name].partitions)) for t in req.topics if t.name in topics)
            if key == ApiKey.DELETE_TOPICS:
                req = delete_topics.parse_request(r, version)
                return sum(len(topics[name].partitions) for name in req.topics if name in topics)
        except (ProtocolError, ValueError):
            return 0
        return 0

"""ferry's client library: the audited Producer, the ZooKeeper-coordinated ConsumerConnector (the paper's
Algorithm 1) and a SimpleConsumer for reading partitions directly. Imported lazily by name so that
`import ferry.client.group_dirs` does not pull in confluent-kafka."""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Producer": "ferry.client.producer",
    "ConsumerConnector": "ferry.client.consumer_connector",
    "KafkaStream": "ferry.client.kafka_stream",
    "SimpleConsumer": "ferry.client.simple_consumer",
    "Message": "ferry.client.message",
    "MessageAndMetadata": "ferry.client.message",
    "MessageSetProducer": "ferry.client.message_set_producer",
    "MessageSetConsumer": "ferry.client.message_set_consumer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ferry.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

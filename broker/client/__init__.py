"""ferry's client library: the audited Producer, the ZooKeeper-coordinated ConsumerConnector (the paper's
Algorithm 1) and a SimpleConsumer for reading partitions directly. Imported lazily by name so that
`import broker.client.group_dirs` does not pull in confluent-kafka."""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Producer": "broker.client.producer",
    "ConsumerConnector": "broker.client.consumer_connector",
    "KafkaStream": "broker.client.kafka_stream",
    "SimpleConsumer": "broker.client.simple_consumer",
    "Message": "broker.client.message",
    "MessageAndMetadata": "broker.client.message",
    "MessageSetProducer": "broker.client.message_set_producer",
    "MessageSetConsumer": "broker.client.message_set_consumer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'broker.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

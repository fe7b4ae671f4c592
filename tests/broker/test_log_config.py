"""LogConfig from Kafka-named topic configs."""

from __future__ import annotations

import pytest

from ferry.wire.log_config import LogConfig


def test_defaults_match_kafka() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.retention_ms == 7 * 24 * 3600 * 1000
    assert c.retention_bytes == -1
    assert c.max_message_bytes == 1_048_588
    assert not c.consumers_see_unflushed


def test_from_topic_config_overlays_defaults() -> None:
    base = LogConfig(flush_interval_ms=50)
    c = LogConfig.from_topic_config(
        {"retention.ms": "1000", "retention.bytes": "5000", "segment.bytes": "4096", "segment.ms": "60000",
         "flush.messages": "7", "max.message.bytes": "2048", "consumers.see.unflushed": "true",
         "cleanup.policy": "delete", "compression.type": "producer"},
        base,
    )
    assert (c.retention_ms, c.retention_bytes, c.segment_bytes, c.segment_ms) == (1000, 5000, 4096, 60000)
    assert (c.flush_interval_messages, c.flush_interval_ms, c.max_message_bytes) == (7, 50, 2048)
    assert c.consumers_see_unflushed is True
    assert LogConfig.from_topic_config(None, base) is base


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("retention.ms", "soon", "retention.ms: expected an integer"),
        ("segment.bytes", "10", "segment.bytes: 10 is out of range"),
        ("segment.bytes", str(1 << 40), "segment.bytes"),
        ("flush.messages", "0", "flush.messages: 0 is out of range"),
        ("retention.bytes", "-2", "retention.bytes"),
        ("consumers.see.unflushed", "yes", "consumers.see.unflushed: expected true or false"),
    ],
)
def test_bad_values_name_the_setting(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LogConfig.from_topic_config({name: value})


def test_constructor_validates() -> None:
    with pytest.raises(ValueError, match="segment.ms"):
        LogConfig(segment_ms=0)

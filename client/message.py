"""Message types of the client API: what a producer sends and what a stream yields."""

from __future__ import annotations

from typing import NamedTuple


class Message(NamedTuple):
    """One message of a message set (``Producer.send_message_set``); plain ``bytes`` also work."""

    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int | None = None  # event time; None = now
    headers: dict[str, bytes] | None = None
    partition: int | None = None


class MessageAndMetadata(NamedTuple):
    """What a KafkaStream yields: the message plus where it came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # ms since the epoch (event time), -1 if the record has none
    headers: list[tuple[str, bytes]] | None

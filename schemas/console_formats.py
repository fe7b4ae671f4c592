"""`--value-format avro` for the console producer and consumer (kafka-avro-console-producer/consumer).

JSON lines in, registry-framed Avro out (magic byte 0, the 4-byte schema id, the Avro body: schemas/wire.py),
and back. The console commands live in ferry.client (a lower layer), so the composition root (ferry/cli.py)
hands them this module as ``args.value_formats``; every failure here is a ValueError whose message a console
user can act on (line, field, subject), so the commands need not know the registry's error classes.

The producer validates the whole input before the first message is sent: a console user who pipes a file in
expects all of it or none of it, and a half-sent file with a bad line in the middle is the worst outcome.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid
from collections.abc import Callable, Iterable

from ferry.schemas.errors import SchemaError
from ferry.schemas.registry import SchemaRegistry, subject_for_topic
from ferry.schemas.wire import AvroDeserializer, AvroSerializer


class ValueFormatError(ValueError):
    """A line that cannot become an Avro message, or a payload that cannot be printed (the message says which)."""


def open_registry(zookeeper: str) -> SchemaRegistry:
    """The registry of the cluster at ``zookeeper``, read-only (a console tool leaves no znodes behind)."""
    try:
        return SchemaRegistry(zookeeper, read_only=True)
    except Exception as exc:  # kazoo's timeouts and ferry's RegistryError alike: one line for the user
        raise ValueError(f"schema registry at {zookeeper}: {type(exc).__name__}: {exc}") from None


def encode_lines(registry: SchemaRegistry, subject: str | None, topic: str,
                 lines: Iterable[tuple[int, bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """(lineno, value JSON, key) -> [(framed Avro value, key)] with the latest schema of ``subject`` (default:
    the topic's subject). Everything is encoded before anything is returned, so a bad line stops the run with
    nothing sent. Values are plain JSON (a union takes the bare value, as the producer's writers do)."""
    subject = subject or subject_for_topic(topic)
    try:
        serializer = AvroSerializer(registry, subject)
    except SchemaError as exc:
        raise ValueFormatError(f"subject {subject!r}: {exc}") from None
    out: list[tuple[bytes, bytes | None]] = []
    for lineno, text, key in lines:
        try:
            record = json.loads(text)
        except ValueError as exc:
            raise ValueFormatError(f"line {lineno} is not JSON: {exc}") from None
        try:
            out.append((serializer.serialize(record), key))
        except SchemaError as exc:  # SerializationError: fastavro's validation names the field
            raise ValueFormatError(f"line {lineno}: {exc}") from None
    return out


def _json_default(value: object) -> object:
    """Avro values JSON has no type for: bytes as base64 (lossless), times as ISO 8601, decimals as strings."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    raise TypeError(f"cannot print {type(value).__name__} as JSON")


def json_decoder(registry: SchemaRegistry) -> Callable[[bytes | None], bytes]:
    """A function: framed Avro payload -> one JSON line (bytes, no newline), decoded with the writer's schema;
    a null value prints `null`."""
    deserializer = AvroDeserializer(registry)

    def decode(payload: bytes | None) -> bytes:
        if payload is None:
            return b"null"
        try:
            record = deserializer.deserialize(payload)
        except SchemaError as exc:
            raise ValueFormatError(f"value is not readable Avro: {exc}") from None
        return json.dumps(record, default=_json_default, ensure_ascii=False, separators=(",", ":")).encode()
    return decode

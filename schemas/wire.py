"""The message payload: magic byte 0, the schema id as 4 bytes big-endian, then the Avro binary body.

This is the framing Confluent's serializers use, so their tools can read ferry's topics. The schema
is never in the message: a consumer looks each id up in the registry once and caches it.
"""

from __future__ import annotations

import io
import struct

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import parse_schema
from fastavro.validation import validate

from ferry.schemas.canonical import load_schema
from ferry.schemas.compatibility import reader_problems
from ferry.schemas.errors import IncompatibleSchemaError, SerializationError, WireFormatError
from ferry.schemas.registry import SchemaRegistry

MAGIC = 0
HEADER = struct.Struct(">bI")
HEADER_SIZE = HEADER.size  # 5


def encode_header(schema_id: int) -> bytes:
    return HEADER.pack(MAGIC, schema_id)


def schema_id_of(payload: bytes | bytearray | memoryview) -> int:
    """The schema id of a payload; WireFormatError if it is not in ferry's Avro framing."""
    if payload is None:
        raise WireFormatError("payload is empty (None): not an Avro message")
    if len(payload) < HEADER_SIZE:
        raise WireFormatError(
            f"payload of {len(payload)} bytes is too short for the 5-byte header (magic byte 0 + schema id)"
        )
    magic, schema_id = HEADER.unpack_from(payload, 0)
    if magic != MAGIC:
        raise WireFormatError(f"unknown magic byte {magic} (expected {MAGIC}): not a ferry/Confluent Avro payload")
    return schema_id


class AvroSerializer:
    """Write records of one subject. With ``schema`` the schema is registered (idempotent), else the
    subject's latest version is used. ``serialize(record)`` returns the framed payload."""

    def __init__(self, registry: SchemaRegistry, subject: str, schema: str | bytes | dict | list | None = None) -> None:
        self.registry = registry
        self.subject = subject
        if schema is not None:
            self.schema_id = registry.register(subject, schema)
        else:
            self.schema_id = registry.latest(subject).id
        self.schema = registry.parsed(self.schema_id)
        self._header = encode_header(self.schema_id)

    def serialize(self, record: object) -> bytes:
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            schemaless_writer(buf, self.schema, record, strict_allow_default=True)
        except Exception as exc:
            raise SerializationError(self._explain(record, exc)) from None
        return buf.getvalue()

    __call__ = serialize

    def _explain(self, record: object, exc: Exception) -> str:
        what = f"record does not match schema id {self.schema_id} of subject {self.subject!r}"
        try:
            validate(record, self.schema, raise_errors=True)
        except Exception as detail:  # fastavro's ValidationError names the field (path.to.field is <v> ...)
            text = " ".join(str(detail).strip("[]\n ").split())
            if not text.startswith('" is <'):
                return f"{what}: {text}"
        # a missing or an extra field: validation blames the whole record, the writer names the field
        return f"{what}: {exc}"


class AvroDeserializer:
    """Decode framed payloads. Without ``reader_schema`` records come out as written; with one, each
    writer schema is resolved to it (Avro schema resolution), checked once per writer id."""

    def __init__(self, registry: SchemaRegistry, reader_schema: str | bytes | dict | list | None = None) -> None:
        self.registry = registry
        self.reader_schema = None if reader_schema is None else load_schema(reader_schema)
        self._reader_parsed = None if self.reader_schema is None else parse_schema(self.reader_schema)
        self._checked: set[int] = set()

    def deserialize(self, payload: bytes | bytearray | memoryview) -> object:
        schema_id = schema_id_of(payload)
        writer = self.registry.parsed(schema_id)  # UnknownSchemaError for an id never registered
        if self._reader_parsed is not None and schema_id not in self._checked:
            problems = reader_problems(self.reader_schema, self.registry.get(schema_id),
                                       "the reader schema", f"schema id {schema_id}")
            if problems:
                raise IncompatibleSchemaError(
                    f"the reader schema cannot read data written with schema id {schema_id}: " + "; ".join(problems),
                    problems,
                )
            self._checked.add(schema_id)
        buf = io.BytesIO(payload)
        buf.seek(HEADER_SIZE)
        try:
            record = schemaless_reader(buf, writer, self._reader_parsed)
        except Exception as exc:
            raise WireFormatError(
                f"Avro body of {len(payload) - HEADER_SIZE} bytes does not decode with schema id {schema_id}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if buf.tell() != len(payload):
            raise WireFormatError(
                f"{len(payload) - buf.tell()} bytes left over after decoding with schema id {schema_id}: "
                "the payload is corrupt or was written with another schema"
            )
        return record

    __call__ = deserialize

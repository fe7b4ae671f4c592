"""The Avro schema registry (in ZooKeeper) and the message wire format, shared by producers, the mirror
and the loaders."""

from ferry.schemas.compatibility import LEVELS, compatibility_problems, reader_problems
from ferry.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSubjectError,
    SchemaError,
    SchemaParseError,
    SerializationError,
    UnknownSchemaError,
    UnknownSubjectError,
    WireFormatError,
)
from ferry.schemas.registry import SchemaRegistry, SchemaVersion, subject_for_topic
from ferry.schemas.wire import AvroDeserializer, AvroSerializer, schema_id_of

__all__ = [
    "LEVELS",
    "AvroDeserializer",
    "AvroSerializer",
    "IncompatibleSchemaError",
    "InvalidSubjectError",
    "SchemaError",
    "SchemaParseError",
    "SchemaRegistry",
    "SchemaVersion",
    "SerializationError",
    "UnknownSchemaError",
    "UnknownSubjectError",
    "WireFormatError",
    "compatibility_problems",
    "reader_problems",
    "schema_id_of",
    "subject_for_topic",
]

"""Schema-registry errors: each message says what is wrong in terms a producer's author can act on."""

from __future__ import annotations


class SchemaError(Exception):
    """Base class of schema-registry and wire-format errors."""


class SchemaParseError(SchemaError, ValueError):
    """Not a valid Avro schema (bad JSON, unknown type, bad default, duplicate field...)."""


class IncompatibleSchemaError(SchemaError):
    """A new schema breaks the subject's compatibility level; ``problems`` lists each reason."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


class InvalidSubjectError(SchemaError, ValueError):
    """A subject name that cannot be a znode name (or is otherwise refused)."""


class UnknownSubjectError(SchemaError, KeyError):
    """No schema was ever registered under this subject (or no such version)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownSchemaError(SchemaError, KeyError):
    """No schema has this id."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class WireFormatError(SchemaError, ValueError):
    """A payload that is not magic byte 0 + 4-byte schema id + Avro body, or whose body does not decode."""


class SerializationError(SchemaError, ValueError):
    """A record that does not fit the schema it is being written with."""


class UnknownVersionError(UnknownSubjectError):
    """The subject exists but has no such (live) version."""


class SubjectSoftDeletedError(SchemaError):
    """The subject was soft-deleted: only a permanent delete (or a new registration) applies now."""


class SubjectNotSoftDeletedError(SchemaError):
    """A permanent delete of a subject that was not soft-deleted first."""


class VersionSoftDeletedError(SchemaError):
    """The version was soft-deleted already."""


class VersionNotSoftDeletedError(SchemaError):
    """A permanent delete of a version that was not soft-deleted first."""


class OperationNotPermittedError(SchemaError):
    """Refused by the registry's or the subject's mode (READONLY, IMPORT) or an id already taken."""


class ReferenceExistsError(SchemaError):
    """A delete of a version that another registered schema references (Confluent's 42206)."""

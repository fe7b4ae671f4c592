"""Protobuf subjects: parsing ``.proto`` text (protoc from grpcio-tools) or a base64 FileDescriptorProto (what
confluent-kafka's ProtobufSerializer sends), and Protobuf compatibility.

Compatibility compares the two files' messages (a subset of Confluent's Protobuf rules, documented in
docs/schemas.md). Messages are matched by full name, and a message whose name is gone is matched to the
new message at the same position (a rename: the wire format carries no names). Fields are matched by
number, so renaming a field is fine. Refused: a removed message, a changed package, a field whose
wire type changes (int32/int64/uint32/uint64/bool share varints; sint32/sint64; fixed32/sfixed32;
fixed64/sfixed64; string/bytes/messages share length-delimited), a field whose message or enum type
changes, a required field added or removed, a field moved into or out of a oneof. Adding and removing
optional fields and enum values is fine. The rules are symmetric, so every level applies them alike.
"""

from __future__ import annotations

import base64
import binascii
import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from ferry.schemas.errors import SchemaParseError

FDP = descriptor_pb2.FieldDescriptorProto
_WIRE_GROUPS = [
    {FDP.TYPE_INT32, FDP.TYPE_INT64, FDP.TYPE_UINT32, FDP.TYPE_UINT64, FDP.TYPE_BOOL, FDP.TYPE_ENUM},
    {FDP.TYPE_SINT32, FDP.TYPE_SINT64},
    {FDP.TYPE_FIXED32, FDP.TYPE_SFIXED32},
    {FDP.TYPE_FIXED64, FDP.TYPE_SFIXED64},
    {FDP.TYPE_STRING, FDP.TYPE_BYTES},
]
_PROTOC_TIMEOUT = 60.0
FILE_NAME = "schema.proto"
BUILTIN_PREFIXES = ("google/protobuf/", "google/type/", "confluent/")  # shipped with protoc / the clients


Imports = tuple[tuple[str, descriptor_pb2.FileDescriptorProto], ...]  # (import file name, its descriptor)


def load_protobuf(text: str, imports: Imports = ()) -> tuple[str, descriptor_pb2.FileDescriptorProto]:
    """The canonical text and FileDescriptorProto of a Protobuf schema (``.proto`` text or base64 descriptor);
    ``imports`` are the files its references resolve to (schema references), dependencies first."""
    descriptor = _from_base64(text)
    if descriptor is not None:
        known = {name for name, _ in imports}
        missing = [d for d in descriptor.dependency if d not in known and not d.startswith(BUILTIN_PREFIXES)]
        if missing:
            raise SchemaParseError(f"Invalid Protobuf schema: import {missing[0]!r} is not among the schema's "
                                   "references")
        return base64.standard_b64encode(descriptor.SerializeToString(deterministic=True)).decode("ascii"), descriptor
    text = text.replace("\r\n", "\n").strip() + "\n"
    return text, _compile(text, imports)


def serialized(descriptor: descriptor_pb2.FileDescriptorProto) -> str:
    """The base64 FileDescriptorProto (``?format=serialized``, as Confluent's clients ask for it)."""
    return base64.standard_b64encode(descriptor.SerializeToString(deterministic=True)).decode("ascii")


def _from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    compact = text.strip()
    if not compact or any(c.isspace() for c in compact):
        return None
    try:
        raw = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    descriptor = descriptor_pb2.FileDescriptorProto()
    try:
        descriptor.ParseFromString(raw)
    except DecodeError:
        return None
    if not descriptor.message_type and not descriptor.enum_type:
        return None
    return descriptor


def _compile(text: str, imports: Imports = ()) -> descriptor_pb2.FileDescriptorProto:
    import grpc_tools  # protoc and the well-known .proto files ship with grpcio-tools

    includes = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="ferry-proto-") as work:
        with open(os.path.join(work, FILE_NAME), "w", encoding="utf-8") as f:
            f.write(text)
        out = os.path.join(work, "out.pb")
        extra = []
        if imports:  # referenced files, as descriptors named by their import path (protoc resolves from them)
            given = descriptor_pb2.FileDescriptorSet()
            for name, imported in imports:
                copy = given.file.add()
                copy.CopyFrom(imported)
                copy.name = name
            with open(os.path.join(work, "imports.pb"), "wb") as f:
                f.write(given.SerializeToString())
            extra = [f"--descriptor_set_in={os.path.join(work, 'imports.pb')}"]
        try:
            proc = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{work}", f"-I{includes}", *extra,
                                   f"--descriptor_set_out={out}", FILE_NAME],
                                  capture_output=True, text=True, timeout=_PROTOC_TIMEOUT, cwd=work)
        except subprocess.TimeoutExpired:
            raise SchemaParseError("Invalid Protobuf schema: protoc did not finish in time") from None
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().replace(work + os.sep, "").splitlines()
            raise SchemaParseError("Invalid Protobuf schema: " + ("; ".join(detail) or "protoc refused it"))
        files = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            files.ParseFromString(f.read())
    return files.file[-1]


def protobuf_problems(new: descriptor_pb2.FileDescriptorProto, old: descriptor_pb2.FileDescriptorProto,
                      old_label: str) -> list[str]:
    """Why ``new`` and ``old`` cannot read each other's messages (empty: they can)."""
    problems = []
    if new.package != old.package:
        problems.append(f"package changed from {old.package!r} ({old_label}) to {new.package!r}")
    matched = _match(list(old.message_type), list(new.message_type), _scope(old.package), _scope(new.package))
    renamed = {old_name: new_name for old_name, (_, new_msg, new_name) in matched.items() if new_msg is not None}
    for old_name, (old_msg, new_msg, _) in matched.items():
        if new_msg is None:
            problems.append(f"message {old_name.lstrip('.')} ({old_label}) was removed")
        else:
            problems += _fields(old_msg, new_msg, old_name, old_label, renamed)
    return problems


def _scope(package: str) -> str:
    return f".{package}" if package else ""


def _match(old: list[descriptor_pb2.DescriptorProto], new: list[descriptor_pb2.DescriptorProto], old_scope: str,
           new_scope: str) -> dict[str, tuple]:
    """Old message full name -> (old message, new message or None, new full name), nested ones included."""
    out: dict[str, tuple] = {}
    by_name = {m.name: m for m in new}
    old_names = {m.name for m in old}
    for index, msg in enumerate(old):
        match = by_name.get(msg.name)
        if match is None and index < len(new) and new[index].name not in old_names:
            match = new[index]  # renamed in place: the wire format carries no message names
        old_name = f"{old_scope}.{msg.name}"
        new_name = f"{new_scope}.{match.name}" if match is not None else None
        out[old_name] = (msg, match, new_name)
        if match is not None:
            out.update(_match(list(msg.nested_type), list(match.nested_type), old_name, new_name))
    return out


def _fields(old: descriptor_pb2.DescriptorProto, new: descriptor_pb2.DescriptorProto, name: str, old_label: str, renamed: dict[str, str]) -> list[str]:
    problems = []
    new_fields = {f.number: f for f in new.field}
    old_numbers = {f.number for f in old.field}
    for field in old.field:
        where = f"{name.lstrip('.')} field {field.number} ({field.name})"
        other = new_fields.get(field.number)
        if other is None:
            if field.label == FDP.LABEL_REQUIRED:
                problems.append(f"{where}: required field removed ({old_label} requires it)")
            continue
        problems += _field_change(field, other, where, old_label, renamed)
    for field in new.field:
        if field.number not in old_numbers and field.label == FDP.LABEL_REQUIRED:
            problems.append(f"{name.lstrip('.')} field {field.number} ({field.name}): required field added "
                            f"({old_label}'s messages lack it)")
    return problems


def _field_change(old: FDP, new: FDP, where: str, old_label: str, renamed: dict[str, str]) -> list[str]:
    problems = []
    if old.type != new.type and not any(old.type in g and new.type in g for g in _WIRE_GROUPS):
        problems.append(f"{where}: type changed from {FDP.Type.Name(old.type)} ({old_label}) to "
                        f"{FDP.Type.Name(new.type)}, a different wire type")
    elif old.type_name and renamed.get(old.type_name, old.type_name) != new.type_name \
            and old.type_name != new.type_name:
        problems.append(f"{where}: type changed from {old.type_name.lstrip('.')} ({old_label}) to "
                        f"{new.type_name.lstrip('.')}")
    if (old.label == FDP.LABEL_REQUIRED) != (new.label == FDP.LABEL_REQUIRED):
        problems.append(f"{where}: changed between required and not required")
    if (old.label == FDP.LABEL_REPEATED) != (new.label == FDP.LABEL_REPEATED) and old.type in _WIRE_GROUPS[4]:
        problems.append(f"{where}: changed between repeated and singular")
    if old.HasField("oneof_index") != new.HasField("oneof_index") and not new.proto3_optional \
            and not old.proto3_optional:
        problems.append(f"{where}: moved {'out of' if old.HasField('oneof_index') else 'into'} a oneof")
    return problems

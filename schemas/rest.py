"""The schema registry's REST API, as Confluent Schema Registry speaks it, over ferry's ZooKeeper registry.

Serializers, Connect, Flink and Spark integrations (and `confluent_kafka.schema_registry`) talk to a schema
registry over HTTP; ferry's payloads already use the same framing (magic 0 + 4-byte id + body), so this
facade makes those tools work against the same ids and compatibility rules as `ferry schemas`: subjects and
versions of AVRO, JSON and PROTOBUF schemas (with references to other subjects' versions), schemas by id, lookup, compatibility tests and config, soft and
permanent deletes, /mode and /contexts. Every error is Confluent's ``{"error_code", "message"}`` body
(rest_errors.py has the codes).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ferry.schemas.compatibility import LEVELS
from ferry.schemas.deletion import SubjectDeletion
from ferry.schemas.errors import UnknownSubjectError
from ferry.schemas.modes import MODES
from ferry.schemas.references import SchemaReference, parse_references
from ferry.schemas.registry import SchemaRegistry, SchemaVersion
from ferry.schemas.rest_errors import MEDIA_TYPE, RestError, answer, install_error_handlers, json_body
from ferry.schemas.schema_types import AVRO, PROTOBUF, SCHEMA_TYPES, TypedSchema, typed_problems
from ferry.wire.http_security import HttpSecurity

DEFAULT_CONTEXT = "."
_CONTEXT_PREFIX = ":.:"  # a subject qualified with the default context


def unqualified(subject: str) -> str:
    """``:.:orders`` (the default context, spelled out) is the subject ``orders``."""
    return subject[len(_CONTEXT_PREFIX):] if subject.startswith(_CONTEXT_PREFIX) else subject


def _schema_body(typed: TypedSchema, fmt: str | None = None) -> dict[str, object]:
    """``{schema[, schemaType][, references]}``, as Confluent answers a schema."""
    body: dict[str, object] = {"schema": typed.serialized() if fmt == "serialized" else typed.text}
    if typed.schema_type != AVRO:
        body["schemaType"] = typed.schema_type
    if typed.references:
        body["references"] = [r.as_dict() for r in typed.references]
    return body


def _version_body(version: SchemaVersion, typed: TypedSchema, fmt: str | None = None) -> dict[str, object]:
    return {"subject": version.subject, "version": version.version, "id": version.id, **_schema_body(typed, fmt)}


def _raw(typed: TypedSchema) -> object:
    """The schema itself (``.../schema`` routes): JSON for Avro and JSON Schema, the text for Protobuf."""
    return typed.text if typed.schema_type == PROTOBUF else typed.value


def _compatibility_body(problems: list[str], verbose: bool) -> dict[str, object]:
    body: dict[str, object] = {"is_compatible": not problems}
    if verbose:
        body["messages"] = problems
    return body


class RegistrationRequest:
    """A body ``{"schema": "...", "schemaType": "JSON", "references": [], "id": n, "version": n}``."""

    def __init__(self, body: object) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise RestError(422, 42201, "Invalid schema: the body must be {\"schema\": \"<schema as a string>\", "
                            "\"schemaType\": \"AVRO|JSON|PROTOBUF\"}")
        for key in ("id", "version"):
            value = body.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise RestError(422, 42202 if key == "version" else 42201, f"Invalid {key} {value!r}: a positive integer")
        self.text: str = body["schema"]
        self.schema_type: str = body.get("schemaType") or AVRO
        self.id: int | None = body.get("id")
        self.version: int | None = body.get("version")
        self.references: tuple[SchemaReference, ...] = parse_references(body.get("references"))

    @classmethod
    async def of(cls, request: Request) -> RegistrationRequest:
        return cls(await json_body(request))


def _parse_version(version: str, known: list[int]) -> int:
    """A path's version ("latest", "-1" or a number) among a subject's ``known`` versions."""
    if version in ("latest", "-1"):
        return known[-1]
    try:
        number = int(version)
        if number < 1:
            raise ValueError(number)
    except ValueError:
        raise RestError(422, 42202, f"The specified version '{version}' is not a valid version id. "
                        "Allowed values are between [1, 2^31-1] and the string \"latest\"") from None
    if number not in known:
        raise RestError(404, 40402, f"Version {number} not found.")
    return number


def _page(items: list, offset: int, limit: int) -> list:
    items = items[max(offset, 0):]
    return items[:limit] if limit >= 0 else items


class SubjectRoutes:
    """Subjects and their versions: list, read, register, look up, delete."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry
        self._deletion = SubjectDeletion(registry)

    def _versions(self, subject: str, deleted: bool = False) -> list[int]:
        try:
            return self._registry.versions(subject, deleted)
        except UnknownSubjectError:
            raise RestError(404, 40401, f"Subject '{subject}' not found.") from None

    def _version(self, subject: str, version: str, deleted: bool = False) -> SchemaVersion:
        number = _parse_version(version, self._versions(subject, deleted))
        return self._registry.version(subject, number, deleted)

    def subjects(self, deleted: bool = False, deleted_only: bool = False, subjectPrefix: str = "",  # noqa: N803
                 offset: int = 0, limit: int = -1) -> JSONResponse:
        names = self._registry.subjects(deleted or deleted_only)
        if deleted_only:
            live = set(self._registry.subjects())
            names = [s for s in names if s not in live]
        prefix = unqualified(subjectPrefix)
        return answer(_page([s for s in names if s.startswith(prefix)], offset, limit))

    def versions(self, subject: str, deleted: bool = False, offset: int = 0, limit: int = -1) -> JSONResponse:
        return answer(_page(self._versions(unqualified(subject), deleted), offset, limit))

    def version(self, subject: str, version: str, deleted: bool = False, format: str | None = None  # noqa: A002
                ) -> JSONResponse:
        found = self._version(unqualified(subject), version, deleted)
        return answer(_version_body(found, self._registry.get_typed(found.id), format))

    def version_schema(self, subject: str, version: str, deleted: bool = False) -> JSONResponse:
        found = self._version(unqualified(subject), version, deleted)
        return answer(_raw(self._registry.get_typed(found.id)))

    def referenced_by(self, subject: str, version: str) -> JSONResponse:
        """Ids of the (live) schemas whose references name this version."""
        found = self._version(unqualified(subject), version)
        return answer(self._registry.references.referenced_by(found.subject, found.version))

    async def register(self, subject: str, request: Request) -> JSONResponse:
        body = await RegistrationRequest.of(request)
        version = self._registry.register_version(unqualified(subject), body.text, body.schema_type, body.id,
                                                  body.version, body.references)
        return answer(_version_body(version, self._registry.get_typed(version.id)))

    async def lookup(self, subject: str, request: Request, deleted: bool = False) -> JSONResponse:
        subject = unqualified(subject)
        body = await RegistrationRequest.of(request)
        self._versions(subject, deleted)
        found = self._registry.lookup(subject, body.text, body.schema_type, deleted, body.references)
        if found is None:
            raise RestError(404, 40403, "Schema not found")
        return answer(_version_body(found, self._registry.get_typed(found.id)))

    def delete(self, subject: str, permanent: bool = False) -> JSONResponse:
        return answer(self._deletion.delete_subject(unqualified(subject), permanent))

    def delete_version(self, subject: str, version: str, permanent: bool = False) -> JSONResponse:
        subject = unqualified(subject)
        entries = self._registry.version_entries(subject)
        if not entries:
            raise RestError(404, 40401, f"Subject '{subject}' not found.")
        numbers = [v for v, _, deleted in entries if permanent or not deleted]
        if version in ("latest", "-1") and not numbers:
            raise RestError(404, 40402, f"Version {version} not found.")
        number = _parse_version(version, numbers) if version in ("latest", "-1") else \
            _parse_version(version, [v for v, _, _ in entries])
        return answer(self._deletion.delete_version(subject, number, permanent))


class CompatibilityRoutes:
    """POST /compatibility/...: would a schema be accepted?"""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    async def test_version(self, subject: str, version: str, request: Request, verbose: bool = False
                           ) -> JSONResponse:
        subject = unqualified(subject)
        body = await RegistrationRequest.of(request)
        known = self._registry.versions(subject) if self._registry.version_entries(subject) else []
        if not known:
            raise RestError(404, 40401, f"Subject '{subject}' not found.")
        target = self._registry.version(subject, _parse_version(version, known))
        if target.version == known[-1]:
            problems = self._registry.check(subject, body.text, body.schema_type, body.references)
        else:
            single = self._registry.compatibility(subject).replace("_TRANSITIVE", "")
            parsed = self._registry.parse(body.text, body.schema_type, body.references)
            problems = typed_problems(single, parsed, [(f"version {target.version}",
                                                               self._registry.get_typed(target.id))])
        return answer(_compatibility_body(problems, verbose))

    async def test_all(self, subject: str, request: Request, verbose: bool = False) -> JSONResponse:
        body = await RegistrationRequest.of(request)
        problems = self._registry.check(unqualified(subject), body.text, body.schema_type, body.references)
        return answer(_compatibility_body(problems, verbose))


class SchemaRoutes:
    """Schemas by their global id, and where each id is used."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def _uses(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        self._registry.get_typed(schema_id)
        return [(s, v) for s in self._registry.subjects(deleted)
                for v, sid, is_deleted in self._registry.version_entries(s)
                if sid == schema_id and (deleted or not is_deleted)]

    def types(self) -> JSONResponse:
        return answer(list(SCHEMA_TYPES))

    def by_id(self, schema_id: int, format: str | None = None, subject: str | None = None  # noqa: A002
              ) -> JSONResponse:
        return answer(_schema_body(self._registry.get_typed(schema_id), format))

    def raw_by_id(self, schema_id: int) -> JSONResponse:
        return answer(_raw(self._registry.get_typed(schema_id)))

    def subjects_of(self, schema_id: int, deleted: bool = False) -> JSONResponse:
        return answer(sorted({s for s, _ in self._uses(schema_id, deleted)}))

    def versions_of(self, schema_id: int, deleted: bool = False) -> JSONResponse:
        return answer([{"subject": s, "version": v} for s, v in self._uses(schema_id, deleted)])


class ConfigRoutes:
    """The compatibility level: global, and per subject."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    @staticmethod
    async def _level_of(request: Request) -> str:
        body = await json_body(request)
        level = body.get("compatibility", body.get("compatibilityLevel")) if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise RestError(422, 42203, f"Invalid compatibility level. Valid values are: {', '.join(LEVELS)}")
        return level.upper()

    def _no_config(self, subject: str) -> RestError:
        return RestError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")

    def get_global(self) -> JSONResponse:
        return answer({"compatibilityLevel": self._registry.compatibility()})

    async def put_global(self, request: Request) -> JSONResponse:
        level = await self._level_of(request)
        self._registry.set_compatibility(level)
        return answer({"compatibility": level})

    def get_subject(self, subject: str, defaultToGlobal: bool = False) -> JSONResponse:  # noqa: N803 - Confluent's name
        subject = unqualified(subject)
        override = self._registry.compatibility_override(subject)
        if override is None and not defaultToGlobal:
            raise self._no_config(subject)
        return answer({"compatibilityLevel": override or self._registry.compatibility()})

    async def put_subject(self, subject: str, request: Request) -> JSONResponse:
        level = await self._level_of(request)
        self._registry.set_compatibility(level, unqualified(subject))
        return answer({"compatibility": level})

    def delete_subject(self, subject: str) -> JSONResponse:
        subject = unqualified(subject)
        override = self._registry.compatibility_override(subject)
        if override is None:
            raise self._no_config(subject)
        self._registry.set_compatibility(None, subject)
        return answer({"compatibility": override})


class ModeRoutes:
    """/mode: READWRITE, READONLY or IMPORT, for the registry and per subject."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    @staticmethod
    async def _mode_of(request: Request) -> str:
        body = await json_body(request)
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RestError(422, 42204, f"Invalid mode. Valid values are: {', '.join(MODES)}")
        return mode.upper()

    def get_global(self) -> JSONResponse:
        return answer({"mode": self._registry.modes.mode()})

    async def put_global(self, request: Request, force: bool = False) -> JSONResponse:
        return answer({"mode": self._registry.set_mode(await self._mode_of(request), None, force)})

    def get_subject(self, subject: str, defaultToGlobal: bool = False) -> JSONResponse:  # noqa: N803 - Confluent's name
        subject = unqualified(subject)
        override = self._registry.modes.override(subject)
        if override is None and not defaultToGlobal:
            raise RestError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
        return answer({"mode": override or self._registry.modes.mode()})

    async def put_subject(self, subject: str, request: Request, force: bool = False) -> JSONResponse:
        mode = await self._mode_of(request)
        return answer({"mode": self._registry.set_mode(mode, unqualified(subject), force)})

    def delete_subject(self, subject: str) -> JSONResponse:
        subject = unqualified(subject)
        previous = self._registry.modes.delete_override(subject)
        if previous is None:
            raise RestError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
        return answer({"mode": previous})


class ContextRoutes:
    """/contexts: the default context, and each ``:.name:`` prefix used by a subject."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def contexts(self, offset: int = 0, limit: int = -1) -> JSONResponse:
        named = {s.split(":")[1] for s in self._registry.subjects() if s.startswith(":.") and s.count(":") >= 2}
        return answer(_page([DEFAULT_CONTEXT, *sorted(named - {DEFAULT_CONTEXT})], offset, limit))


def _root() -> JSONResponse:
    return answer({})


def create_app(registry: SchemaRegistry) -> FastAPI:
    """The REST application over one cluster's registry (shared, thread-safe)."""
    app = FastAPI(title="ferry schema registry", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    subjects, schemas, config = SubjectRoutes(registry), SchemaRoutes(registry), ConfigRoutes(registry)
    compatibility, modes, contexts = CompatibilityRoutes(registry), ModeRoutes(registry), ContextRoutes(registry)
    routes: list[tuple[str, str, Callable[..., object]]] = [
        ("GET", "/", _root),
        ("GET", "/schemas/types", schemas.types),
        ("GET", "/subjects", subjects.subjects),
        ("GET", "/subjects/{subject}/versions", subjects.versions),
        ("GET", "/subjects/{subject}/versions/{version}", subjects.version),
        ("GET", "/subjects/{subject}/versions/{version}/schema", subjects.version_schema),
        ("GET", "/subjects/{subject}/versions/{version}/referencedby", subjects.referenced_by),
        ("POST", "/subjects/{subject}/versions", subjects.register),
        ("POST", "/subjects/{subject}", subjects.lookup),
        ("DELETE", "/subjects/{subject}", subjects.delete),
        ("DELETE", "/subjects/{subject}/versions/{version}", subjects.delete_version),
        ("GET", "/schemas/ids/{schema_id}", schemas.by_id),
        ("GET", "/schemas/ids/{schema_id}/schema", schemas.raw_by_id),
        ("GET", "/schemas/ids/{schema_id}/subjects", schemas.subjects_of),
        ("GET", "/schemas/ids/{schema_id}/versions", schemas.versions_of),
        ("POST", "/compatibility/subjects/{subject}/versions/{version}", compatibility.test_version),
        ("POST", "/compatibility/subjects/{subject}/versions", compatibility.test_all),
        ("GET", "/config", config.get_global),
        ("PUT", "/config", config.put_global),
        ("GET", "/config/{subject}", config.get_subject),
        ("PUT", "/config/{subject}", config.put_subject),
        ("DELETE", "/config/{subject}", config.delete_subject),
        ("GET", "/mode", modes.get_global),
        ("PUT", "/mode", modes.put_global),
        ("GET", "/mode/{subject}", modes.get_subject),
        ("PUT", "/mode/{subject}", modes.put_subject),
        ("DELETE", "/mode/{subject}", modes.delete_subject),
        ("GET", "/contexts", contexts.contexts),
    ]
    for method, path, endpoint in routes:
        app.add_api_route(path, endpoint, methods=[method])
    return app


def serve(registry: SchemaRegistry, host: str, port: int, security: HttpSecurity | None = None) -> None:
    """Run the REST API until interrupted (uvicorn, one process; the registry's ZooKeeper does the rest), with
    HTTPS and authentication as ``security`` says."""
    import uvicorn  # only `ferry schemas serve` needs the server: not loaded with the module

    security = security or HttpSecurity()
    uvicorn.run(security.asgi(create_app(registry)), host=host, port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=5,  # a client keeping its connection alive does not hold a stop
                **security.uvicorn_options())


__all__ = ["MEDIA_TYPE", "RestError", "create_app", "serve"]

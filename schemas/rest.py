"""The schema registry's REST API, as Confluent Schema Registry speaks it, over ferry's ZooKeeper registry.

Serializers, Connect, Flink and Spark integrations (and `confluent_kafka.schema_registry`) talk to a schema
registry over HTTP; ferry's payloads already use the same framing (magic 0 + 4-byte id + Avro body), so this
facade makes those tools work against the same ids and compatibility rules as `ferry schemas`. It serves
the subset clients use: subjects and versions, schemas by id, lookup, compatibility tests and config.
Errors carry Confluent's codes (40401 subject not found, 40402 version not found, 40403 schema not
found, 409 incompatible, 42201 invalid schema, 42202 invalid version, 42203 invalid level, 50001 store).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from kazoo.exceptions import KazooException

from ferry.schemas.canonical import AvroSchema, canonical_json, load_schema
from ferry.schemas.compatibility import LEVELS, compatibility_problems
from ferry.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSubjectError,
    SchemaParseError,
    UnknownSchemaError,
)
from ferry.schemas.registry import SchemaRegistry, SchemaVersion
from ferry.wire.http_security import HttpSecurity

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


class RestError(Exception):
    """An answer other than 200: HTTP status, Confluent error code, message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _answer(body: object, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


def _subject_missing(subject: str) -> RestError:
    return RestError(404, 40401, f"Subject '{subject}' not found.")


def _schema_missing() -> RestError:
    return RestError(404, 40403, "Schema not found")


def _no_subject_config(subject: str) -> RestError:
    return RestError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def _schema_text(version: SchemaVersion) -> str:
    return canonical_json(version.schema)


def _version_body(version: SchemaVersion) -> dict[str, object]:
    return {"subject": version.subject, "version": version.version, "id": version.id,
            "schema": _schema_text(version)}


def _compatibility_body(problems: list[str], verbose: bool) -> dict[str, object]:
    body: dict[str, object] = {"is_compatible": not problems}
    if verbose:
        body["messages"] = problems
    return body


async def _schema_of(request: Request) -> AvroSchema:
    """The canonical schema of a request body ``{"schema": "...", "schemaType": "AVRO"}``."""
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise RestError(422, 42201, "Invalid schema: the request body is not JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RestError(422, 42201, "Invalid schema: the body must be {\"schema\": \"<schema JSON as a string>\"}")
    kind = body.get("schemaType", "AVRO") or "AVRO"
    if kind != "AVRO":
        raise RestError(422, 42201, f"Invalid schema: schemaType {kind!r} is not supported (AVRO only)")
    if body.get("references"):
        raise RestError(422, 42201, "Invalid schema: schema references are not supported")
    try:
        return load_schema(body["schema"])
    except SchemaParseError as e:
        raise RestError(422, 42201, f"Invalid schema: {e}") from None


async def _level_of(request: Request) -> str:
    """The compatibility level of a request body ``{"compatibility": "BACKWARD"}``."""
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    level = body.get("compatibility") if isinstance(body, dict) else None
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise RestError(422, 42203, f"Invalid compatibility level. Valid values are: {', '.join(LEVELS)}")
    return level.upper()


def _parse_version(version: str, known: list[int]) -> int:
    """A path's version ("latest", "-1" or a number) among a subject's ``known`` versions."""
    if version in ("latest", "-1"):
        return known[-1]
    try:
        number = int(version)
    except ValueError:
        raise RestError(422, 42202, f"The specified version '{version}' is not a valid version id. "
                        "Allowed values are between [1, 2^31-1] and the string \"latest\"") from None
    if number not in known:
        raise RestError(404, 40402, f"Version {number} not found.")
    return number


class SubjectRoutes:
    """Subjects and their versions: list, read, register, look up, test compatibility."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def _versions(self, subject: str) -> list[int]:
        try:
            return self._registry.versions(subject)
        except KeyError:
            raise _subject_missing(subject) from None

    def _version(self, subject: str, version: str) -> SchemaVersion:
        return self._registry.version(subject, _parse_version(version, self._versions(subject)))

    def subjects(self) -> JSONResponse:
        return _answer(self._registry.subjects())

    def versions(self, subject: str) -> JSONResponse:
        return _answer(self._versions(subject))

    def version(self, subject: str, version: str) -> JSONResponse:
        return _answer(_version_body(self._version(subject, version)))

    def version_schema(self, subject: str, version: str) -> JSONResponse:
        return _answer(self._version(subject, version).schema)

    async def register(self, subject: str, request: Request) -> JSONResponse:
        schema = await _schema_of(request)
        try:
            version = self._registry.register_version(subject, schema)
        except IncompatibleSchemaError as e:
            raise RestError(409, 409, "Schema being registered is incompatible with an earlier schema for "
                            f"subject \"{subject}\", details: {e.problems}") from None
        return _answer({"id": version.id, "subject": version.subject, "version": version.version,
                        "schema": _schema_text(version)})

    async def lookup(self, subject: str, request: Request) -> JSONResponse:
        schema = await _schema_of(request)
        self._versions(subject)
        found = self._registry.lookup(subject, schema)
        if found is None:
            raise _schema_missing()
        return _answer(_version_body(found))

    def delete(self, subject: str) -> JSONResponse:
        self._versions(subject)
        # ids are global and mirrored messages depend on them: deleting is refused, not faked
        raise RestError(405, 40501, "Deleting subjects is not supported by ferry's registry (schema ids are "
                        "permanent: mirrored and loaded messages refer to them)")

    async def test_compatibility(self, subject: str, version: str, request: Request,
                                 verbose: bool = False) -> JSONResponse:
        schema = await _schema_of(request)
        target = self._version(subject, version)
        if target.version == self._versions(subject)[-1]:
            problems = self._registry.check(subject, schema)  # the subject's rule as registration applies it
        else:
            single = self._registry.compatibility(subject).replace("_TRANSITIVE", "")
            problems = compatibility_problems(single, schema, [(f"version {target.version}", target.schema)])
        return _answer(_compatibility_body(problems, verbose))

    async def test_compatibility_all(self, subject: str, request: Request, verbose: bool = False) -> JSONResponse:
        schema = await _schema_of(request)
        return _answer(_compatibility_body(self._registry.check(subject, schema), verbose))


class SchemaRoutes:
    """Schemas by their global id, and where each id is used."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def _schema(self, schema_id: int) -> AvroSchema:
        try:
            return self._registry.get(schema_id)
        except UnknownSchemaError:
            raise _schema_missing() from None

    def _uses(self, schema_id: int) -> list[tuple[str, int]]:
        self._schema(schema_id)
        registry = self._registry
        return [(s, v) for s in registry.subjects() for v in registry.versions(s)
                if registry.version(s, v).id == schema_id]

    def types(self) -> JSONResponse:
        return _answer(["AVRO"])

    def by_id(self, schema_id: int) -> JSONResponse:
        return _answer({"schema": canonical_json(self._schema(schema_id))})

    def raw_by_id(self, schema_id: int) -> JSONResponse:
        return _answer(self._schema(schema_id))

    def subjects_of(self, schema_id: int) -> JSONResponse:
        return _answer(sorted({s for s, _ in self._uses(schema_id)}))

    def versions_of(self, schema_id: int) -> JSONResponse:
        return _answer([{"subject": s, "version": v} for s, v in self._uses(schema_id)])


class ConfigRoutes:
    """The compatibility level: global, and per subject."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def get_global(self) -> JSONResponse:
        return _answer({"compatibilityLevel": self._registry.compatibility()})

    async def put_global(self, request: Request) -> JSONResponse:
        level = await _level_of(request)
        self._registry.set_compatibility(level)
        return _answer({"compatibility": level})

    def get_subject(self, subject: str, defaultToGlobal: bool = False) -> JSONResponse:  # noqa: N803 - Confluent's name
        override = self._registry.compatibility_override(subject)
        if override is None and not defaultToGlobal:
            raise _no_subject_config(subject)
        return _answer({"compatibilityLevel": override or self._registry.compatibility()})

    async def put_subject(self, subject: str, request: Request) -> JSONResponse:
        level = await _level_of(request)
        self._registry.set_compatibility(level, subject)
        return _answer({"compatibility": level})

    def delete_subject(self, subject: str) -> JSONResponse:
        override = self._registry.compatibility_override(subject)
        if override is None:
            raise _no_subject_config(subject)
        self._registry.set_compatibility(None, subject)
        return _answer({"compatibility": override})


async def _rest_error(_: Request, e: RestError) -> JSONResponse:
    return _answer({"error_code": e.code, "message": e.message}, e.status)


async def _store_error(_: Request, e: KazooException) -> JSONResponse:
    return _answer({"error_code": 50001, "message": f"Error in the backend data store: {type(e).__name__}"}, 500)


async def _bad_subject(_: Request, e: InvalidSubjectError) -> JSONResponse:
    return _answer({"error_code": 42208, "message": f"Invalid subject: {e}"}, 422)


def _root() -> JSONResponse:
    return _answer({})


def create_app(registry: SchemaRegistry) -> FastAPI:
    """The REST application over one cluster's registry (shared, thread-safe)."""
    app = FastAPI(title="ferry schema registry", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(RestError, _rest_error)
    app.add_exception_handler(KazooException, _store_error)
    app.add_exception_handler(InvalidSubjectError, _bad_subject)
    subjects, schemas, config = SubjectRoutes(registry), SchemaRoutes(registry), ConfigRoutes(registry)
    routes: list[tuple[str, str, Callable[..., object]]] = [
        ("GET", "/", _root),
        ("GET", "/schemas/types", schemas.types),
        ("GET", "/subjects", subjects.subjects),
        ("GET", "/subjects/{subject}/versions", subjects.versions),
        ("GET", "/subjects/{subject}/versions/{version}", subjects.version),
        ("GET", "/subjects/{subject}/versions/{version}/schema", subjects.version_schema),
        ("POST", "/subjects/{subject}/versions", subjects.register),
        ("POST", "/subjects/{subject}", subjects.lookup),
        ("DELETE", "/subjects/{subject}", subjects.delete),
        ("GET", "/schemas/ids/{schema_id}", schemas.by_id),
        ("GET", "/schemas/ids/{schema_id}/schema", schemas.raw_by_id),
        ("GET", "/schemas/ids/{schema_id}/subjects", schemas.subjects_of),
        ("GET", "/schemas/ids/{schema_id}/versions", schemas.versions_of),
        ("POST", "/compatibility/subjects/{subject}/versions/{version}", subjects.test_compatibility),
        ("POST", "/compatibility/subjects/{subject}/versions", subjects.test_compatibility_all),
        ("GET", "/config", config.get_global),
        ("PUT", "/config", config.put_global),
        ("GET", "/config/{subject}", config.get_subject),
        ("PUT", "/config/{subject}", config.put_subject),
        ("DELETE", "/config/{subject}", config.delete_subject),
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

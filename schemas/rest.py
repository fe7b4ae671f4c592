"""The schema registry's REST API, as Confluent Schema Registry speaks it, over ferry's ZooKeeper registry.

Serializers, Connect, Flink and Spark integrations (and `confluent_kafka.schema_registry`) talk to a schema
registry over HTTP; ferry's payloads already use the same framing (magic 0 + 4-byte id + Avro body), so this
facade makes those tools work against the same ids and compatibility rules as `ferry schemas`. It serves
the subset clients use: subjects and versions, schemas by id, lookup, compatibility tests and config.
Errors carry Confluent's codes (40401 subject not found, 40402 version not found, 40403 schema not
found, 409 incompatible, 42201 invalid schema, 42202 invalid version, 42203 invalid level, 50001 store).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from kazoo.exceptions import KazooException

from ferry.schemas.canonical import canonical_json, load_schema
from ferry.schemas.compatibility import LEVELS, compatibility_problems
from ferry.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSubjectError,
    SchemaParseError,
    UnknownSchemaError,
)
from ferry.schemas.registry import SchemaRegistry, SchemaVersion

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


class RestError(Exception):
    """An answer other than 200: HTTP status, Confluent error code, message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _answer(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


def _subject_missing(subject: str) -> RestError:
    return RestError(404, 40401, f"Subject '{subject}' not found.")


def _schema_text(version: SchemaVersion) -> str:
    return canonical_json(version.schema)


def _version_body(version: SchemaVersion) -> dict[str, Any]:
    return {"subject": version.subject, "version": version.version, "id": version.id,
            "schema": _schema_text(version)}


async def _schema_of(request: Request) -> Any:
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


def create_app(registry: SchemaRegistry) -> FastAPI:
    """The REST application over one cluster's registry (shared, thread-safe)."""
    app = FastAPI(title="ferry schema registry", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(RestError)
    async def _rest_error(_: Request, e: RestError) -> JSONResponse:
        return _answer({"error_code": e.code, "message": e.message}, e.status)

    @app.exception_handler(KazooException)
    async def _store_error(_: Request, e: KazooException) -> JSONResponse:
        return _answer({"error_code": 50001, "message": f"Error in the backend data store: {type(e).__name__}"},
                       500)

    @app.exception_handler(InvalidSubjectError)
    async def _bad_subject(_: Request, e: InvalidSubjectError) -> JSONResponse:
        return _answer({"error_code": 42208, "message": f"Invalid subject: {e}"}, 422)

    def versions_of(subject: str) -> list[int]:
        try:
            return registry.versions(subject)
        except KeyError:
            raise _subject_missing(subject) from None

    def version_of(subject: str, version: str) -> SchemaVersion:
        known = versions_of(subject)
        if version == "latest" or version == "-1":
            number = known[-1]
        else:
            try:
                number = int(version)
            except ValueError:
                raise RestError(422, 42202, f"The specified version '{version}' is not a valid version id. "
                                "Allowed values are between [1, 2^31-1] and the string \"latest\"") from None
            if number not in known:
                raise RestError(404, 40402, f"Version {number} not found.")
        return registry.version(subject, number)

    @app.get("/")
    def root() -> JSONResponse:
        return _answer({})

    @app.get("/schemas/types")
    def schema_types() -> JSONResponse:
        return _answer(["AVRO"])

    @app.get("/subjects")
    def subjects() -> JSONResponse:
        return _answer(registry.subjects())

    @app.get("/subjects/{subject}/versions")
    def subject_versions(subject: str) -> JSONResponse:
        return _answer(versions_of(subject))

    @app.get("/subjects/{subject}/versions/{version}")
    def subject_version(subject: str, version: str) -> JSONResponse:
        return _answer(_version_body(version_of(subject, version)))

    @app.get("/subjects/{subject}/versions/{version}/schema")
    def subject_version_schema(subject: str, version: str) -> JSONResponse:
        return _answer(version_of(subject, version).schema)

    @app.post("/subjects/{subject}/versions")
    async def register(subject: str, request: Request) -> JSONResponse:
        schema = await _schema_of(request)
        try:
            version = registry.register_version(subject, schema)
        except IncompatibleSchemaError as e:
            raise RestError(409, 409, "Schema being registered is incompatible with an earlier schema for "
                            f"subject \"{subject}\", details: {e.problems}") from None
        return _answer({"id": version.id, "subject": version.subject, "version": version.version,
                        "schema": _schema_text(version)})

    @app.post("/subjects/{subject}")
    async def lookup(subject: str, request: Request) -> JSONResponse:
        schema = await _schema_of(request)
        versions_of(subject)
        found = registry.lookup(subject, schema)
        if found is None:
            raise RestError(404, 40403, "Schema not found")
        return _answer(_version_body(found))

    @app.get("/schemas/ids/{schema_id}")
    def schema_by_id(schema_id: int) -> JSONResponse:
        try:
            return _answer({"schema": canonical_json(registry.get(schema_id))})
        except UnknownSchemaError:
            raise RestError(404, 40403, "Schema not found") from None

    @app.get("/schemas/ids/{schema_id}/schema")
    def raw_schema_by_id(schema_id: int) -> JSONResponse:
        try:
            return _answer(registry.get(schema_id))
        except UnknownSchemaError:
            raise RestError(404, 40403, "Schema not found") from None

    def subject_versions_with(schema_id: int) -> list[tuple[str, int]]:
        try:
            registry.get(schema_id)
        except UnknownSchemaError:
            raise RestError(404, 40403, "Schema not found") from None
        return [(s, v) for s in registry.subjects() for v in registry.versions(s)
                if registry.version(s, v).id == schema_id]

    @app.get("/schemas/ids/{schema_id}/subjects")
    def subjects_of_id(schema_id: int) -> JSONResponse:
        return _answer(sorted({s for s, _ in subject_versions_with(schema_id)}))

    @app.get("/schemas/ids/{schema_id}/versions")
    def versions_of_id(schema_id: int) -> JSONResponse:
        return _answer([{"subject": s, "version": v} for s, v in subject_versions_with(schema_id)])

    @app.post("/compatibility/subjects/{subject}/versions/{version}")
    async def test_compatibility(subject: str, version: str, request: Request, verbose: bool = False) -> JSONResponse:
        schema = await _schema_of(request)
        target = version_of(subject, version)
        level = registry.compatibility(subject)
        if target.version == versions_of(subject)[-1]:
            problems = registry.check(subject, schema)  # the subject's rule as registration applies it
        else:
            single = level.replace("_TRANSITIVE", "")
            problems = compatibility_problems(single, schema, [(f"version {target.version}", target.schema)])
        body: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            body["messages"] = problems
        return _answer(body)

    @app.post("/compatibility/subjects/{subject}/versions")
    async def test_compatibility_all(subject: str, request: Request, verbose: bool = False) -> JSONResponse:
        schema = await _schema_of(request)
        problems = registry.check(subject, schema)
        body: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            body["messages"] = problems
        return _answer(body)

    async def level_of(request: Request) -> str:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        level = body.get("compatibility") if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise RestError(422, 42203, f"Invalid compatibility level. Valid values are: {', '.join(LEVELS)}")
        return level.upper()

    @app.get("/config")
    def get_config() -> JSONResponse:
        return _answer({"compatibilityLevel": registry.compatibility()})

    @app.put("/config")
    async def put_config(request: Request) -> JSONResponse:
        level = await level_of(request)
        registry.set_compatibility(level)
        return _answer({"compatibility": level})

    @app.get("/config/{subject}")
    def get_subject_config(subject: str, defaultToGlobal: bool = False) -> JSONResponse:  # noqa: N803 - Confluent's name
        override = registry.compatibility_override(subject)
        if override is None and not defaultToGlobal:
            raise RestError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        return _answer({"compatibilityLevel": override or registry.compatibility()})

    @app.put("/config/{subject}")
    async def put_subject_config(subject: str, request: Request) -> JSONResponse:
        level = await level_of(request)
        registry.set_compatibility(level, subject)
        return _answer({"compatibility": level})

    @app.delete("/config/{subject}")
    def delete_subject_config(subject: str) -> JSONResponse:
        override = registry.compatibility_override(subject)
        if override is None:
            raise RestError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        registry.set_compatibility(None, subject)
        return _answer({"compatibility": override})

    @app.delete("/subjects/{subject}")
    def delete_subject(subject: str) -> JSONResponse:
        versions_of(subject)
        # ids are global and mirrored messages depend on them: deleting is refused, not faked
        raise RestError(405, 40501, "Deleting subjects is not supported by ferry's registry (schema ids are "
                        "permanent: mirrored and loaded messages refer to them)")

    return app


def serve(registry: SchemaRegistry, host: str, port: int) -> None:
    """Run the REST API until interrupted (uvicorn, one process; the registry's ZooKeeper does the rest)."""
    import uvicorn

    uvicorn.run(create_app(registry), host=host, port=port, log_level="warning", access_log=False)


__all__ = ["MEDIA_TYPE", "RestError", "create_app", "serve"]

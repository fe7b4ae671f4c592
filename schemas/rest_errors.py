"""Every answer other than 200 of the registry's REST API as Confluent's body ``{"error_code": n, "message": "..."}``:
the registry's own errors, unknown routes (404), wrong methods (405), malformed JSON bodies (400), bad path or
query parameters (404, as a JAX-RS server answers a parameter it cannot convert) and unexpected failures (500).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from starlette.exceptions import HTTPException

from ferry.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSubjectError,
    OperationNotPermittedError,
    ReferenceExistsError,
    SchemaError,
    SchemaParseError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    UnknownSchemaError,
    UnknownSubjectError,
    UnknownVersionError,
    VersionNotSoftDeletedError,
    VersionSoftDeletedError,
)

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
log = logging.getLogger(__name__)

# most specific first: UnknownVersionError is an UnknownSubjectError
_CODES: list[tuple[type[Exception], int, int]] = [
    (UnknownVersionError, 404, 40402),
    (UnknownSubjectError, 404, 40401),
    (UnknownSchemaError, 404, 40403),
    (SubjectSoftDeletedError, 404, 40404),
    (SubjectNotSoftDeletedError, 404, 40405),
    (VersionSoftDeletedError, 404, 40406),
    (VersionNotSoftDeletedError, 404, 40407),
    (IncompatibleSchemaError, 409, 409),
    (SchemaParseError, 422, 42201),
    (OperationNotPermittedError, 422, 42205),
    (ReferenceExistsError, 422, 42206),
    (InvalidSubjectError, 422, 42208),
]


class RestError(Exception):
    """An answer other than 200: HTTP status, Confluent error code, message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def answer(body: object, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


def _error(status: int, code: int, message: str) -> JSONResponse:
    return answer({"error_code": code, "message": message}, status)


async def _rest_error(_: Request, e: RestError) -> JSONResponse:
    return _error(e.status, e.code, e.message)


async def _schema_error(_: Request, e: SchemaError) -> JSONResponse:
    for kind, status, code in _CODES:
        if isinstance(e, kind):
            message = str(e)
            if kind is IncompatibleSchemaError:
                message = f"Schema being registered is incompatible with an earlier schema; details: {e.problems}"
            elif kind is InvalidSubjectError:
                message = f"Invalid subject: {e}"
            return _error(status, code, message)
    return _error(500, 50001, f"Error in the backend data store: {e}")


async def _http_error(_: Request, e: HTTPException) -> JSONResponse:
    phrase = {404: "Not Found", 405: "Method Not Allowed"}.get(e.status_code, str(e.detail))
    return _error(e.status_code, e.status_code, f"HTTP {e.status_code} {phrase}")


async def _bad_parameter(_: Request, e: RequestValidationError) -> JSONResponse:
    where = ", ".join(".".join(str(p) for p in err.get("loc", ())) for err in e.errors())
    return _error(404, 404, f"HTTP 404 Not Found (bad parameter: {where})")


async def _store_error(_: Request, e: KazooException) -> JSONResponse:
    if isinstance(e, KazooTimeoutError):
        return _error(500, 50002, "Operation timed out (ZooKeeper)")
    return _error(500, 50001, f"Error in the backend data store: {type(e).__name__}")


async def _unexpected(_: Request, e: Exception) -> JSONResponse:
    log.exception("schema registry: unexpected error")
    return _error(500, 500, f"Internal Server Error: {type(e).__name__}")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RestError, _rest_error)
    app.add_exception_handler(SchemaError, _schema_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _bad_parameter)
    app.add_exception_handler(KazooException, _store_error)
    app.add_exception_handler(KazooTimeoutError, _store_error)
    app.add_exception_handler(Exception, _unexpected)


async def json_body(request: Request) -> object:
    """The request's JSON body; 400 (Confluent: error_code 400) when it is not JSON."""
    try:
        return await request.json()
    except (ValueError, UnicodeDecodeError) as e:
        raise RestError(400, 400, f"Unexpected character in the request body: it is not JSON ({e})") from None

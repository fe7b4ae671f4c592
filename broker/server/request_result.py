"""What every request handler gives back to the connection, and how it refuses a request.

A handler takes the request's context (header and session) and a reader over the body and returns the response body (`bytes`, or a list
of parts with record slices for sendfile), a coroutine producing such a body, or None (acks=0: no response).
Its own module so that KafkaApis (the router) and the handlers it routes to both depend on it, not on each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from ferry.broker.server.request_context import RequestContext
from ferry.wire.protocol.primitives import Reader

Result = bytes | list | Awaitable[bytes | list | None] | None
Handler = Callable[[RequestContext, Reader], Result]
T = TypeVar("T")


class CloseConnection(Exception):
    """The request cannot be answered (malformed, unknown API or version): log it and close the connection."""


async def encode_after(pending: Awaitable[T], encode: Callable[[T], bytes]) -> bytes:
    """The answer of a request that waits: ``encode`` of what ``pending`` gives."""
    return encode(await pending)

"""SaslGate: the SASL side of one connection. Before authentication it takes the connection's frames itself
(only ApiVersions, SaslHandshake and SaslAuthenticate; anything else closes the connection); it decodes the SASL
requests and answers them through the SaslAuthenticator (ILLEGAL_SASL_STATE on a listener without SASL, as
Kafka answers); after a v0 handshake the tokens come as raw size-prefixed frames (no request header, Kafka
before 1.0) and a failed raw exchange is answered by closing; once authenticated it closes the connection when
the session expires without re-authentication (connections.max.reauth.ms, KIP-368)."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable
from typing import Protocol

from ferry.broker.server.connection_buffer import WOKE_CLOSE, ReadBuffer
from ferry.broker.server.rate_limited_log import RateLimitedLog
from ferry.broker.server.request_context import Session
from ferry.broker.server.request_result import CloseConnection
from ferry.broker.server.sasl_authenticator import SaslAuthenticator
from ferry.wire.protocol import sasl_authenticate, sasl_handshake
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.header import peek_header, read_request_header

log = logging.getLogger("ferry.broker.server.connection")
_SIZE = struct.Struct(">i")
_BEFORE_AUTH = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


class GateHost(Protocol):
    """What the gate needs of its connection."""

    peer: str
    session: Session
    max_request_bytes: int

    def dispatch(self, frame: bytearray) -> bool: ...  # handle a request, queue its answer (SASL ones: answer())

    def queue_framed(self, buf: bytes) -> None: ...  # an answer already framed (raw tokens)

    def flush_ready(self) -> None: ...


class SaslGate:
    """With an authenticator it takes the read buffer's frames (``rb.handle_frames``) until authenticated, then
    gives them back to the connection's handler."""

    def __init__(self, authenticator: SaslAuthenticator | None, host: GateHost, rb: ReadBuffer,
                 bad_requests: RateLimitedLog) -> None:
        self.auth = authenticator
        self.host = host
        self.listener_name = host.session.listener_name
        self.raw = False  # a v0 handshake succeeded: the next frame is a raw token
        self._rb = rb
        self._bad = bad_requests
        self._expiry: asyncio.TimerHandle | None = None
        self._raw_task: asyncio.Future | None = None
        self._serve_all = rb.handle_frames  # the connection's own frame handler
        if authenticator is not None:
            authenticator.on_done = self._done
            rb.handle_frames = self.handle_frames

    @property
    def failed(self) -> bool:
        return self.auth is not None and self.auth.failed

    def close(self) -> None:
        for handle in (self._expiry, self._raw_task):
            if handle is not None:
                handle.cancel()

    # ------------------------------------------------------------------ before authentication
    def handle_frames(self) -> int:
        """The connection's _handle_frames until authenticated: one frame at a time; returns the bytes the next
        frame needs, or -1 when the connection must close."""
        rb, host = self._rb, self.host
        if rb.woke == WOKE_CLOSE:
            return -1
        while rb.end - rb.start >= 4:
            size = _SIZE.unpack_from(rb.buf, rb.start)[0]
            if size <= 0 or size > host.max_request_bytes:
                self._bad.warning("closing connection from %s: request size %d outside 1..%d before "
                                  "authentication", host.peer, size, host.max_request_bytes)
                return -1
            if rb.end - rb.start - 4 < size:
                return size + 4
            frame = rb.buf[rb.start + 4:rb.start + 4 + size]
            rb.start += 4 + size
            if self.raw:
                self._raw_token(bytes(frame))
                continue
            key = frame[1] & 127 if len(frame) > 1 else 127
            if len(frame) < 8 or frame[0] or key not in _BEFORE_AUTH:
                self._bad.warning("closing connection from %s on %s: api key %d before SASL authentication",
                                  host.peer, self.listener_name, key if len(frame) > 1 else -1)
                return -1
            ok = host.dispatch(frame)
            host.flush_ready()
            if not ok or self.failed:
                return -1
        return 4

    def _raw_token(self, token: bytes) -> None:
        """Its raw answer is queued when ready (the client waits for it: nothing else is queued meanwhile)."""
        async def answer() -> None:
            try:
                reply = await self.raw_answer(token)
            except CloseConnection as e:
                self._bad.warning("closing connection from %s: %s", self.host.peer, e)
                self._rb.request_close()
                return
            self.host.queue_framed(_SIZE.pack(len(reply)) + reply)
            self.host.flush_ready()
        self._raw_task = asyncio.ensure_future(answer())

    def _done(self, ok: bool, lifetime_ms: int) -> None:
        """The authenticator's outcome, before its answer is sent: on success the connection serves every
        request and closes when the session expires; on failure it closes once the answer is out."""
        if not ok:
            self._rb.request_close()
            return
        self._rb.handle_frames = self._serve_all
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if lifetime_ms > 0:
            self._expiry = asyncio.get_running_loop().call_later(lifetime_ms / 1000.0, self._expired)

    def _expired(self) -> None:
        log.info("closing connection from %s (%s): its session expired without re-authentication "
                 "(connections.max.reauth.ms)", self.host.peer, self.host.session.principal)
        self._rb.request_close()

    # ------------------------------------------------------------------ the SASL requests
    def answer(self, frame: bytearray) -> tuple[int, bytes | Awaitable[bytes]]:
        """(correlation id, answer body or its awaitable) of a SaslHandshake or SaslAuthenticate (also when
        re-authenticating); CloseConnection / ProtocolError on a request that cannot be answered. A refusal
        answered at once (a mechanism not enabled, a wrong state) closes the connection once answered."""
        out = self._answer(frame)
        if self.failed and type(out[1]) is bytes:
            self._rb.request_close()
        return out

    def _answer(self, frame: bytearray) -> tuple[int, bytes | Awaitable[bytes]]:
        key, version, correlation_id = peek_header(frame)
        _header, r = read_request_header(frame)
        auth = self.auth
        if key == ApiKey.SASL_HANDSHAKE:
            mechanism = sasl_handshake.parse_request(r, version)
            if version > 1:
                raise CloseConnection(f"SaslHandshake v{version} (v0-1 are served)")
            if auth is None:
                return correlation_id, sasl_handshake.encode_response(version, ErrorCode.ILLEGAL_SASL_STATE, [])
            body = auth.handshake(version, mechanism)
            self.raw = version == 0 and not auth.failed
            return correlation_id, body
        token = sasl_authenticate.parse_request(r, version)
        if version > 2:
            raise CloseConnection(f"SaslAuthenticate v{version} (v0-2 are served)")
        if auth is None:
            return correlation_id, sasl_authenticate.encode_response(
                version, sasl_authenticate.SaslAuthenticateResponse(
                    ErrorCode.ILLEGAL_SASL_STATE, f"no SASL on listener {self.listener_name}", b""))
        return correlation_id, auth.authenticate(version, token)

    async def raw_answer(self, token: bytes) -> bytes:
        """A raw token's answer token (v0); CloseConnection when the exchange failed."""
        assert self.auth is not None
        result = self.auth.authenticate(0, token)
        body = result if isinstance(result, bytes) else await result
        resp = sasl_authenticate.parse_response_body(body, 0)
        if resp.error_code:
            raise CloseConnection(f"SASL authentication failed on {self.listener_name}: {resp.error_message}")
        if self.auth.authenticated:
            self.raw = False
        return resp.auth_bytes

"""How ferry's HTTP surfaces are served: the schema registry's REST API, the dashboard and every /metrics.

One description (HttpSecurity) for all of them, so that each says HTTPS, client certificates and basic
authentication the same way: TLS from PEM files (TLS 1.2 at least), optionally client certificates (mTLS:
``client_auth="required"`` with the CA that signed them), and HTTP basic authentication checked by an
Authenticator (the cluster's SCRAM users, so there is one user store for Kafka clients and browsers). Failed
logins are slowed per client address, as SASL failures are, so that a password cannot be guessed quickly.

The ASGI side (FastAPI apps: registry, dashboard) is a plain ASGI middleware; the WSGI side (prometheus_client's
/metrics app) a plain WSGI wrapper: neither needs the web framework, so this module sits in the lowest layer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger(__name__)

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class HttpSecurityError(ValueError):
    """A setting that cannot work (a key without its certificate, an unreadable file, an unknown mode)."""


class Authenticator(Protocol):
    """Checks a user name and password (e.g. against the SCRAM credentials in ZooKeeper)."""

    def authenticate(self, username: str, password: str) -> bool: ...


class FailureDelay:
    """The delay before answering a failed login from one address: doubles per recent failure up to a cap,
    forgotten after a quiet minute (the same rule the brokers apply to SASL failures)."""

    def __init__(self, base_s: float = 0.1, cap_s: float = 5.0, forget_after_s: float = 60.0) -> None:
        self.base_s, self.cap_s, self.forget_after_s = base_s, cap_s, forget_after_s
        self._failures: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def failed(self, address: str) -> float:
        """Record a failure from ``address``; the seconds to wait before answering it."""
        now = time.monotonic()
        with self._lock:
            count, last = self._failures.get(address, (0, now))
            count = 1 if now - last > self.forget_after_s else count + 1
            self._failures[address] = (count, now)
            if len(self._failures) > 10_000:  # bounded: drop the oldest half
                for key, _ in sorted(self._failures.items(), key=lambda kv: kv[1][1])[:5_000]:
                    del self._failures[key]
        return min(self.cap_s, self.base_s * 2 ** (count - 1))

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)


@dataclass(frozen=True)
class HttpSecurity:
    """TLS and authentication of one HTTP surface. The default is plain HTTP without authentication (bind
    such a surface to loopback)."""

    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None  # CAs of client certificates (mTLS)
    client_auth: str = "none"  # none | requested | required
    authenticator: Authenticator | None = None
    realm: str = "ferry"
    open_paths: frozenset[str] = frozenset()  # paths served without authentication (e.g. a health check)
    # who may write (POST/PUT/DELETE) when authentication is on; None: every authenticated user (the schema
    # registry's writers, as Confluent's registry restricts writes with its ACL plugin)
    write_users: frozenset[str] | None = None
    delay: FailureDelay = field(default_factory=FailureDelay, compare=False)

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH:
            raise HttpSecurityError(f"client auth {self.client_auth!r}: expected one of {', '.join(CLIENT_AUTH)}")
        if self.keyfile and not self.certfile:
            raise HttpSecurityError("a TLS key was given without its certificate")
        if self.client_auth != "none" and not self.certfile:
            raise HttpSecurityError("client certificates need TLS: give a certificate and key")
        if self.client_auth != "none" and not self.cafile:
            raise HttpSecurityError("client certificates need the CA that signs them")
        for what, path in (("certificate", self.certfile), ("key", self.keyfile), ("CA", self.cafile)):
            if path and not os.access(path, os.R_OK):
                raise HttpSecurityError(f"cannot read the TLS {what} file {path}")

    @property
    def scheme(self) -> str:
        return "https" if self.certfile else "http"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context (TLS 1.2+), or None for plain HTTP."""
        if not self.certfile:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
            if self.cafile:
                context.load_verify_locations(self.cafile)
        except (ssl.SSLError, OSError) as e:
            raise HttpSecurityError(f"cannot load the TLS certificate {self.certfile}: {e}") from None
        context.verify_mode = CLIENT_AUTH[self.client_auth]
        return context

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for uvicorn.run / uvicorn.Config."""
        if not self.certfile:
            return {}
        options: dict[str, Any] = {"ssl_certfile": self.certfile, "ssl_keyfile": self.keyfile,
                                   "ssl_cert_reqs": CLIENT_AUTH[self.client_auth]}
        if self.cafile:
            options["ssl_ca_certs"] = self.cafile
        return options

    # ------------------------------------------------------------------ basic authentication
    def check_basic(self, header: str | None, address: str) -> tuple[bool, str | None]:
        """(allowed, user name) for an Authorization header from ``address``; waits the failure delay."""
        if self.authenticator is None:
            return True, None
        if not header:
            return False, None  # a browser's first request: the challenge at once, not a failed guess
        username, password = _parse_basic(header)
        if username is not None and password is not None and self.authenticator.authenticate(username, password):
            self.delay.succeeded(address)
            return True, username
        wait = self.delay.failed(address)
        log.warning("HTTP authentication failed for %s from %s", username or "(malformed credentials)", address)
        time.sleep(wait)
        return False, None

    def asgi(self, app: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """``app`` behind basic authentication (unchanged without an authenticator)."""
        if self.authenticator is None:
            return app
        return _AsgiBasicAuth(app, self)

    def wsgi(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        if self.authenticator is None:
            return app
        security = self

        def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO", "") not in security.open_paths:
                ok, user = security.check_basic(environ.get("HTTP_AUTHORIZATION"), environ.get("REMOTE_ADDR", "?"))
                if not ok:
                    start_response("401 Unauthorized", [("WWW-Authenticate", f'Basic realm="{security.realm}"'),
                                                        ("Content-Type", "text/plain")])
                    return [b"authentication required\n"]
                environ["REMOTE_USER"] = user
            return app(environ, start_response)

        return guarded


def _parse_basic(header: str | None) -> tuple[str | None, str | None]:
    if not header or not header.lower().startswith("basic "):
        return None, None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    username, sep, password = decoded.partition(":")
    return (username, password) if sep else (None, None)


class _AsgiBasicAuth:
    """ASGI middleware: 401 with a Basic challenge unless the request's credentials check out."""

    def __init__(self, app: Callable[..., Awaitable[None]], security: HttpSecurity) -> None:
        self.app = app
        self.security = security

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Any],
                       send: Callable[..., Any]) -> None:
        if scope["type"] != "http" or scope.get("path", "") in self.security.open_paths:
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"authorization"), None)
        client = scope.get("client")
        address = client[0] if client else "?"
        # the check may sleep (the failure delay) and derives a key: off the event loop so other requests go on
        ok, user = await asyncio.get_running_loop().run_in_executor(None, self.security.check_basic, header, address)
        if not ok:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", f'Basic realm="{self.security.realm}"'.encode()),
                                    (b"content-type", b"application/json")]})
            await send({"type": "http.response.body",
                        "body": b'{"error_code":401,"message":"Unauthorized"}'})
            return
        writers = self.security.write_users
        if writers is not None and scope.get("method") in ("POST", "PUT", "DELETE") and user not in writers:
            log.warning("HTTP %s %s refused: %s may not write", scope.get("method"), scope.get("path"), user)
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body",
                        "body": b'{"error_code":40301,"message":"User is denied operation Write"}'})
            return
        scope.setdefault("state", {})["user"] = user
        await self.app(scope, receive, send)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line for a client that failed (a TLS handshake refused, a connection cut), not socketserver's
        traceback on stderr."""
        error = sys.exc_info()[1]
        log.warning("HTTP request from %s failed: %s", client_address[0] if client_address else "?",
                    " ".join(str(error).split()) or type(error).__name__)


class _QuietHandler(WSGIRequestHandler):
    timeout = 30  # a client that never finishes its request (or its TLS handshake) frees the thread

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the base class's name
        pass


def serve_wsgi(app: Callable[..., Iterable[bytes]], host: str, port: int,
               security: HttpSecurity) -> tuple[WSGIServer, threading.Thread]:
    """Serve a WSGI app (e.g. prometheus_client's /metrics) in a daemon thread, with ``security``'s TLS and
    authentication; returns the server (``.server_port``, ``.shutdown()``) and its thread."""
    server = make_server(host, port, security.wsgi(app), _ThreadingServer, handler_class=_QuietHandler)
    context = security.ssl_context()
    if context is not None:
        # the handshake happens in the request's thread, not in the accepting one: a client that stalls in it
        # cannot stop the server from accepting others
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, name=f"http {host}:{port}", daemon=True)
    thread.start()
    return server, thread

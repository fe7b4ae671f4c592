"""SASL on a connection (SaslHandshake v0-1 + SaslAuthenticate v0-2): PLAIN and SCRAM-SHA-256/512 against the SCRAM
user store in ZooKeeper (zk/scram_credentials.py; PLAIN derives the stored key from the given password with the
stored salt, so there is one store and never a password in it).

SaslServer is the listener's (mechanisms, the store, the failure delays); SaslAuthenticator is one connection's
exchange. A wrong password or unknown user gets SASL_AUTHENTICATION_FAILED after a delay that doubles with each
failure from the same address (connection.failed.authentication.delay.ms up to ...delay.max.ms), and the
connection is closed. KIP-368: with connections.max.reauth.ms the answer carries session_lifetime_ms and the
client re-authenticates on the same connection (as the same principal) before then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from ferry.broker.server.request_context import KafkaPrincipal, Session
from ferry.broker.server.security_config import SaslSettings
from ferry.wire.protocol import sasl_authenticate, sasl_handshake
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.scram import MECHANISMS as SCRAM_MECHANISMS
from ferry.wire.scram import ScramCredential, ScramError, ScramServer

log = logging.getLogger(__name__)

CredentialLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> credential; blocking
FORGET_FAILURES_S = 600.0  # an address with no failure for this long starts again from the first delay
MAX_ADDRESSES = 10_000


class FailedLoginDelay:
    """How long to wait before answering a failed authentication from an address: doubles per failure."""

    def __init__(self, base_ms: int, max_ms: int) -> None:
        self.base_s = base_ms / 1000.0
        self.max_s = max_ms / 1000.0
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def failed(self, address: str) -> float:
        """Record a failure; returns the delay (seconds) for it."""
        now = time.monotonic()
        count, last = self._failures.pop(address, (0, now))
        if now - last > FORGET_FAILURES_S:
            count = 0
        count += 1
        self._failures[address] = (count, now)
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)
        return min(self.max_s, self.base_s * (2 ** min(count - 1, 30)))

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)


class SaslServer:
    """A SASL listener's settings and shared state; makes one SaslAuthenticator per connection."""

    def __init__(self, settings: SaslSettings, credentials: CredentialLookup, executor: Executor) -> None:
        self.settings = settings
        self.mechanisms = list(settings.enabled_mechanisms)
        self.credentials = credentials
        self.executor = executor
        self.delays = FailedLoginDelay(settings.failed_delay_ms, settings.failed_delay_max_ms)

    def authenticator(self, session: Session, peer: str) -> SaslAuthenticator:
        return SaslAuthenticator(self, session, peer)


Done = Callable[[bool, int], None]  # (authenticated, session lifetime ms): the connection's callback


class SaslAuthenticator:
    """One connection's SASL state: handshake, then one (PLAIN) or two (SCRAM) SaslAuthenticate rounds."""

    def __init__(self, server: SaslServer, session: Session, peer: str) -> None:
        self.server = server
        self.session = session
        self.peer = peer
        self.authenticated = False
        self.failed = False
        self.on_done: Done = lambda ok, lifetime_ms: None
        self._mechanism = ""
        self._scram: ScramServer | None = None
        self._scram_round = 0

    # ------------------------------------------------------------------ SaslHandshake
    def handshake(self, version: int, mechanism: str) -> bytes:
        enabled = self.server.mechanisms
        if self._mechanism:  # a second handshake in one exchange: answered, then closed (as Kafka does)
            self.failed = True
            return sasl_handshake.encode_response(version, ErrorCode.ILLEGAL_SASL_STATE, enabled)
        if mechanism not in enabled:
            self.failed = True
            log.warning("closing connection from %s on %s: SASL mechanism %r not enabled (%s)", self.peer,
                        self.session.listener_name, mechanism, ", ".join(enabled))
            return sasl_handshake.encode_response(version, ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled)
        self._mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramServer(mechanism)
            self._scram_round = 0
        return sasl_handshake.encode_response(version, ErrorCode.NONE, enabled)

    # ------------------------------------------------------------------ SaslAuthenticate
    def authenticate(self, version: int, token: bytes) -> bytes | Awaitable[bytes]:
        if not self._mechanism:
            self.failed = True
            return self._answer(version, ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake")
        if self._mechanism == "PLAIN":
            return self._plain(version, token)
        assert self._scram is not None
        if self._scram_round == 0:
            self._scram_round = 1
            try:
                user = self._scram.first(token)
            except ScramError as e:
                return self._fail(version, "", str(e))
            return self._scram_first(version, user)
        try:
            server_final = self._scram.final(token)
        except ScramError as e:
            return self._fail(version, self._scram.username, str(e))
        return self._succeed(version, self._scram.username, server_final)

    async def _scram_first(self, version: int, user: str) -> bytes:
        loop = asyncio.get_running_loop()
        cred = await loop.run_in_executor(self.server.executor, self._lookup, user, self._mechanism)
        if cred is None:
            return await self._fail(version, user, "unknown user")
        assert self._scram is not None
        return self._answer(version, ErrorCode.NONE, None, self._scram.server_first(cred))

    def _plain(self, version: int, token: bytes) -> bytes | Awaitable[bytes]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            return self._fail(version, "", "malformed PLAIN token")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            return self._fail(version, "", "PLAIN token is not UTF-8")
        if authzid and authzid != user:
            return self._fail(version, user, "authorization id differs from the user name")
        return self._plain_check(version, user, password)

    async def _plain_check(self, version: int, user: str, password: str) -> bytes:
        loop = asyncio.get_running_loop()
        ok = await loop.run_in_executor(self.server.executor, self._plain_matches, user, password)
        if not ok:
            return await self._fail(version, user, "wrong password or unknown user")
        return await self._succeed(version, user, b"")

    def _plain_matches(self, user: str, password: str) -> bool:
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            cred = self._lookup(user, mechanism)
            if cred is not None:
                return cred.matches(mechanism, password)
        return False

    def _lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        try:
            return self.server.credentials(user, mechanism)
        except Exception as e:  # ZooKeeper unreachable: the client is refused, not the broker broken
            log.error("cannot read the credentials of %r: %s", user, e)
            return None

    # ------------------------------------------------------------------ outcomes
    async def _succeed(self, version: int, user: str, token: bytes) -> bytes:
        principal = KafkaPrincipal("User", user)
        if self.authenticated and principal != self.session.principal:
            return await self._fail(version, user, f"re-authentication as {principal} on a connection of "
                                                   f"{self.session.principal}")
        reauth = self.authenticated
        self.session.principal = principal
        self.authenticated = True
        self._mechanism = ""  # a later re-authentication starts with a new handshake
        self.server.delays.succeeded(self.peer.rpartition(":")[0])
        lifetime = self.server.settings.max_reauth_ms
        log.info("%s %s from %s on %s (%s)", "re-authenticated" if reauth else "authenticated", principal,
                 self.peer, self.session.listener_name, self._scram.mechanism if self._scram else "PLAIN")
        self.on_done(True, lifetime)
        return self._answer(version, ErrorCode.NONE, None, token, lifetime)

    async def _fail(self, version: int, user: str, reason: str) -> bytes:
        self.failed = True
        mechanism = self._mechanism
        delay = self.server.delays.failed(self.peer.rpartition(":")[0])
        log.warning("failed authentication from %s on %s (%s%s): %s; answering in %.0f ms and closing", self.peer,
                    self.session.listener_name, mechanism, f", user {user!r}" if user else "", reason, delay * 1000)
        await asyncio.sleep(delay)
        self.on_done(False, 0)
        return self._answer(version, ErrorCode.SASL_AUTHENTICATION_FAILED,
                            f"Authentication failed during authentication due to invalid credentials with SASL "
                            f"mechanism {mechanism}")

    @staticmethod
    def _answer(version: int, code: int, message: str | None, token: bytes = b"", lifetime_ms: int = 0) -> bytes:
        return sasl_authenticate.encode_response(version, sasl_authenticate.SaslAuthenticateResponse(
            code, message, token, lifetime_ms))

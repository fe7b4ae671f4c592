"""The client side of SASL on a Kafka connection (SaslHandshake v1, then SaslAuthenticate v1 rounds) with PLAIN
or SCRAM-SHA-256/512: what a broker's own connections to an SASL inter-broker listener do (asyncio,
`sasl_login`), and what ferry's clients do on a secured listener (blocking, `sasl_login_blocking`).

The exchange is written once, as a conversation (`sasl_conversation`): a generator that yields the requests to
send, each answered with the broker's answer body, and the costly local work (SCRAM's PBKDF2) as a callable,
so that each face runs it its own way (off the event loop for the broker's loop)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from functools import partial

from ferry.wire.protocol import sasl_authenticate, sasl_handshake
from ferry.wire.protocol.primitives import Reader
from ferry.wire.scram import MECHANISMS, ScramClient, ScramError

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
Exchange = Callable[[int, int, bytes], Awaitable[memoryview]]  # (api key, version, body) -> answer body
BlockingExchange = Callable[[int, int, bytes], memoryview]
Request = tuple[int, int, bytes]  # (api key, version, body)
Step = Request | Callable[[], bytes]  # a request to send, or local work whose result is sent back in
Conversation = Generator[Step, "memoryview | bytes", int]  # returns the session lifetime in ms (0: unbounded)


class AuthenticationError(ConnectionError):
    """The broker would not let this client in (TLS handshake or SASL); retrying with the same settings cannot
    help, unlike a broker that is down (BrokerUnavailableError)."""


class SaslLoginError(AuthenticationError):
    """The broker refused the mechanism or the credentials; the message says which (never the password)."""


@dataclass(frozen=True)
class SaslLogin:
    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:  # never the password in a log line or a traceback
        return f"SaslLogin({self.mechanism}, {self.username})"


@dataclass(frozen=True)
class ClientSecurity:
    """How a connection to a broker is secured: TLS (``ssl_context``) and/or SASL (``sasl``)."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @property
    def plaintext(self) -> bool:
        return self.ssl_context is None and self.sasl is None


PLAINTEXT = ClientSecurity()


def sasl_conversation(login: SaslLogin) -> Conversation:
    """The login's steps (see the module's docstring); returns the session lifetime the broker gave
    (SaslAuthenticate v1, KIP-368: log in again on the connection before it ends; 0: no limit). SaslLoginError if
    the broker refuses."""
    lifetime = 0
    r = Reader((yield (SASL_HANDSHAKE, 1, sasl_handshake.encode_request(login.mechanism))))
    code, enabled = sasl_handshake.parse_response(r)
    if code:
        raise SaslLoginError(f"SASL mechanism {login.mechanism} refused (error {code}; enabled: {', '.join(enabled)})")

    def step(token: bytes) -> Generator[Step, memoryview | bytes, bytes]:
        nonlocal lifetime
        answer = yield (SASL_AUTHENTICATE, 1, sasl_authenticate.encode_request(token))
        resp = sasl_authenticate.parse_response(Reader(answer), 1)
        if resp.error_code:
            raise SaslLoginError(f"SASL authentication as {login.username} failed: {resp.error_message}")
        lifetime = resp.session_lifetime_ms
        return resp.auth_bytes

    if login.mechanism == "PLAIN":
        yield from step(f"\0{login.username}\0{login.password}".encode())
        return lifetime
    if login.mechanism not in MECHANISMS:
        raise SaslLoginError(f"SASL mechanism {login.mechanism} is not supported")
    client = ScramClient(login.mechanism, login.username, login.password)
    try:
        server_first = yield from step(client.first())
        final = yield partial(client.final, server_first)  # PBKDF2: 4096 rounds or more
        client.verify((yield from step(bytes(final))))
    except ScramError as e:
        raise SaslLoginError(f"SCRAM with the broker failed: {e}") from None
    return lifetime


def _advance(steps: Conversation, answer: memoryview | bytes | None) -> Step | int:
    """The conversation's next step after ``answer`` (None to start); once it is done, its result (an int)."""
    try:
        return steps.send(answer)  # type: ignore[arg-type]
    except StopIteration as done:
        return done.value or 0


async def sasl_login(exchange: Exchange, login: SaslLogin) -> int:
    """Authenticate on a connection from an event loop (the local work off the loop: a broker's loop must
    not stall on a reconnect); the session lifetime in ms (0: none). SaslLoginError if the broker refuses."""
    steps = sasl_conversation(login)
    step = _advance(steps, None)
    while not isinstance(step, int):
        step = _advance(steps, await asyncio.to_thread(step) if callable(step) else await exchange(*step))
    return step


def sasl_login_blocking(exchange: BlockingExchange, login: SaslLogin) -> int:
    """Authenticate on a blocking connection (first login or re-authentication); the session lifetime in ms
    (0: none). SaslLoginError if the broker refuses."""
    steps = sasl_conversation(login)
    step = _advance(steps, None)
    while not isinstance(step, int):
        step = _advance(steps, step() if callable(step) else exchange(*step))
    return step

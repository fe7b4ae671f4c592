"""The client side of SASL on a Kafka connection (SaslHandshake v1, then SaslAuthenticate v1 rounds) with PLAIN
or SCRAM-SHA-256/512: what a broker's own connections to an SASL inter-broker listener do, as a super user."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ferry.wire.protocol import sasl_authenticate, sasl_handshake
from ferry.wire.protocol.primitives import Reader
from ferry.wire.scram import MECHANISMS, ScramClient, ScramError

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
Exchange = Callable[[int, int, bytes], Awaitable[memoryview]]  # (api key, version, body) -> answer body


class SaslLoginError(ConnectionError):
    """The broker refused the mechanism or the credentials; the message says which."""


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


async def sasl_login(exchange: Exchange, login: SaslLogin) -> None:
    """Authenticate on a fresh connection; SaslLoginError if the broker refuses."""
    r = Reader(await exchange(SASL_HANDSHAKE, 1, sasl_handshake.encode_request(login.mechanism)))
    code, enabled = sasl_handshake.parse_response(r)
    if code:
        raise SaslLoginError(f"SASL mechanism {login.mechanism} refused (error {code}; enabled: {', '.join(enabled)})")

    async def step(token: bytes) -> bytes:
        resp = sasl_authenticate.parse_response(
            Reader(await exchange(SASL_AUTHENTICATE, 1, sasl_authenticate.encode_request(token))), 1)
        if resp.error_code:
            raise SaslLoginError(f"SASL authentication as {login.username} failed: {resp.error_message}")
        return resp.auth_bytes

    if login.mechanism == "PLAIN":
        await step(f"\0{login.username}\0{login.password}".encode())
        return
    if login.mechanism not in MECHANISMS:
        raise SaslLoginError(f"SASL mechanism {login.mechanism} is not supported")
    client = ScramClient(login.mechanism, login.username, login.password)
    try:
        server_first = await step(client.first())
        # PBKDF2 (4096 rounds or more) off the event loop: a broker's loop must not stall on a reconnect
        final = await asyncio.to_thread(client.final, server_first)
        client.verify(await step(final))
    except ScramError as e:
        raise SaslLoginError(f"SCRAM with the broker failed: {e}") from None

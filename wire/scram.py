"""SCRAM (RFC 5802, SHA-256/512 as RFC 7677 and Kafka's KIP-84): the salted credential a server keeps instead of
a password, and both sides of the exchange. Shared by the broker (server), the broker's own inter-broker
connections (client), ``ferry users`` and anything else that checks a password against the same store.

Messages (without channel binding, ``n,,`` as Kafka's clients send)::

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce + server nonce>,s=<salt b64>,i=<iterations>
    client-final  c=biws,r=<nonce>,p=<ClientProof b64>
    server-final  v=<ServerSignature b64>            (or e=<error>)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096  # Kafka's minimum


class ScramError(ValueError):
    """A malformed SCRAM message or a failed proof; the message is safe to tell the client."""


@dataclass(frozen=True)
class ScramCredential:
    """What a server stores per user and mechanism: never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def create(cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
               salt: bytes | None = None) -> ScramCredential:
        if iterations < MIN_ITERATIONS:
            raise ValueError(f"iterations: at least {MIN_ITERATIONS}")
        salt = salt if salt is not None else secrets.token_bytes(32)
        algo = _algo(mechanism)
        salted = salted_password(algo, password, salt, iterations)
        client_key = _hmac(algo, salted, b"Client Key")
        return cls(salt, hashlib.new(algo, client_key).digest(), _hmac(algo, salted, b"Server Key"), iterations)

    def matches(self, mechanism: str, password: str) -> bool:
        """Whether ``password`` is this credential's (SASL/PLAIN checked against the SCRAM store)."""
        algo = _algo(mechanism)
        salted = salted_password(algo, password, self.salt, self.iterations)
        stored = hashlib.new(algo, _hmac(algo, salted, b"Client Key")).digest()
        return hmac.compare_digest(stored, self.stored_key)

    def encode(self) -> str:
        """Kafka's text form (/config/users/<name>): ``salt=..,stored_key=..,server_key=..,iterations=4096``."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"malformed SCRAM credential ({e})") from None


def salted_password(algo: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(algo, _saslprep(password).encode(), salt, iterations)


def _saslprep(text: str) -> str:
    # Kafka's clients send passwords as they are (no SASLprep normalisation); so do we.
    return text


def _algo(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})") from None


def _hmac(algo: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, algo).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        out[part[0]] = part[2:]
    return out


def _unescape_name(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The server side of one exchange: ``first()`` names the user, ``server_first()`` answers once the
    caller found the user's credential, ``final()`` checks the proof and returns server-final."""

    def __init__(self, mechanism: str, server_nonce: str = "") -> None:
        """``server_nonce``: fixed only by tests (RFC 7677's example); random otherwise."""
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)
        self.mechanism = mechanism
        self._algo = _algo(mechanism)
        self.username = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    def first(self, client_first: bytes) -> str:
        """Parse client-first; returns the user name."""
        try:
            text = client_first.decode()
        except UnicodeDecodeError:
            raise ScramError("client-first is not UTF-8") from None
        gs2, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y"):
            raise ScramError("client-first: channel binding is not supported (expected n,,)")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("client-first lacks the user name or nonce")
        if "m" in attrs:
            raise ScramError("client-first: mandatory extensions are not supported")
        self.username = _unescape_name(attrs["n"])
        if authzid and _unescape_name(authzid.removeprefix("a=")) != self.username:
            raise ScramError("authorization id differs from the user name")
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        return self.username

    def server_first(self, credential: ScramCredential) -> bytes:
        self._credential = credential
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """Check client-final's proof; returns server-final, raises ScramError on a wrong password."""
        cred = self._credential
        if cred is None:
            raise ScramError("client-final before server-first")
        try:
            text = client_final.decode()
        except UnicodeDecodeError:
            raise ScramError("client-final is not UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        # Kafka's server checks that the nonce *ends with* its own (librdkafka before 2.x sends the client nonce
        # twice); the proof covers the messages as sent either way
        if not sep or not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("client-final: wrong nonce")
        if attrs.get("c") not in ("biws", "eSws"):  # base64 of "n,," / "y,,"
            raise ScramError("client-final: channel binding is not supported")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("client-final: malformed proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._algo, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("authentication failed")
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(hashlib.new(self._algo, client_key).digest(), cred.stored_key):
            raise ScramError("authentication failed")
        server_signature = _hmac(self._algo, cred.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}".encode()


class ScramClient:
    """The client side: ``first()``, ``final(server_first)``, ``verify(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str = "") -> None:
        """``nonce``: fixed only by tests; random otherwise."""
        self._algo = _algo(mechanism)
        self._username = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={self._username},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attributes(text)
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), base64.b64decode(attrs.get("s", "")), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or iterations < MIN_ITERATIONS:
            raise ScramError("server-first: bad nonce or iterations")
        salted = salted_password(self._algo, self._password, salt, iterations)
        client_key = _hmac(self._algo, salted, b"Client Key")
        stored_key = hashlib.new(self._algo, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(self._algo, stored_key, auth_message))
        self._server_signature = _hmac(self._algo, _hmac(self._algo, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode())
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self._server_signature):
            raise ScramError("the server's signature is wrong")

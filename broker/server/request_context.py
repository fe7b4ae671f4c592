"""Who sent a request: the principal and the address of the connection it came on (Kafka's Session and
RequestContext). A handler that must authorize or log a request reads them here; the wire header stays
free of security."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.header import RequestHeader


@dataclass(frozen=True)
class KafkaPrincipal:
    """A principal as Kafka spells it, ``User:alice``; ACLs and ``super.users`` name principals this way."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal; raises ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {text!r} is not TYPE:NAME (e.g. User:alice)")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass
class Session:
    """One connection's identity. Starts as the listener gives it (ANONYMOUS on PLAINTEXT); an authentication
    on the connection (SASL, a client certificate) replaces the principal."""

    principal: KafkaPrincipal
    client_host: str
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True)
class RequestContext:
    """One request's header and the session it came on; handlers receive this instead of the bare header."""

    header: RequestHeader
    session: Session

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def principal(self) -> KafkaPrincipal:
        return self.session.principal

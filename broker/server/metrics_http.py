"""How the broker serves its /metrics: HTTPS and authentication settings (the same as the other HTTP surfaces'
flags, wire/http_security.py), read from the broker's properties:

``metrics.ssl.certificate.location`` / ``metrics.ssl.key.location`` (PEM: HTTPS), ``metrics.ssl.ca.location`` +
``metrics.ssl.client.auth=none|requested|required`` (client certificates, e.g. Prometheus' tls_config), and
``metrics.authentication=none|scram`` (HTTP basic against the cluster's SCRAM users)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.http_security import HttpSecurity, HttpSecurityError
from ferry.zk.scram_credentials import ScramAuthenticator

METRICS_HTTP_KEYS = ("metrics.ssl.certificate.location", "metrics.ssl.key.location", "metrics.ssl.ca.location",
                     "metrics.ssl.client.auth", "metrics.authentication")


@dataclass(frozen=True)
class MetricsHttpSettings:
    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None
    client_auth: str = "none"
    authentication: str = "none"

    @classmethod
    def from_properties(cls, p: dict[str, str]) -> MetricsHttpSettings:
        """The settings; raises ValueError (a ConfigError for the broker) on a combination that cannot work."""
        settings = cls(p.get("metrics.ssl.certificate.location") or None, p.get("metrics.ssl.key.location") or None,
                       p.get("metrics.ssl.ca.location") or None, p.get("metrics.ssl.client.auth", "none"),
                       p.get("metrics.authentication", "none"))
        if settings.authentication not in ("none", "scram"):
            raise ValueError(f"metrics.authentication: {settings.authentication!r} must be none or scram")
        try:
            settings.security(None)  # files readable, key with its certificate, client auth with its CA
        except HttpSecurityError as e:
            raise ValueError(f"metrics: {e}") from None
        return settings

    def security(self, zookeeper: str | None) -> HttpSecurity:
        authenticator = ScramAuthenticator(zookeeper) if self.authentication == "scram" and zookeeper else None
        return HttpSecurity(certfile=self.certfile, keyfile=self.keyfile, cafile=self.cafile,
                            client_auth=self.client_auth, authenticator=authenticator)

"""SslFactory: the broker's server-side TLS context, rebuilt when its certificate, key or CA files change (the
files' modification times are compared on each new connection: renewed certificates are served without a
restart; a rebuild that fails keeps the previous context and says why once per change)."""

from __future__ import annotations

import logging
import os
import ssl

from ferry.broker.server.security_config import SslSettings

log = logging.getLogger(__name__)

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class SslFactory:
    """Server SSLContext for the SSL and SASL_SSL listeners (TLS 1.2+)."""

    def __init__(self, settings: SslSettings) -> None:
        self.settings = settings
        self._files = [f for f in (settings.keystore_location, settings.truststore_location) if f]
        self._stamp = self._mtimes()
        self._context = self._build()  # a bad file fails the broker's start-up (ssl.SSLError / OSError)
        self._failed_stamp: tuple | None = None
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        """The current context, rebuilt first if a file changed since it was built."""
        stamp = self._mtimes()
        if stamp != self._stamp and stamp != self._failed_stamp:
            try:
                self._context = self._build()
            except (OSError, ssl.SSLError, ValueError) as e:
                self._failed_stamp = stamp
                log.error("TLS files changed but cannot be loaded (%s); still serving the previous certificate", e)
            else:
                self._stamp = stamp
                self.reloads += 1
                log.info("TLS certificate reloaded from %s", ", ".join(self._files))
        return self._context

    def client_context(self) -> ssl.SSLContext:
        """TLS for the broker's own connections to an SSL inter-broker listener: the server checked against
        the truststore (hostname included), the broker's certificate presented (for ssl.client.auth)."""
        s = self.settings
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = min(_VERSIONS[p] for p in s.enabled_protocols)
        if s.truststore_location:
            ctx.load_verify_locations(cafile=s.truststore_location)
        else:
            ctx.load_default_certs()
        ctx.load_cert_chain(s.keystore_location, password=s.key_password or None)
        return ctx

    def _mtimes(self) -> tuple:
        out = []
        for f in self._files:
            try:
                st = os.stat(f)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        s = self.settings
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = min(_VERSIONS[p] for p in s.enabled_protocols)
        ctx.maximum_version = max(_VERSIONS[p] for p in s.enabled_protocols)
        ctx.load_cert_chain(s.keystore_location, password=s.key_password or None)
        if s.truststore_location:
            ctx.load_verify_locations(cafile=s.truststore_location)
        ctx.verify_mode = _VERIFY[s.client_auth]
        ctx.options |= ssl.OP_NO_COMPRESSION
        return ctx

"""The TLS handshake of an accepted connection on an SSL or SASL_SSL listener, done on the event loop without
blocking (SSLWantRead/WantWrite waits on the socket), bounded in time; then the principal of the client
certificate, if one was presented and verified (ssl_principal.py)."""

from __future__ import annotations

import asyncio
import socket
import ssl

from ferry.broker.server.connection_buffer import wake
from ferry.broker.server.request_context import KafkaPrincipal
from ferry.broker.server.ssl_principal import PrincipalMapper, subject_dn

HANDSHAKE_TIMEOUT_S = 10.0


class TlsRefused(Exception):
    """The handshake failed or timed out, or the certificate maps to no principal; the message says why."""


async def tls_accept(sock: socket.socket, context: ssl.SSLContext,
                     timeout_s: float = HANDSHAKE_TIMEOUT_S) -> ssl.SSLSocket:
    """Wrap ``sock`` (non-blocking) and complete the server handshake; TlsRefused otherwise (socket closed)."""
    tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    loop = asyncio.get_running_loop()
    fd = tls.fileno()
    deadline = loop.time() + timeout_s
    try:
        while True:
            try:
                tls.do_handshake()
                return tls
            except ssl.SSLWantReadError:
                add, remove = loop.add_reader, loop.remove_reader
            except ssl.SSLWantWriteError:
                add, remove = loop.add_writer, loop.remove_writer
            left = deadline - loop.time()
            if left <= 0:
                raise TlsRefused("TLS handshake timed out")
            fut = loop.create_future()
            add(fd, wake, fut)
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                raise TlsRefused("TLS handshake timed out") from None
            finally:
                remove(fd)
    except TlsRefused:
        tls.close()
        raise
    except (ssl.SSLError, OSError) as e:
        tls.close()
        raise TlsRefused(f"TLS handshake failed: {getattr(e, 'reason', None) or e}") from None
    except BaseException:
        tls.close()
        raise


def certificate_principal(tls: ssl.SSLSocket, mapper: PrincipalMapper) -> KafkaPrincipal | None:
    """``User:<mapped subject>`` of a verified client certificate; None without one; TlsRefused when no
    mapping rule matches its subject."""
    cert = tls.getpeercert()
    if not cert:
        return None
    dn = subject_dn(cert.get("subject", ()))
    name = mapper.name(dn)
    if not name:
        raise TlsRefused(f"no ssl.principal.mapping.rules rule matches the certificate subject {dn!r}")
    return KafkaPrincipal("User", name)

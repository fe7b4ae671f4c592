"""SocketServer: accepts connections on one listener and runs one Connection per client. On an SSL or SASL_SSL
listener the TLS handshake comes first (tls_handshake.py); on a SASL listener the Connection gets an
authenticator; the Session says which listener and protocol, and the certificate's principal on mTLS.

Connections own their sockets outright (no asyncio transport in between), which lets the fetch path call
`os.sendfile` on the socket and wait for writability itself.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from ferry.broker.server.connection import Connection
from ferry.broker.server.kafka_apis import KafkaApis
from ferry.broker.server.memory_pool import MemoryPool
from ferry.broker.server.rate_limited_log import RateLimitedLog
from ferry.broker.server.request_context import ANONYMOUS, Session
from ferry.broker.server.sasl_authenticator import SaslServer
from ferry.broker.server.security_config import Listener
from ferry.broker.server.ssl_factory import SslFactory
from ferry.broker.server.ssl_principal import PrincipalMapper
from ferry.broker.server.tls_handshake import TlsRefused, certificate_principal, tls_accept

log = logging.getLogger(__name__)

BUFFER_RELEASE_S = 1.0  # how often waiting connections give grown read buffers back


def bind_listener(host: str, port: int) -> socket.socket:
    """Bind without listening: the first thing a broker does, so that a taken port fails its start-up before it
    has touched its data directory or the cluster, while connections are still refused (a port that accepts
    means a broker ready to serve) until SocketServer.bind listens."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    listener.setblocking(False)
    return listener


class SocketServer:
    def __init__(self, host: str, port: int, apis: KafkaApis, max_request_bytes: int, backlog: int = 1024,
                 max_idle_ms: int = 600_000, queued_max_request_bytes: int = 0,
                 max_connections_per_ip: int = 0, listener: socket.socket | None = None,
                 spec: Listener | None = None, ssl_factory: SslFactory | None = None,
                 sasl: SaslServer | None = None, principal_mapper: PrincipalMapper | None = None) -> None:
        """``listener``: a socket bound beforehand (bind_listener), else bind() binds one; bind() listens.
        ``spec``: the listener's name and protocol (default PLAINTEXT); ``ssl_factory`` for SSL/SASL_SSL,
        ``sasl`` for SASL_PLAINTEXT/SASL_SSL."""
        self.spec = spec or Listener("PLAINTEXT", "PLAINTEXT", host, port)
        self.ssl_factory = ssl_factory if self.spec.uses_tls else None
        self.sasl = sasl if self.spec.uses_sasl else None
        self.principal_mapper = principal_mapper or PrincipalMapper()
        if self.spec.uses_tls and ssl_factory is None:
            raise ValueError(f"listener {self.spec.name}: TLS without an SslFactory")
        if self.spec.uses_sasl and sasl is None:
            raise ValueError(f"listener {self.spec.name}: SASL without a SaslServer")
        self.host = host
        self.port = listener.getsockname()[1] if listener is not None else port
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self.backlog = backlog
        self._listener: socket.socket | None = listener
        self._listening = False
        self.max_idle_s = max_idle_ms / 1000.0
        self.pool = MemoryPool(queued_max_request_bytes)  # queued.max.request.bytes (0: no ceiling)
        self.max_connections_per_ip = max_connections_per_ip  # max.connections.per.ip (0: no limit)
        self.bad_requests = RateLimitedLog(logging.getLogger("ferry.broker.server.connection"))
        self.refused_connections = 0
        self.refused_handshakes = 0
        self._handshakes: set[asyncio.Task] = set()
        self._per_ip: dict[str, int] = {}
        self._accept_task: asyncio.Task | None = None
        self._reaper_task: asyncio.Task | None = None
        self._connections: dict[asyncio.Task, Connection] = {}

    def bind(self) -> int:
        """Bind and listen (synchronously, so a taken port fails start-up); returns the bound port."""
        if self._listener is None:
            self._listener = bind_listener(self.host, self.port)
        self._listener.listen(self.backlog)
        self._listening = True
        self.port = self._listener.getsockname()[1]
        return self.port

    def start(self) -> None:
        if not self._listening:
            self.bind()
        self._accept_task = asyncio.create_task(self._accept_loop(), name="acceptor")
        self._reaper_task = asyncio.create_task(self._reap_idle(), name="idle connection reaper")

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                sock, addr = await loop.sock_accept(self._listener)
            except asyncio.CancelledError:
                raise
            except OSError as e:  # EMFILE and friends: back off instead of spinning
                log.error("accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            ip = addr[0]
            if self.max_connections_per_ip > 0 and self._per_ip.get(ip, 0) >= self.max_connections_per_ip:
                self.refused_connections += 1
                self.bad_requests.warning("refusing a connection from %s: %d connections from that address already "
                                          "(max.connections.per.ip)", ip, self.max_connections_per_ip)
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{ip}:{addr[1]}"
            if self.ssl_factory is None and self.sasl is None:
                self._serve(Connection(sock, peer, self.apis, self.max_request_bytes, self.pool, self.bad_requests,
                                       self._session(ip)))
                continue
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
            handshake = asyncio.create_task(self._secure(sock, peer, ip), name=f"handshake {peer}")
            self._handshakes.add(handshake)
            handshake.add_done_callback(self._handshakes.discard)

    def _session(self, ip: str) -> Session:
        return Session(ANONYMOUS, ip, self.spec.name, self.spec.security_protocol)

    def _serve(self, conn: Connection, counted: bool = False) -> None:
        ip = conn.peer.rpartition(":")[0]
        if not counted:
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        task = asyncio.create_task(conn.serve(), name=f"connection {conn.peer}")
        self._connections[task] = conn
        task.add_done_callback(self._forget)

    async def _secure(self, sock: socket.socket, peer: str, ip: str) -> None:
        """TLS handshake (and the certificate's principal), then the Connection, with an authenticator on
        SASL listeners. A refused handshake is logged (rate-limited) with the client's address."""
        session = self._session(ip)
        served = False
        try:
            if self.ssl_factory is not None:
                try:
                    sock = await tls_accept(sock, self.ssl_factory.context())
                    principal = certificate_principal(sock, self.principal_mapper)
                except TlsRefused as e:
                    self.refused_handshakes += 1
                    self.bad_requests.warning("refused a connection from %s on %s: %s", peer, self.spec.name, e)
                    sock.close()
                    return
                if principal is not None and self.sasl is None:
                    session.principal = principal
                    log.info("authenticated %s from %s on %s (TLS client certificate)", principal, peer,
                             self.spec.name)
            auth = self.sasl.authenticator(session, peer) if self.sasl is not None else None
            self._serve(Connection(sock, peer, self.apis, self.max_request_bytes, self.pool, self.bad_requests,
                                   session, auth), counted=True)
            served = True
        finally:
            if not served:
                self._release(ip)

    def _forget(self, task: asyncio.Task) -> None:
        conn = self._connections.pop(task, None)
        if conn is not None:
            self._release(conn.peer.rpartition(":")[0])

    def _release(self, ip: str) -> None:
        left = self._per_ip.get(ip, 1) - 1
        if left > 0:
            self._per_ip[ip] = left
        else:
            self._per_ip.pop(ip, None)

    async def _reap_idle(self) -> None:
        """Close connections idle longer than connections.max.idle.ms (Kafka's default: 10 minutes) with no
        request unanswered, so clients that vanish without a FIN do not hold sockets and buffers forever."""
        loop = asyncio.get_running_loop()
        period = min(30.0, max(0.05, self.max_idle_s / 4))
        next_idle_check = loop.time() + period
        while True:
            await asyncio.sleep(min(period, BUFFER_RELEASE_S))
            for conn in list(self._connections.values()):
                conn.release_idle_buffer()  # a connection waiting with nothing buffered keeps a few KB
            now = loop.time()
            if now < next_idle_check:
                continue
            next_idle_check = now + period
            for task, conn in list(self._connections.items()):
                if conn.idle_since(now) > self.max_idle_s:
                    log.info("closing connection from %s: idle for more than %.0f ms (connections.max.idle.ms)",
                             conn.peer, self.max_idle_s * 1000)
                    task.cancel()

    def queues(self) -> tuple[int, int, int]:
        """(connections, requests read and not yet answered, ready answers not yet written), for the metrics."""
        conns = list(self._connections.values())
        unanswered = ready = 0
        for conn in conns:
            u, r = conn.queued()
            unanswered += u
            ready += r
        return len(conns), unanswered, ready

    async def stop(self) -> None:
        """Stop accepting and close every connection (pending responses are dropped)."""
        for t in (self._accept_task, self._reaper_task):
            if t is not None:
                t.cancel()
                await asyncio.gather(t, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        tasks = list(self._connections) + list(self._handshakes)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


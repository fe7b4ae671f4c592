"""AsyncBrokerConnection: the asyncio face of the one Kafka connection (wire/broker_connection.py), for a
broker's own requests to other brokers from its event loop: the replica fetchers' OffsetForLeaderEpoch and
Fetch (Kafka's ReplicaFetcherThread's NetworkClient) and the coordinator's WriteTxnMarkers.

It frames requests as the blocking face does (``frame_request``) and checks answers the same way (the
correlation id of the one outstanding request), one request at a time, the answers read straight into their
own buffers (wire/answer_reader.py): a fetcher waits for each answer
before its next request, and the markers are few and small. Any failure (refused, reset, timed out, a bad
frame) closes the connection, since the stream position is then unknown, and raises BrokerUnavailableError
naming the broker; the next request connects again.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct

from ferry.wire.answer_reader import AnswerReader
from ferry.wire.connection_errors import BrokerUnavailableError, unavailable
from ferry.wire.protocol.header import Buffers
from ferry.wire.request_writer import MAX_RESPONSE_BYTES, answer_problem, frame_request
from ferry.wire.sasl_login import AuthenticationError, ClientSecurity, sasl_login

_CORR = struct.Struct(">i")


class AsyncBrokerConnection:
    """One TCP connection to one broker on an asyncio loop; one request at a time (callers may share it)."""

    def __init__(self, node_id: int, host: str, port: int, client_id: str,
                 connect_timeout_s: float = 5.0, security: ClientSecurity | None = None,
                 receive_buffer_bytes: int | None = None) -> None:
        """``security``: TLS and/or SASL towards the broker (a secured inter-broker listener), else plaintext.
        ``receive_buffer_bytes``: the socket's SO_RCVBUF, set before it connects (None: the system's, which
        starts small and grows only as the reads keep up)."""
        self.security = security or ClientSecurity()
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.receive_buffer_bytes = receive_buffer_bytes
        self.connect_timeout_s = connect_timeout_s
        self.correlation_id = 0  # the one the next request carries
        self._reader: AnswerReader | None = None
        self._lock = asyncio.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._reader is not None

    def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and reader.transport is not None:
            reader.transport.close()

    async def request(self, api_key: int, api_version: int, body: Buffers, timeout_s: float) -> memoryview:
        """Send one request and return its answer's body (after the correlation id), connecting first if
        needed; BrokerUnavailableError (the connection closed) if the broker does not answer in
        ``timeout_s``, AuthenticationError (SaslLoginError for SASL) if it will not let this client in."""
        async with self._lock:
            try:
                if self._reader is None:
                    await asyncio.wait_for(self._connect(), self.connect_timeout_s)
                return await asyncio.wait_for(self._exchange(api_key, api_version, body), timeout_s)
            except (BrokerUnavailableError, AuthenticationError):  # the login refused: retrying the same cannot help
                self.close()
                raise
            except ssl.SSLError as e:  # the broker's certificate refused, or ours
                self.close()
                raise AuthenticationError(f"TLS handshake with broker {self.node_id} at {self.address} failed: "
                                          f"{e.reason or e}") from None
            except (OSError, EOFError, TimeoutError) as e:  # IncompleteReadError is an EOFError
                self.close()
                raise unavailable(self.node_id, self.address, "request failed", e) from None

    async def _connect(self) -> None:
        tls = self.security.ssl_context
        reader = AnswerReader(MAX_RESPONSE_BYTES)
        loop = asyncio.get_running_loop()
        sock = None
        try:
            if self.receive_buffer_bytes:  # before the connect: the window scale is agreed in the handshake
                family, kind, proto, _, address = (await loop.getaddrinfo(self.host, self.port,
                                                                          type=socket.SOCK_STREAM))[0]
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
                await loop.sock_connect(sock, address)
                await loop.create_connection(lambda: reader, sock=sock, ssl=tls,
                                             server_hostname=self.host if tls else None)
            else:
                await loop.create_connection(lambda: reader, self.host, self.port, ssl=tls,
                                             server_hostname=self.host if tls else None)
        except BaseException:
            if reader.transport is not None:  # timed out after the TCP connect (in the TLS handshake)
                reader.transport.close()
            elif sock is not None:
                sock.close()
            raise
        self._reader = reader
        if self.security.sasl is not None:
            await sasl_login(lambda key, version, body: self._exchange(key, version, [body]), self.security.sasl)

    async def _exchange(self, api_key: int, api_version: int, body: Buffers) -> memoryview:
        reader = self._reader
        assert reader is not None and reader.transport is not None
        corr = self.correlation_id
        self.correlation_id = (corr + 1) & 0x7FFFFFFF
        parts, _ = frame_request(api_key, api_version, corr, self.client_id, body)
        reader.transport.writelines(parts)
        await reader.drain()
        frame = await reader.read()
        problem = answer_problem(len(frame), _CORR.unpack_from(frame)[0], corr)
        if problem is not None:
            raise unavailable(self.node_id, self.address, *problem)
        return frame[4:]

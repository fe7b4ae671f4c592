"""AsyncBrokerConnection: the asyncio face of the one Kafka connection (wire/broker_connection.py), for a
broker's own requests to other brokers from its event loop: the replica fetchers' OffsetForLeaderEpoch and
Fetch (Kafka's ReplicaFetcherThread's NetworkClient) and the coordinator's WriteTxnMarkers.

It frames requests as the blocking face does (``frame_request``) and checks answers the same way (the
correlation id of the one outstanding request), one request at a time: a fetcher waits for each answer
before its next request, and the markers are few and small. Any failure (refused, reset, timed out, a bad
frame) closes the connection, since the stream position is then unknown, and raises BrokerUnavailableError
naming the broker; the next request connects again.
"""

from __future__ import annotations

import asyncio
import ssl
import struct

from ferry.wire.connection_errors import BrokerUnavailableError, unavailable
from ferry.wire.protocol.header import Buffers
from ferry.wire.request_writer import answer_problem, frame_request
from ferry.wire.sasl_login import AuthenticationError, ClientSecurity, sasl_login

_SIZE_CORR = struct.Struct(">ii")


class AsyncBrokerConnection:
    """One TCP connection to one broker on an asyncio loop; one request at a time (callers may share it)."""

    def __init__(self, node_id: int, host: str, port: int, client_id: str,
                 connect_timeout_s: float = 5.0, security: ClientSecurity | None = None,
                 read_buffer: int = 1 << 16) -> None:
        """``security``: TLS and/or SASL towards the broker (a secured inter-broker listener), else plaintext.
        ``read_buffer``: asyncio's StreamReader limit (its default); the transport pauses reading at twice it, so
        an answer of many MiB read through the default costs an event-loop wake-up per 128 KiB."""
        self.security = security or ClientSecurity()
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.correlation_id = 0  # the one the next request carries
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self.read_buffer = read_buffer

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._writer is not None

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()

    async def request(self, api_key: int, api_version: int, body: Buffers, timeout_s: float) -> memoryview:
        """Send one request and return its answer's body (after the correlation id), connecting first if
        needed; BrokerUnavailableError (the connection closed) if the broker does not answer in
        ``timeout_s``, AuthenticationError (SaslLoginError for SASL) if it will not let this client in."""
        async with self._lock:
            try:
                if self._writer is None:
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
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=tls, server_hostname=self.host if tls else None, limit=self.read_buffer)
        if self.security.sasl is not None:
            await sasl_login(lambda key, version, body: self._exchange(key, version, [body]), self.security.sasl)

    async def _exchange(self, api_key: int, api_version: int, body: Buffers) -> memoryview:
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        corr = self.correlation_id
        self.correlation_id = (corr + 1) & 0x7FFFFFFF
        parts, _ = frame_request(api_key, api_version, corr, self.client_id, body)
        writer.writelines(parts)
        await writer.drain()
        size, answered = _SIZE_CORR.unpack(await reader.readexactly(8))
        problem = answer_problem(size, answered, corr)
        if problem is not None:
            raise unavailable(self.node_id, self.address, *problem)
        return memoryview(await reader.readexactly(size - 4))

"""TlsSocket: a client's TLS connection to a broker with the face BrokerConnection uses on a plain socket.

An SSLSocket refuses ``sendmsg`` (a TLS record is encrypted from one buffer), so a request's parts are joined
here, at most ``CHUNK`` bytes at a time: the copy costs less than the encryption that follows. A write the
connection means not to wait for (``MSG_DONTWAIT``, its write-behind) is made only when the socket is writable
and is one chunk, so it waits at most for that chunk. Decrypted bytes may sit in the TLS buffer while the
socket itself has nothing to read; `pending` tells the connection so before it polls the socket."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence

from ferry.wire.connection_errors import unavailable
from ferry.wire.sasl_login import AuthenticationError

CHUNK = 256 * 1024


class TlsSocket:
    """An SSLSocket with ``sendmsg`` (joined, chunked) and the rest of the calls BrokerConnection makes."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.recv_into = sock.recv_into
        self.settimeout = sock.settimeout
        self.gettimeout = sock.gettimeout
        self.fileno = sock.fileno
        self.pending = sock.pending

    @classmethod
    def connect(cls, sock: socket.socket, context: ssl.SSLContext, node_id: int, host: str, port: int
                ) -> TlsSocket:
        """Handshake on a connected socket (its timeout applies, the name checked is ``host``); closes it and
        raises AuthenticationError if the broker's certificate is refused or it refuses ours,
        BrokerUnavailableError if the connection breaks."""
        try:
            return cls(context.wrap_socket(sock, server_hostname=host))
        except ssl.SSLError as e:
            sock.close()
            raise AuthenticationError(f"TLS handshake with broker {node_id} at {host}:{port} failed: "
                                      f"{e.reason or e}") from None
        except OSError as e:
            sock.close()
            raise unavailable(node_id, f"{host}:{port}", "TLS handshake failed", e) from None

    def sendmsg(self, buffers: Sequence[bytes | bytearray | memoryview], ancdata: Sequence = (),
                flags: int = 0) -> int:
        """Send from the front of ``buffers`` (up to CHUNK bytes, all of them when the socket blocks); returns
        the bytes sent, as socket.sendmsg does."""
        data = bytearray()
        for b in buffers:
            room = CHUNK - len(data)
            if room <= 0:
                break
            data += memoryview(b).cast("B")[:room]
        if not data:
            return 0
        self.sock.sendall(data)
        return len(data)

    def close(self) -> None:
        self.sock.close()

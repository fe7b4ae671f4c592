"""BrokerConnection: the one Kafka connection to a broker. Every raw client request goes through it (WireClient's
Metadata/ListOffsets/InitProducerId, the mirror's pipelined Fetch and Produce, the message-set producer and
consumer); a broker's own requests to other brokers (replica fetches, transaction markers) go through its asyncio
face, AsyncBrokerConnection (wire/async_broker_connection.py), which shares the framing.

One blocking TCP connection to one broker, with pipelining: requests go out back to back and a broker answers a
connection's requests strictly in order, so the correlation id of the oldest outstanding request follows from a
counter; per request only the caller's ``context`` is kept. Two ways out and two ways in, so that the hot paths pay
for no framing they do not need:

- ``send(api_key, version, body)`` encodes the request header; ``send_frame(parts, context)`` writes a request the
  caller framed itself around ``correlation_id`` (the message-set clients' pre-encoded templates). Both are one
  ``sendmsg`` of the parts: record bytes are referenced, never copied. With ``wait=False`` what the socket does not
  take is queued and written later, in order (write-behind: `RequestWriter`, wire/request_writer.py, the writing
  half of this class).
- ``receive()`` returns the oldest answer's body in a buffer of its own (callers may keep views into it, as the
  mirror does with fetched records; ``push``: other connections' queued requests are written while it waits);
  ``next_answer()`` returns ``(context, body)`` as a view into the connection's read buffer, valid until the next
  receive (the message-set clients parse in place). Both read in bulk (one ``recv_into`` often brings several
  answers); an answer larger than what is buffered is read by ``receive`` straight into its own buffer, so at most
  the read buffer is copied.

Any socket error or timeout closes the connection (the byte stream position is then unknown) and raises
BrokerUnavailableError naming the broker; every outstanding request is lost and the caller retries. A closed
connection connects again on the next send (callers that must not, check ``connected``).
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections import deque
from collections.abc import Sequence

from ferry.wire.connection_errors import BrokerUnavailableError, ClientError, unavailable
from ferry.wire.protocol.header import Buffers
from ferry.wire.request_writer import RequestWriter, answer_problem, frame_request, socket_ready
from ferry.wire.sasl_login import (
    PLAINTEXT,
    ClientSecurity,
    SaslLoginError,
    sasl_login_blocking,
)
from ferry.wire.socket_reads import recv_exactly, reusable_buffer
from ferry.wire.tls_socket import TlsSocket

_SIZE_CORR = struct.Struct(">ii")
READ_BUFFER_BYTES = 64 * 1024  # default read-ahead: small answers in one recv, little copied for large ones


class BrokerConnection:
    """One TCP connection to one broker; requests may be pipelined, answers come back in order.

    ``send_buffer_bytes`` / ``receive_buffer_bytes`` set the socket's SO_SNDBUF / SO_RCVBUF (None: the
    system's); ``read_buffer_bytes`` is the initial size of the buffer answers are read into (it grows
    for ``next_answer`` of a larger answer). ``security``: TLS (the socket wrapped after connecting) and/or SASL
    (a login before the first request) towards a secured listener; plaintext pays nothing for it.
    """

    def __init__(self, node_id: int, host: str, port: int, client_id: str = "ferry",
                 timeout_s: float = 30.0, connect_timeout_s: float = 5.0, *,
                 send_buffer_bytes: int | None = None, receive_buffer_bytes: int | None = None,
                 read_buffer_bytes: int = READ_BUFFER_BYTES, security: ClientSecurity = PLAINTEXT) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.security = security
        self._sock: socket.socket | TlsSocket | None = None
        self._tls: TlsSocket | None = None  # the socket when it is TLS: decrypted bytes may wait in it
        self._reauth_at = self._session_end = 0.0  # when to log in again (KIP-368 session lifetime); 0: never
        self._pending: deque[object] = deque()  # the caller's context per outstanding request, oldest first
        self._writer = RequestWriter(self._pending)
        self._write = self._writer.write  # bound once: called per request
        self._buf = bytearray(max(read_buffer_bytes, 8))
        self._view = memoryview(self._buf)
        self._start = 0  # first byte in the read buffer not handed out yet
        self._end = 0  # end of the bytes read

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def correlation_id(self) -> int:
        """The one the next request carries (read it to frame a request for `send_frame`)."""
        return self._writer.correlation_id

    @property
    def unsent(self) -> int:
        """Bytes of requests sent with ``wait=False`` that the socket has not taken yet."""
        return self._writer.unsent

    # ------------------------------------------------------------------ sending
    def send(self, api_key: int, api_version: int, body: Buffers, context: object = None, *,
             wait: bool = True) -> int:
        """Write one request (header v1 encoded here); returns its correlation id. The answer is read with
        `receive` or `next_answer` (which hands back ``context``). ``wait``: as `send_frame`'s."""
        parts, nbytes = frame_request(api_key, api_version, self._writer.correlation_id, self.client_id, body)
        return self.send_frame(parts, context, nbytes, wait=wait)

    def send_frame(self, parts: Sequence[bytes | bytearray | memoryview], context: object = None,
                   nbytes: int | None = None, *, wait: bool = True) -> int:
        """Write one request the caller framed (size, header v1 carrying `correlation_id`, body) with one
        ``sendmsg`` of ``parts`` (byte buffers; ``nbytes`` their total if known); returns its correlation id.

        ``wait=False``: write what the socket takes now and queue the rest, which `push`, `answer_ready`
        and other connections' ``receive(push=...)`` write later, and any blocking call on this connection
        first (so answers are never waited for before their requests are out). The parts must stay
        unchanged until then."""
        if self._reauth_at and not self._pending and time.monotonic() >= self._reauth_at:
            self._renew()
        sock = self._sock or self.connect()
        try:
            return self._write(sock, parts, context, nbytes, wait)
        except OSError as e:
            raise self.fail("send failed", e) from None

    def push(self) -> bool:
        """Write queued request bytes as far as the socket takes them now (never waits); True when none are
        left. A socket error closes the connection (BrokerUnavailableError, as a failed send)."""
        writer = self._writer
        if not writer.queued or self._sock is None:
            return True  # nothing queued, or closed: close() dropped the queue with the requests
        try:
            writer.push(self._sock)
        except OSError as e:
            raise self.fail("send failed", e) from None
        return not writer.queued

    # ------------------------------------------------------------------ connecting
    def connect(self) -> socket.socket | TlsSocket:
        """Connect now if not connected (a send connects on first use); BrokerUnavailableError if it cannot,
        AuthenticationError (SaslLoginError for SASL) if the broker will not let this client in."""
        if self._sock is None:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
            except OSError as e:
                raise BrokerUnavailableError(f"cannot connect to broker {self.node_id} at {self.address}: {e}"
                                             ) from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer_bytes:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
            self._open(sock)
        return self._sock  # type: ignore[return-value]

    def _open(self, sock: socket.socket) -> None:
        """A fresh connection made ready: with TLS its handshake (under the connect timeout), with SASL the login."""
        if self.security.ssl_context is not None:
            sock = self._tls = TlsSocket.connect(sock, self.security.ssl_context, self.node_id, self.host, self.port)
        sock.settimeout(self.timeout_s)
        self._sock = sock
        if self.security.sasl is not None:
            self._login()

    def _login(self) -> None:
        """SASL with nothing outstanding; correlation ids count on after it as before (a request may be framed)."""
        corr, self._reauth_at = self._writer.correlation_id, 0.0
        try:
            lifetime = sasl_login_blocking(lambda k, v, body: self.request(k, v, [body]), self.security.sasl)
        except SaslLoginError as e:
            self.close()
            raise SaslLoginError(f"broker {self.node_id} at {self.address}: {e}") from None
        self._writer.correlation_id = corr
        if lifetime > 0:  # as Kafka's clients: well before the end (85%), so a request in flight is not cut
            now = time.monotonic()
            self._reauth_at, self._session_end = now + lifetime * 0.85 / 1000, now + lifetime / 1000

    def _renew(self) -> None:
        """Past the re-login time, between requests: log in again, or reconnect if the broker ended the session."""
        self._login() if time.monotonic() < self._session_end - 0.05 else self.close()

    def close(self) -> None:
        """Close the socket; outstanding requests and buffered answers are dropped."""
        sock, self._sock, self._tls, self._reauth_at = self._sock, None, None, 0.0
        self._pending.clear()
        self._writer.clear()
        self._start = self._end = 0
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def fail(self, what: str, err: BaseException | None = None) -> BrokerUnavailableError:
        """Close (the stream position is unknown) and return the error to raise, naming the broker and how
        many requests are lost (their effect on the broker is unknown)."""
        lost = len(self._pending)
        self.close()
        return unavailable(self.node_id, self.address, what, err, lost)

    # ------------------------------------------------------------------ receiving
    def receive(self, timeout_s: float | None = None, into: bytearray | None = None,
                push: Sequence[BrokerConnection] = ()) -> memoryview:
        """The body of the answer to the oldest outstanding request (after its correlation id), in a buffer
        of its own; ``timeout_s`` overrides the socket timeout for this answer.

        ``into``: receive into this buffer instead (grown when too small, kept at its largest), for a caller
        done with each answer before the next, such as the mirror's fetches: a fresh buffer per answer cost
        zeroing and faulting in megabytes of new memory every time. The view is valid until that next call.

        ``push``: other connections whose queued requests (``send(wait=False)``) are written whenever this
        one waits for its answer. One that fails is closed (its requests lost, as `in_flight` shows) and
        this receive goes on.
        """
        self._check_outstanding()
        sock = self._sock
        assert sock is not None
        try:
            if timeout_s is not None:
                sock.settimeout(timeout_s)
            if self._writer.queued:
                self._writer.flush(sock)
            wait = (lambda: self._wait_pushing(push)) if push else None
            if wait is not None and self._end - self._start < 8:
                wait()
            size = self._frame_size()
            body = reusable_buffer(into, size - 4)
            start = self._start + 8
            have = min(self._end - start, size - 4)
            body[:have] = self._view[start: start + have]
            self._start = start + have
            if have < size - 4:
                recv_exactly(sock, memoryview(body)[have:size - 4], wait)
        except BrokerUnavailableError:
            raise
        except OSError as e:  # includes the socket timeout
            raise self.fail("receive failed", e) from None
        finally:
            if timeout_s is not None and self._sock is not None:
                self._sock.settimeout(self.timeout_s)
        self._pending.popleft()
        return memoryview(body)[:size - 4]

    def next_answer(self) -> tuple[object, memoryview]:
        """(context, body) of the oldest outstanding request's answer; ``body`` (after the correlation id) is
        a view into the read buffer, valid until the next receive on this connection."""
        start = self._start
        have = self._end - start
        if have >= 8 and self._pending:  # the hot path: a whole answer already read (checks as _frame_size's)
            size, corr = _SIZE_CORR.unpack_from(self._buf, start)
            if 4 <= size <= have - 4 and corr == (self._writer.correlation_id - len(self._pending)) & 0x7FFFFFFF:
                self._start = start + 4 + size
                return self._pending.popleft(), self._view[start + 8: start + 4 + size]
        self._check_outstanding()
        try:
            size = self._frame_size()
            self._fill(4 + size)
        except BrokerUnavailableError:
            raise
        except OSError as e:  # includes the socket timeout
            raise self.fail("receive failed", e) from None
        start = self._start
        self._start = start + 4 + size
        return self._pending.popleft(), self._view[start + 8: start + 4 + size]

    def read_answers(self) -> list[tuple[object, memoryview]]:
        """Every answer already whole in the read buffer, oldest first, or else (blocking) the oldest one:
        ``(context, body)`` as `next_answer`'s, the views valid until the next receive. One call per read
        from the socket, however many answers it brought (the producer's many small ones)."""
        pending, unpack, writer = self._pending, _SIZE_CORR.unpack_from, self._writer
        while True:
            out = []
            buf, view, start, end = self._buf, self._view, self._start, self._end
            expected = (writer.correlation_id - len(pending)) & 0x7FFFFFFF
            while end - start >= 8 and pending:
                size, corr = unpack(buf, start)
                if not 4 <= size <= end - start - 4 or corr != expected:
                    break  # not whole yet, or wrong: next_answer reads on, or fails naming it
                out.append((pending.popleft(), view[start + 8: start + 4 + size]))
                start += 4 + size
                expected = (expected + 1) & 0x7FFFFFFF
            self._start = start
            if out:
                return out
            if end - start >= 8 or not pending or self._sock is None:
                return [self.next_answer()]  # a large or bad answer, or nothing to wait for: its checks
            try:  # the common wait: less than a header buffered, read once and parse again
                self._read_once(self._sock)
            except OSError as e:  # includes the socket timeout
                raise self.fail("receive failed", e) from None

    def answer_ready(self) -> bool:
        """Whether the oldest outstanding answer has begun to arrive (bytes buffered or the socket readable),
        so that reading it does not wait for the broker: a caller with other work (the mirror, several
        rounds of produce requests in flight) polls its pipelined requests with this."""
        if not self._pending or self._sock is None:
            return False
        if self._end > self._start or (self._tls is not None and self._tls.pending()):
            return True
        if self._writer.queued and not self.push():
            return False
        try:
            return socket_ready(self._sock, select.POLLIN)
        except (OSError, ValueError):  # closed under us: reading fails at once, which is an answer too
            return True

    def request(self, api_key: int, api_version: int, body: Buffers) -> memoryview:
        """Send and wait for the answer (nothing else may be outstanding)."""
        if self._pending:
            raise ClientError(f"broker {self.node_id}: {len(self._pending)} requests still outstanding")
        self.send(api_key, api_version, body)
        return self.receive()

    def _check_outstanding(self) -> None:
        if self._sock is None:
            raise self.fail("connection closed")
        if not self._pending:
            raise ClientError(f"no request outstanding on broker {self.node_id}")

    def _frame_size(self) -> int:
        """Size field of the oldest answer (its correlation id checked), with its first 8 bytes buffered."""
        self._fill(8)
        size, corr = _SIZE_CORR.unpack_from(self._buf, self._start)
        problem = answer_problem(size, corr, (self._writer.correlation_id - len(self._pending)) & 0x7FFFFFFF)
        if problem is not None:
            raise self.fail(*problem)
        return size

    def _fill(self, need: int) -> None:
        """Read until ``need`` bytes from the read position are buffered (OSError on a socket failure)."""
        if self._end - self._start >= need:
            return
        sock = self._sock
        if sock is None:
            raise ConnectionResetError("connection closed")
        have = self._end - self._start
        if need > len(self._buf):  # one answer larger than the buffer: grow it
            grown = bytearray(need)
            grown[:have] = self._view[self._start: self._end]
            self._buf, self._view = grown, memoryview(grown)
            self._start, self._end = 0, have
        while self._end - self._start < need:
            self._read_once(sock)

    def _wait_pushing(self, push: Sequence[BrokerConnection]) -> None:
        """Until this socket has bytes to read, write the queued requests of the ``push`` connections as
        their sockets take them (returns at once when none has any). TimeoutError after the socket's
        timeout; a push connection that fails is closed by its `push`, and its owner finds its requests
        lost."""
        sock = self._sock
        assert sock is not None
        if self._tls is not None and self._tls.pending():
            return  # decrypted bytes already wait: polling the socket would not see them
        deadline = 0.0
        while True:
            writers = {c._sock: c for c in push if c._sock is not None and c._writer.queued}
            if not writers:
                return
            now = time.monotonic()
            if not deadline:
                deadline = now + (sock.gettimeout() or self.timeout_s)
            elif now >= deadline:
                raise TimeoutError("timed out")
            poller = select.poll()  # not select(): file descriptors past 1023 are fine
            poller.register(sock, select.POLLIN)
            by_fd = {w.fileno(): c for w, c in writers.items()}
            for fd in by_fd:
                poller.register(fd, select.POLLOUT)
            readable = False
            for fd, events in poller.poll(max(1, int((deadline - now) * 1000))):
                if fd in by_fd:
                    try:
                        by_fd[fd].push()
                    except BrokerUnavailableError:
                        pass
                elif events:
                    readable = True
            if readable:
                return

    def _read_once(self, sock: socket.socket) -> None:
        """One recv into the free end of the read buffer (moving unread bytes to its front first)."""
        if self._writer.queued:  # the answer waited for may be to a request still queued
            self._writer.flush(sock)
        start, end = self._start, self._end
        if start:
            self._view[: end - start] = self._view[start:end]
            self._start, self._end = 0, end - start
        k = sock.recv_into(self._view[self._end:])
        if k == 0:
            raise ConnectionResetError("connection closed by the broker")
        self._end += k

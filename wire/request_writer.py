"""RequestWriter: the writing half of a BrokerConnection (a collaborator, as its read buffer is of the broker's
Connection): requests framed and written in order, each with one ``sendmsg`` of its parts (record bytes are
referenced, never copied), waited for or queued behind. ``frame_request`` is the framing every face of the
connection shares (the blocking one here, the asyncio one of a broker's replica fetcher and markers).

Queued (``wait=False``, write-behind): what the socket does not take now is written later, in order, by
`push`, by `answer_ready`, by any blocking call on the connection, and while another connection waits for
its answer (``receive(push=...)``), as a Kafka client's I/O thread writes while the application works. The
mirror queues its produce requests: written blocking, each round waited ~4 ms for the offline broker to
read 16 MB while the live broker's fetch answer waited unread (bench/RESULTS.md).

The writer raises OSError as the socket does; the connection turns it into BrokerUnavailableError (closing).
"""

from __future__ import annotations

import itertools
import select
import socket
import struct
from collections import deque
from collections.abc import Sequence

from ferry.wire.protocol.header import Buffers, request_header

_SIZE = struct.Struct(">i")
_MAX_PARTS = 512  # buffers per sendmsg (IOV_MAX is 1024 on Linux)
MAX_RESPONSE_BYTES = 512 * 1024 * 1024  # a bigger frame means we are not talking to a Kafka broker


def frame_request(api_key: int, api_version: int, correlation_id: int, client_id: str,
                  body: Buffers) -> tuple[list[memoryview], int]:
    """The parts of one request (size, header v1, the body's buffers, none copied) and their total size."""
    header = request_header(api_key, api_version, correlation_id, client_id)
    size = len(header) + sum(len(b) for b in body)
    return [memoryview(b).cast("B") for b in (_SIZE.pack(size), header, *body) if len(b)], 4 + size


def answer_problem(size: int, correlation_id: int, expected: int) -> tuple[str, ValueError] | None:
    """What is wrong with an answer's size and correlation id (``expected``: its request's), as the words for
    the connection's error, or None: fine."""
    if size < 4 or size > MAX_RESPONSE_BYTES:
        return "bad frame", ValueError(f"response size {size}")
    if correlation_id != expected:
        return "out of order", ValueError(f"correlation id {correlation_id}, expected {expected}")
    return None


class RequestWriter:
    """Writes one connection's requests in order and numbers them: owns the correlation counter and the
    queue of bytes not written yet; records each written request's context in ``pending`` (the deque the
    connection's reading half takes answers' contexts from, oldest first)."""

    def __init__(self, pending: deque[object]) -> None:
        self.correlation_id = 0  # the one the next request carries
        self._pending = pending
        self._unsent: deque[memoryview] = deque()  # bytes of requests written with wait=False, not taken yet

    @property
    def unsent(self) -> int:
        """Bytes of requests sent with ``wait=False`` that the socket has not taken yet."""
        return sum(len(v) for v in self._unsent)

    @property
    def queued(self) -> bool:
        """Whether some request bytes wait to be written."""
        return bool(self._unsent)

    def clear(self) -> None:
        """Drop the queue (the connection closed: its requests are lost)."""
        self._unsent.clear()

    def write(self, sock: socket.socket, parts: Sequence[bytes | bytearray | memoryview], context: object,
              nbytes: int | None, wait: bool) -> int:
        """Write one framed request with one ``sendmsg`` of ``parts`` (``nbytes`` their total if known); returns
        its correlation id. ``wait=False``: write what the socket takes now and queue the rest (the parts must
        stay unchanged until written)."""
        corr = self.correlation_id
        if not wait:
            self._unsent.extend(memoryview(p).cast("B") for p in parts if len(p))
            self.push(sock)
        else:
            if self._unsent:
                self.flush(sock)
            sent = sock.sendmsg(parts if len(parts) <= _MAX_PARTS else parts[:_MAX_PARTS])
            if sent < (nbytes if nbytes is not None else sum(map(len, parts))):
                _send_rest(sock, parts, sent)
        self._pending.append(context)
        self.correlation_id = (corr + 1) & 0x7FFFFFFF
        return corr

    def push(self, sock: socket.socket) -> None:
        """Write queued bytes as far as the socket takes them now (never waits)."""
        unsent = self._unsent
        while unsent and socket_ready(sock, select.POLLOUT):
            sent = sock.sendmsg(list(itertools.islice(unsent, _MAX_PARTS)), [], socket.MSG_DONTWAIT)
            while sent and sent >= len(unsent[0]):
                sent -= len(unsent.popleft())
            if sent:
                unsent[0] = unsent[0][sent:]

    def flush(self, sock: socket.socket) -> None:
        """Write every queued byte, waiting for the socket (its timeout applies)."""
        unsent = list(self._unsent)
        self._unsent.clear()
        _send_rest(sock, unsent, 0)


def _send_rest(sock: socket.socket, parts: Sequence[bytes | bytearray | memoryview], sent: int) -> None:
    """Finish a partial sendmsg (a full socket buffer) without copying the parts."""
    views = [memoryview(p).cast("B") for p in parts]
    i = 0
    while True:
        while i < len(views) and sent >= len(views[i]):
            sent -= len(views[i])
            i += 1
        if i == len(views):
            return
        views[i] = views[i][sent:]
        sent = sock.sendmsg(views[i: i + _MAX_PARTS])


def socket_ready(sock: socket.socket, event: int) -> bool:
    """Whether ``sock`` is ready for ``event`` (POLLIN, POLLOUT) now; poll, not select, so that file
    descriptors past 1023 work (a process with many connections)."""
    poller = select.poll()
    poller.register(sock, event)
    return bool(poller.poll(0))

"""RequestWriter: the writing half of BrokerConnection (a part of it, as its read buffer is of the broker's
Connection): requests framed and written in order, each with one ``sendmsg`` of its parts (record bytes are
referenced, never copied), waited for or queued behind.

Queued (``wait=False``, write-behind): what the socket does not take now is written later, in order, by
`push`, by `answer_ready`, by any blocking call on the connection, and while another connection waits for
its answer (``receive(push=...)``), as a Kafka client's I/O thread writes while the application works. The
mirror queues its produce requests: written blocking, each round waited ~4 ms for the offline broker to
read 16 MB while the live broker's fetch answer waited unread (bench/RESULTS.md).
"""

from __future__ import annotations

import itertools
import select
import socket
import struct
from collections import deque
from collections.abc import Callable, Sequence

from ferry.client.errors import BrokerUnavailableError
from ferry.wire.protocol.header import Buffers, request_header

_SIZE = struct.Struct(">i")
_MAX_PARTS = 512  # buffers per sendmsg (IOV_MAX is 1024 on Linux)


class RequestWriter:
    """The writing half of BrokerConnection (its attributes are set in BrokerConnection.__init__)."""

    _sock: socket.socket | None
    _pending: deque[object]
    _unsent: deque[memoryview]
    correlation_id: int
    client_id: str

    connect: Callable[[], socket.socket]  # BrokerConnection's
    fail: Callable[..., BrokerUnavailableError]  # BrokerConnection's

    @property
    def unsent(self) -> int:
        """Bytes of requests sent with ``wait=False`` that the socket has not taken yet."""
        return sum(len(v) for v in self._unsent)

    def send(self, api_key: int, api_version: int, body: Buffers, context: object = None, *,
             wait: bool = True) -> int:
        """Write one request (header v1 encoded here); returns its correlation id. The answer is read with
        `receive` or `next_answer` (which hands back ``context``). ``wait``: as `send_frame`'s."""
        header = request_header(api_key, api_version, self.correlation_id, self.client_id)
        size = len(header) + sum(len(b) for b in body)
        parts = [memoryview(b).cast("B") for b in (_SIZE.pack(size), header, *body) if len(b)]
        return self.send_frame(parts, context, 4 + size, wait=wait)

    def send_frame(self, parts: Sequence[bytes | bytearray | memoryview], context: object = None,
                   nbytes: int | None = None, *, wait: bool = True) -> int:
        """Write one request the caller framed (size, header v1 carrying `correlation_id`, body) with one
        ``sendmsg`` of ``parts`` (byte buffers; ``nbytes`` their total if known); returns its correlation id.

        ``wait=False``: write what the socket takes now and queue the rest, which `push`, `answer_ready`
        and other connections' ``receive(push=...)`` write later, and any blocking call on this connection
        first (so answers are never waited for before their requests are out). The parts must stay
        unchanged until then."""
        sock = self._sock or self.connect()
        corr = self.correlation_id
        try:
            if not wait:
                self._unsent.extend(memoryview(p).cast("B") for p in parts if len(p))
                self._push(sock)
            else:
                if self._unsent:
                    self._flush(sock)
                sent = sock.sendmsg(parts if len(parts) <= _MAX_PARTS else parts[:_MAX_PARTS])
                if sent < (nbytes if nbytes is not None else sum(map(len, parts))):
                    _send_rest(sock, parts, sent)
        except OSError as e:
            raise self.fail("send failed", e) from None
        self._pending.append(context)
        self.correlation_id = (corr + 1) & 0x7FFFFFFF
        return corr

    def push(self) -> bool:
        """Write queued request bytes as far as the socket takes them now (never waits); True when none are
        left. A socket error closes the connection (BrokerUnavailableError, as a failed send)."""
        if not self._unsent:
            return True
        sock = self._sock
        if sock is None:
            return True  # closed: close() dropped the queue with the requests
        try:
            self._push(sock)
        except OSError as e:
            raise self.fail("send failed", e) from None
        return not self._unsent

    def _push(self, sock: socket.socket) -> None:
        unsent = self._unsent
        while unsent and socket_ready(sock, select.POLLOUT):
            sent = sock.sendmsg(list(itertools.islice(unsent, _MAX_PARTS)), [], socket.MSG_DONTWAIT)
            while sent and sent >= len(unsent[0]):
                sent -= len(unsent.popleft())
            if sent:
                unsent[0] = unsent[0][sent:]

    def _flush(self, sock: socket.socket) -> None:
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

"""One client connection: 4-byte size framing, requests handled in arrival order, responses written in the
same order, record bytes sent with `os.sendfile` from the segment file straight to the socket.

Two tasks share the socket: the reader parses each frame and hands it to KafkaApis at once (so appends
happen in request order and a long-polling fetch does not stop the next request from being read); the
writer awaits the pending responses strictly in order and writes them. The queue between them is bounded,
which stops reading when a client does not read its responses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from typing import Any

from broker.protocol.primitives import ProtocolError
from broker.server.kafka_apis import CloseConnection, KafkaApis

log = logging.getLogger(__name__)

READ_BUFFER = 256 * 1024
MAX_IN_FLIGHT = 128
_SIZE = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_END = object()
# Answers that are already complete. Testing their type first skips asyncio.iscoroutine(), an ABC isinstance
# check that cost ~4% of the broker's CPU per produce request (py-spy, bench/RESULTS.md).
_READY = (bytes, bytearray, list)


class Connection:
    def __init__(self, sock: socket.socket, peer: str, apis: KafkaApis, max_request_bytes: int) -> None:
        self.sock = sock
        self.peer = peer
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self._fd = sock.fileno()
        self._buf = bytearray(READ_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._loop = asyncio.get_running_loop()

    # ------------------------------------------------------------------ lifecycle
    async def serve(self) -> None:
        queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        writer = asyncio.create_task(self._write_loop(queue), name=f"writer {self.peer}")
        reader = asyncio.create_task(self._read_loop(queue), name=f"reader {self.peer}")
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                # The client closed or sent something unanswerable: flush what it is owed, then close.
                if not writer.done():
                    await queue.put(_END)
                    await writer
            else:
                reader.cancel()
        finally:
            for t in (reader, writer):
                if not t.done():
                    t.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
            while not queue.empty():
                item = queue.get_nowait()
                if item is not _END and isinstance(item[1], asyncio.Future):
                    item[1].cancel()
            self.sock.close()

    # ------------------------------------------------------------------ reading
    async def _read_loop(self, queue: asyncio.Queue) -> None:
        apis = self.apis
        try:
            while True:
                head = await self._recv_exact(4)
                if head is None:
                    if self._end > self._start:
                        log.warning("connection from %s closed inside a size prefix", self.peer)
                    return
                size = _SIZE.unpack(head)[0]
                if size <= 0 or size > self.max_request_bytes:
                    log.warning("closing connection from %s: request size %d outside 1..%d (socket.request.max.bytes)",
                                self.peer, size, self.max_request_bytes)
                    return
                frame = await self._recv_exact(size)
                if frame is None:
                    log.warning("connection from %s closed inside a %d-byte request", self.peer, size)
                    return
                try:
                    correlation_id, result = apis.handle(frame)
                except (CloseConnection, ProtocolError) as e:
                    log.warning("closing connection from %s: %s", self.peer, e)
                    return
                except Exception:
                    log.exception("closing connection from %s: request handler failed", self.peer)
                    return
                if result is None:
                    continue
                if type(result) not in _READY and asyncio.iscoroutine(result):
                    result = asyncio.ensure_future(result)
                await queue.put((correlation_id, result))
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s: %s", self.peer, e)
        except Exception:
            log.exception("closing connection from %s: reading failed", self.peer)

    async def _recv_exact(self, n: int) -> bytearray | None:
        """n bytes (a writable bytearray: record batches get their offsets rewritten in place), or None at EOF."""
        start, end = self._start, self._end
        avail = end - start
        if avail >= n:
            self._start = start + n
            return self._buf[start:start + n]
        loop = self._loop
        sock = self.sock
        if n > READ_BUFFER // 2:
            out = bytearray(n)
            mv = memoryview(out)
            mv[:avail] = self._view[start:end]
            self._start = self._end = 0
            got = avail
            while got < n:
                k = await loop.sock_recv_into(sock, mv[got:])
                if k == 0:
                    self._end = 1  # mark "inside a frame" for the caller's message
                    return None
                got += k
            return out
        if start:
            self._buf[:avail] = self._view[start:end]
            self._start, self._end = 0, avail
        while self._end < n:
            k = await loop.sock_recv_into(sock, self._view[self._end:])
            if k == 0:
                return None
            self._end += k
        self._start = n
        return self._buf[:n]

    # ------------------------------------------------------------------ writing
    async def _write_loop(self, queue: asyncio.Queue) -> None:
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                correlation_id, result = item
                if isinstance(result, asyncio.Future):
                    try:
                        result = await result
                    except CloseConnection as e:
                        log.warning("closing connection from %s: %s", self.peer, e)
                        return
                    except Exception:
                        log.exception("closing connection from %s: request handler failed", self.peer)
                        return
                if result is None:
                    continue
                await self._send(correlation_id, result)
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s: %s", self.peer, e)
        except Exception:
            log.exception("closing connection from %s: writing a response failed", self.peer)

    async def _send(self, correlation_id: int, body: Any) -> None:
        loop = self._loop
        if isinstance(body, bytes | bytearray):
            await loop.sock_sendall(self.sock, _PREFIX.pack(len(body) + 4, correlation_id) + body)
            return
        size = 4 + sum(len(p) if isinstance(p, bytes | bytearray) else p.size for p in body)
        pending = bytearray(_PREFIX.pack(size, correlation_id))
        for part in body:
            if isinstance(part, bytes | bytearray):
                pending += part
                continue
            if pending:
                await self._send_more(pending)
                pending = bytearray()
            await self._sendfile(part.fd, part.position, part.size)
        if pending:
            await loop.sock_sendall(self.sock, pending)

    async def _send_more(self, data: bytearray) -> None:
        """Send bytes that file data will follow: MSG_MORE lets the kernel put both in the same segments."""
        try:
            n = self.sock.send(data, socket.MSG_MORE)
        except BlockingIOError:
            n = 0
        if n < len(data):
            await self._loop.sock_sendall(self.sock, memoryview(data)[n:])

    async def _sendfile(self, in_fd: int, offset: int, count: int) -> None:
        out_fd = self._fd
        while count > 0:
            try:
                n = os.sendfile(out_fd, in_fd, offset, count)
            except BlockingIOError:
                await self._writable()
                continue
            if n == 0:
                # The file is shorter than the slice promised: the frame cannot be completed.
                raise ConnectionError(f"segment file ended {count} bytes early at position {offset}")
            offset += n
            count -= n

    async def _writable(self) -> None:
        fut = self._loop.create_future()
        self._loop.add_writer(self._fd, _wake, fut)
        try:
            await fut
        finally:
            self._loop.remove_writer(self._fd)


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)

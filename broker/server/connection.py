"""One client connection: 4-byte size framing, requests handled in arrival order, responses written in the
same order, record bytes sent with `os.sendfile` from the segment file straight to the socket.

Two tasks share the socket. The reader takes every complete frame out of each `recv` and hands it to
KafkaApis at once (so appends happen in request order and a long-polling fetch does not stop the next
request from being read). Answers go into one ordered outbox: answers that are ready (plain bytes) are
packed back to back into a single buffer, so a pipelining client costs one `send` per burst of requests,
not one per request; answers still to come (a parked fetch, an fsync for acks=-1) and record slices for
sendfile keep their place in the line. The writer drains the outbox strictly in order. The number of
unanswered requests is bounded, which stops reading when a client does not read its responses.
Each answered request's moments are taken on the way for Kafka's request time phases (outbox.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections import deque
from collections.abc import Awaitable

from ferry.broker.server.channel_throttle import ChannelThrottle
from ferry.broker.server.connection_buffer import READ_BUFFER, WOKE_CLOSE, ReadBuffer
from ferry.broker.server.kafka_apis import KafkaApis
from ferry.broker.server.memory_pool import MemoryPool
from ferry.broker.server.outbox import Packed, now, ready_answers, record_packed, tail, timed_future
from ferry.broker.server.rate_limited_log import RateLimitedLog
from ferry.broker.server.request_context import ANONYMOUS, Session
from ferry.broker.server.request_metrics import follower_or
from ferry.broker.server.request_result import CloseConnection
from ferry.broker.server.sasl_gate import SaslAuthenticator, SaslGate
from ferry.broker.server.socket_sendfile import sendfile_all, writable
from ferry.broker.server.tls_send import is_tls, tls_writers
from ferry.wire.protocol.primitives import ProtocolError

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 128
_SIZE = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_CORRELATION = struct.Struct(">i")
_READY = (bytes, bytearray)


class Connection:
    """One client's requests in, their answers out in the same order (the reading: its ReadBuffer)."""

    def __init__(self, sock: socket.socket, peer: str, apis: KafkaApis, max_request_bytes: int,
                 pool: MemoryPool | None = None, bad_requests: RateLimitedLog | None = None,
                 session: Session | None = None, authenticator: SaslAuthenticator | None = None) -> None:
        self.sock = sock
        self.peer = peer
        self.session = session if session is not None else Session(ANONYMOUS, peer.rpartition(":")[0])
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self._bad = bad_requests if bad_requests is not None else RateLimitedLog(log)
        self._fd = sock.fileno()
        self._metrics = apis.request_metrics
        self._fast_produce, self._fast_produce_run = apis.produce.fast_path_for(self)  # ACLs: docs/acls.md
        self._quotas = apis.quotas  # docs/quotas.md: nothing per request while no quota is configured
        self._throttle = ChannelThrottle(apis.quotas, self.session)
        # The read buffer starts small and grows with the client's bursts; while the reader waits for data with
        # nothing buffered it holds no view of it, so the reaper can give a grown buffer back (release_idle_buffer).
        self._in = ReadBuffer(sock, peer, pool, self._bad, self._handle_frames, self._has_room_for_more)
        self._sasl = SaslGate(authenticator, self, self._in, self._bad)  # SASL listeners: first, authentication
        if is_tls(sock):  # TLS listeners: sends and record bytes through TLS (tls_send.py); plaintext unchanged
            self._send_bytes, self._sendfile = tls_writers(sock, self._writable)  # type: ignore[method-assign]
        self._loop = asyncio.get_running_loop()
        # outbox: Packed, or (correlation id, Future | list of parts, api key, times) for answers not plain bytes
        self._out: deque[Packed | tuple[int, asyncio.Future | list, int, list]] = deque()
        self._unanswered = 0
        self._reading_done = False
        self._writer_idle = False
        self._last_answered = self._loop.time()
        self._has_output = asyncio.Event()
        self._has_room = asyncio.Event()
        self._has_room.set()

    # ------------------------------------------------------------------ lifecycle
    async def serve(self) -> None:
        writer = asyncio.create_task(self._write_loop(), name=f"writer {self.peer}")
        reader = asyncio.create_task(self._read_loop(), name=f"reader {self.peer}")
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                # The client closed or sent something unanswerable: flush what it is owed, then close.
                self._reading_done = True
                self._has_output.set()
                if not writer.done():
                    await writer
            else:
                reader.cancel()
        finally:
            for t in (reader, writer):
                if not t.done():
                    t.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
            for item in self._out:
                if type(item) is tuple and isinstance(item[1], asyncio.Future):
                    item[1].cancel()
            self._out.clear()
            self._in.unregister_reader()
            self._sasl.close()
            self.sock.close()

    def idle_since(self, now: float) -> float:
        """Seconds since the last request arrived or answer went out; 0 while anything is owed."""
        if self._unanswered or self._out:
            return 0.0
        return now - max(self._last_answered, self._in.last_received)

    def queued(self) -> tuple[int, int]:
        """(requests read and not yet answered, answers ready and not yet written), for the metrics."""
        return self._unanswered, ready_answers(list(self._out))  # the copy: one C call, whole under the GIL

    def release_idle_buffer(self) -> bool:
        """Give a grown read buffer back while the reader waits with nothing buffered (called by the reaper)."""
        return self._in.release_idle_buffer()

    def _has_room_for_more(self) -> bool:
        return self._unanswered < MAX_IN_FLIGHT

    # ------------------------------------------------------------------ reading
    async def _read_loop(self) -> None:
        try:
            while True:
                if self._throttle.muted_until:  # a throttled client: read nothing until its time is over
                    await self._throttle.unmuted()
                need = self._in.handle_frames()  # the SaslGate's until authenticated
                if need < 0:
                    return
                if self._unanswered >= MAX_IN_FLIGHT:
                    self._has_room.clear()
                    await self._has_room.wait()
                if need > READ_BUFFER // 2:
                    frame = await self._in.receive_large_frame(need)
                    if frame is None:
                        return
                    ok = self.dispatch(frame)
                    self.flush_ready()
                    if not ok:
                        return
                    continue
                if not await self._in.fill(need):
                    if self._in.end > self._in.start:
                        self._bad.warning("connection from %s closed inside a request (%d bytes of it read)",
                                          self.peer, self._in.end - self._in.start)
                    return
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s: %s", self.peer, e)
        except Exception:
            log.exception("closing connection from %s: reading failed", self.peer)

    def _handle_frames(self) -> int:
        """Handle every complete frame in the buffer; returns the bytes the next frame needs in all
        (size prefix included), or -1 when the connection must close."""
        rb = self._in
        if rb.woke == WOKE_CLOSE:  # its readiness callback met a request that closes the connection
            return -1
        buf = rb.buf
        start, end = rb.start, rb.end
        handled = 0
        run: list = []  # consecutive Produce requests: handled together (ProduceFastPath.handle_run)
        need = 4
        throttle = self._throttle if self._quotas.active else None  # docs/quotas.md: None while no quota is set
        try:
            while end - start >= 4 and self._unanswered + len(run) < MAX_IN_FLIGHT:
                if throttle is not None and throttle.muted_until and throttle.still_muted():
                    break
                size = _SIZE.unpack_from(buf, start)[0]
                if size <= 0 or size > self.max_request_bytes:
                    self._bad.warning("closing connection from %s: request size %d outside 1..%d "
                                      "(socket.request.max.bytes)", self.peer, size, self.max_request_bytes)
                    need = -1
                    break
                if end - start - 4 < size:
                    need = size + 4
                    break
                frame = buf[start + 4:start + 4 + size]
                start += 4 + size
                rb.start = start
                handled += 1
                if len(frame) > 1 and not frame[1] & 127 and throttle is None:
                    run.append(frame)
                    continue
                if run:
                    if not self._dispatch_run(run):
                        return -1
                    run = []
                if not self.dispatch(frame):
                    return -1
            if run and not self._dispatch_run(run):
                return -1
            return need
        finally:
            if handled:
                self.flush_ready()

    def flush_ready(self) -> None:
        """Answer a burst of ready requests from the reader itself when the writer has nothing queued
        (saves waking the writer task: at one message per request that was a loop pass per request);
        whatever the socket does not take now, and anything not ready, goes to the writer."""
        out = self._out
        if self._writer_idle and len(out) == 1 and type(out[0]) is Packed:
            packed = out[0]
            sending = now()
            try:
                n = self.sock.send(packed.buf)
            except BlockingIOError:
                n = 0
            except OSError:
                n = 0  # the writer meets the same error and closes the connection
            if n == len(packed.buf):
                out.clear()
                self._answered(packed.count)
                record_packed(self._metrics, packed.times, sending)
                return
            del packed.buf[:n]
        self._has_output.set()

    def dispatch(self, frame: bytearray) -> bool:
        """Handle one request and queue its answer; False when the connection must close. Counts the request
        and its bytes per API key (the key is the frame's first two bytes; keys served are < 128)."""
        m = self._metrics
        key = frame[1] & 127 if len(frame) > 1 else 127
        m.requests[key] += 1
        m.bytes_in[key] += len(frame)
        received, started, timed = self._in.last_received, now(), follower_or(key, frame) if key == 1 else key
        throttle = self._throttle.start() if self._quotas.active else None
        try:
            if key == 0:
                # The common Produce: its whole answer, framed, from ProduceFastPath (one pack, no copies).
                result = self._fast_produce(frame)
                if result is not None:
                    self._queue_fast(frame, result if throttle is None else throttle.answer(key, frame, result),
                                     (0, received, started, now()))
                    return True
            correlation_id, result = self._sasl.answer(frame) if key == 17 or key == 36 else \
                self.apis.handle(frame, key != 0, self.session)
        except (CloseConnection, ProtocolError) as e:
            m.errors[key] += 1
            self._bad.warning("closing connection from %s: %s", self.peer, e)
            return False
        except Exception:
            m.errors[key] += 1
            log.exception("closing connection from %s: request handler failed", self.peer)
            return False
        if throttle is not None:
            result = throttle.answer(key, frame, result)
        if result is None:
            return True
        handled = now()
        out = self._out
        self._unanswered += 1
        if type(result) in _READY:
            tail(out).add(_PREFIX.pack(len(result) + 4, correlation_id), result, (timed, received, started, handled))
            m.bytes_out[key] += len(result)
            return True
        stamp = [received, started, handled, handled, timed]
        if type(result) is not list and asyncio.iscoroutine(result):
            result = timed_future(result, stamp)
        out.append((correlation_id, result, key, stamp))
        return True

    def _dispatch_run(self, run: list) -> bool:
        """dispatch of consecutive Produce requests: the answers ProduceFastPath.handle_run gives (one write for a
        burst to one partition), and the first request it declines through dispatch (the general path); then
        on with the rest. False when the connection must close."""
        m = self._metrics
        i, n = 0, len(run)
        received = self._in.last_received
        while i < n:
            rest = run[i:] if i else run
            started = now()
            try:
                results = self._fast_produce_run(rest)
            except Exception:
                m.requests[0] += 1
                m.errors[0] += 1
                log.exception("closing connection from %s: request handler failed", self.peer)
                return False
            # one handler call for the run: each request is given an equal share of its local time, in order
            step = (now() - started) / (len(results) or 1)
            for frame, result in zip(rest, results, strict=False):
                m.requests[0] += 1
                m.bytes_in[0] += len(frame)
                self._queue_fast(frame, result, (0, received, started, started + step))
                started += step
            i += len(results)
            if i < n:
                if not self.dispatch(run[i]):
                    return False
                i += 1
        return True

    def _queue_fast(self, frame: bytearray, result: bytes | Awaitable[bytes], times: tuple) -> None:
        """Queue an answer of ProduceFastPath (framed bytes, or its coroutine); ``times``: (0, read, start, end)."""
        self._unanswered += 1
        out = self._out
        if type(result) is bytes:
            tail(out).add(b"", result, times)
            self._metrics.bytes_out[0] += len(result) - 8
            return
        stamp = [times[1], times[2], times[3], times[3], 0]
        out.append((_CORRELATION.unpack_from(frame, 4)[0], timed_future(result, stamp), 0, stamp))

    def queue_framed(self, buf: bytes) -> None:  # an answer with its framing (SaslGate's raw tokens)
        self._unanswered += 1
        self._out.append(Packed(buf, 1))

    # ------------------------------------------------------------------ writing
    async def _write_loop(self) -> None:
        out = self._out
        try:
            while True:
                if not out:
                    if self._reading_done:
                        return
                    self._has_output.clear()
                    self._writer_idle = True
                    try:
                        await self._has_output.wait()
                    finally:
                        self._writer_idle = False
                    continue
                item = out.popleft()
                if type(item) is Packed:
                    sending = now()
                    await self._send_bytes(item.buf)
                    self._answered(item.count)
                    record_packed(self._metrics, item.times, sending)
                    continue
                correlation_id, result, key, stamp = item
                if isinstance(result, asyncio.Future):
                    try:
                        result = await result
                    except CloseConnection as e:
                        self._metrics.errors[key] += 1
                        log.warning("closing connection from %s: %s", self.peer, e)
                        return
                    except Exception:
                        self._metrics.errors[key] += 1
                        log.exception("closing connection from %s: request handler failed", self.peer)
                        return
                if result is not None:
                    sending = now()
                    self._metrics.bytes_out[key] += await self._send(correlation_id, result)
                    self._metrics.record(stamp[4], stamp[0], stamp[1], stamp[2], stamp[3], sending, now())
                self._answered(1)
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s: %s", self.peer, e)
        except Exception:
            log.exception("closing connection from %s: writing a response failed", self.peer)

    def _answered(self, n: int) -> None:
        self._last_answered = self._loop.time()
        self._unanswered -= n
        if self._unanswered < MAX_IN_FLIGHT:
            self._has_room.set()

    async def _send_bytes(self, data: bytes | bytearray, flags: int = 0) -> None:
        """Send now if the socket takes it all (the usual case); wait for room only for the rest.
        MSG_MORE in ``flags`` (bytes that file data will follow) lets the kernel put both in the same
        segments."""
        try:
            n = self.sock.send(data, flags)
        except BlockingIOError:
            n = 0
        if n < len(data):
            await self._loop.sock_sendall(self.sock, memoryview(data)[n:])

    async def _send(self, correlation_id: int, body: bytes | bytearray | list) -> int:
        """Send one answer (bytes, or parts with file slices for sendfile); returns its body's size."""
        if isinstance(body, bytes | bytearray):
            await self._send_bytes(_PREFIX.pack(len(body) + 4, correlation_id) + body)
            return len(body)
        size = 4 + sum(len(p) if isinstance(p, bytes | bytearray) else p.size for p in body)
        pending = bytearray(_PREFIX.pack(size, correlation_id))
        for part in body:
            if isinstance(part, bytes | bytearray):
                pending += part
                continue
            if pending:
                await self._send_bytes(pending, socket.MSG_MORE)
                pending = bytearray()
            await self._sendfile(part.fd, part.position, part.size)
        if pending:
            await self._send_bytes(pending)
        return size - 4

    async def _sendfile(self, in_fd: int, offset: int, count: int) -> None:
        await sendfile_all(self._loop, self._fd, in_fd, offset, count)

    async def _writable(self) -> None:
        await writable(self._loop, self._fd)

"""ChannelThrottle: one connection's side of the client quotas (client_quotas.py decides which quota applies).

After each request it counts the request against its client's quotas: a Produce by its size, a Fetch by its
answer's size, a topic change by the partitions it creates or deletes (controller_mutation_rate), every request
by the time its handler took (request_percentage). A client over a quota is
throttled as Kafka does since KIP-219: the answer goes out at once with ``throttle_time_ms`` in it (every answer
that has the field: throttle_time.py), and the connection reads no further request until the time is over
(``muted_until``: the reader waits, TCP pushes back on the client). A client that honours throttle_time_ms
waits by itself; one that does not finds its channel muted.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable

from ferry.broker.server.client_quotas import ClientQuotas
from ferry.broker.server.controller_mutations import MUTATING
from ferry.broker.server.request_context import Session
from ferry.wire.protocol.throttle_time import LAST, field_offset

_HEAD = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_MS = struct.Struct(">i")
_PRODUCE, _FETCH = 0, 1
# SaslHandshake, ApiVersions, SaslAuthenticate, and the brokers' own OffsetForLeaderEpoch and WriteTxnMarkers: as
# Kafka exempts them (a follower's Fetch is exempt too: replication is not a client)
_NOT_COUNTED = frozenset((17, 18, 36, 23, 27))


class ChannelThrottle:
    """Counts one connection's requests against its client's quotas; mutes it while the client is throttled."""

    __slots__ = ("_quotas", "_session", "_client_raw", "_client_id", "_started", "muted_until")

    def __init__(self, quotas: ClientQuotas, session: Session) -> None:
        self._quotas = quotas
        self._session = session
        self._client_raw = b""
        self._client_id = ""
        self._started = 0.0
        self.muted_until = 0.0  # monotonic time the reader waits for; 0: not muted

    # ------------------------------------------------------------------ muting
    def still_muted(self) -> bool:
        """True while the channel is muted (clears the mark once the time is over)."""
        if time.monotonic() < self.muted_until:
            return True
        self.muted_until = 0.0
        return False

    async def unmuted(self) -> None:
        """Wait out the mute (bounded: a throttle never exceeds the quota's window span)."""
        while self.still_muted():
            await asyncio.sleep(self.muted_until - time.monotonic())

    def _mute(self, seconds: float) -> int:
        until = time.monotonic() + seconds
        if until > self.muted_until:
            self.muted_until = until
        return int(seconds * 1000)

    # ------------------------------------------------------------------ counting
    def start(self) -> ChannelThrottle:
        """A request is about to be handled (its handler time is counted from here)."""
        self._started = time.perf_counter()
        return self

    def answer(self, key: int, frame: bytes | bytearray, result: object) -> object:
        """Count the request just handled; the answer with throttle_time_ms set when the client is throttled (a
        Produce answer may carry its size prefix and correlation id, as the fast path's do: the field is last)."""
        if key in _NOT_COUNTED or len(frame) < 10 or key == _FETCH and self._from_follower(frame):
            return result
        now = time.monotonic()
        spent = time.perf_counter() - self._started
        user, client_id = self._session.principal.name, self._client(frame)
        quotas = self._quotas
        throttle = quotas.request.record(user, client_id, spent * 100.0, now)
        version = _HEAD.unpack_from(frame)[1]
        if key == _PRODUCE:
            throttle = max(throttle, quotas.produce.record(user, client_id, len(frame), now))
        elif key in MUTATING and quotas.mutation.configured:
            # KIP-599 for the versions before THROTTLING_QUOTA_EXCEEDED (all ferry serves): done, then throttled
            throttle = max(throttle, quotas.mutation.record(user, client_id, quotas.mutations(frame), now))
        elif key == _FETCH and version >= 1 and quotas.fetch.configured:
            return self._fetch_answer(result, throttle, user, client_id)
        if not throttle:
            return result
        return _with_throttle(result, field_offset(key, version), self._mute(throttle))

    def _fetch_answer(self, result: object, throttle: float, user: str, client_id: str) -> object:
        """A Fetch is counted by its answer's size, known once it is ready (a parked fetch: when it answers)."""
        def settle(body: object) -> object:
            size = _size(body)
            seconds = max(throttle, self._quotas.fetch.record(user, client_id, size, time.monotonic()))
            if not seconds:
                return body
            return _set_at(body, 0, self._mute(seconds))

        if asyncio.isfuture(result) or asyncio.iscoroutine(result):
            return _later(result, settle)
        return settle(result)

    @staticmethod
    def _from_follower(frame: bytes | bytearray) -> bool:
        """A Fetch whose replica id (the body's first field, after the client id) names a broker."""
        at = 10 + max(_HEAD.unpack_from(frame)[3], 0)
        return len(frame) >= at + 4 and _MS.unpack_from(frame, at)[0] >= 0

    def _client(self, frame: bytes | bytearray) -> str:
        """The request header's client id (the last one decoded is kept: a connection rarely changes it)."""
        n = _HEAD.unpack_from(frame)[3]
        if n <= 0:
            return ""
        raw = bytes(frame[10:10 + n])
        if raw != self._client_raw:
            self._client_raw, self._client_id = raw, raw.decode("utf-8", "replace")
        return self._client_id


async def _later(result: Awaitable, settle) -> object:
    body = await result
    return settle(body) if body is not None else None


def _size(body: object) -> int:
    if isinstance(body, bytes | bytearray):
        return len(body)
    if isinstance(body, list):
        return sum(len(p) if isinstance(p, bytes | bytearray) else p.size for p in body)
    return 0


def _with_throttle(result: object, at: int | None, ms: int) -> object:
    """``result`` (an answer, or the awaitable of one) with throttle_time_ms = ``ms`` at body offset ``at``
    (throttle_time.py; None: this answer has no such field, the muted channel alone holds the client)."""
    if at is None or result is None:
        return result
    if asyncio.isfuture(result) or asyncio.iscoroutine(result):
        return _later(result, lambda body: _set_at(body, at, ms))
    return _set_at(result, at, ms)


def _set_at(body: object, at: int, ms: int) -> object:
    """throttle_time_ms written at ``at`` (LAST: the last four bytes) of an answer's bytes, or of its first part
    when it has file slices (a Fetch's)."""
    if isinstance(body, bytes | bytearray):
        if len(body) < (4 if at == LAST else at + 4):
            return body
        out = bytearray(body)
        _MS.pack_into(out, len(out) + LAST if at == LAST else at, ms)
        return bytes(out)
    if isinstance(body, list) and body and isinstance(body[0], bytes | bytearray) and len(body[0]) >= at + 4 \
            and at != LAST:
        head = bytearray(body[0])
        _MS.pack_into(head, at, ms)
        return [head, *body[1:]]
    return body

"""MessageSetProducer: the paper's low-level producer API, ``producer.send(topic, partition, messageSet)``.

A message set is one RecordBatch v2 (built by `MessageSetBuilder` from a list of values, or handed over
already encoded). The producer finds the partition's leader from Metadata (through `WireClient`, the
cold path) and keeps one `BrokerConnection` per leader broker for the hot path: per request it packs a
precomputed Produce v8 template (client id, acks, topic, partition) with the correlation id and sizes and
writes it and the set with one ``sendmsg`` (``send_frame``); answers are read in bulk into the
connection's buffer and parsed in place (``next_answer``). On two shared cores the per-request overhead
is what limits a 50-message set, hence no header encoding or response parsing per request. Requests are
pipelined up to ``max_in_flight`` per connection (a broker answers a connection's requests strictly in
order).

Errors: a set the broker refuses (its error code and message in `ProduceError`) is not written; the error
is raised by the next `send`/`flush` (the sets sent after it are independent requests and may have been
written). A closed or timed-out connection raises `BrokerUnavailableError`: its unanswered sets may or
may not have been written.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ferry.client.errors import (
    BrokerUnavailableError,
    ClientError,
    ProduceError,
)
from ferry.client.leader_lookup import connect_cluster, partition_leader  # noqa: F401 - also the consumer's
from ferry.client.wire_client import LEADERSHIP_ERRORS
from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol import produce
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.record.message_set_builder import MessageSetBuilder
from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, CURRENT_MAGIC, MAGIC_POS

PRODUCE, PRODUCE_VERSION = int(ApiKey.PRODUCE), produce.REQUEST_VERSION  # plain ints for the per-request pack
_I32 = struct.Struct(">i")
_PART_RESULT = struct.Struct(">ihq")  # partition, error_code, base_offset
_RECV_BUFFER = 1 << 20
_SOCKET_SEND_BUFFER = 4 << 20


class Ack(NamedTuple):
    """Where an acknowledged message set landed: its records have offsets base_offset, base_offset + 1, ..."""

    seq: int  # what send() returned
    topic: str
    partition: int
    base_offset: int


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Route(NamedTuple):
    """Everything per (topic, partition) that does not change between requests."""

    conn: BrokerConnection
    middle: bytes  # client id .. partition index, between the correlation id and the records size
    result_at: int  # where the partition index sits in the answer's body (after topic name and counts)
    head: struct.Struct  # size, api key, version, correlation id, middle, records size: one pack per request
    size: int  # the request's size field without the records


class MessageSetProducer:
    """Sends message sets to partitions' leaders; see the module docstring.

    ``send(topic, partition, message_set) -> seq`` is asynchronous; ``flush()`` waits for every answer.
    Where sets landed: ``on_ack(Ack)`` is called for every acknowledged set (from send/flush, in order per
    connection), ``last_offsets[(topic, partition)]`` holds the latest acknowledged base offset, and
    ``send_and_wait`` returns it directly. ``metadata_wait_s``: how long a topic or partition the brokers
    do not know yet (just created), or one without a leader, is looked up again before send() raises.
    """

    def __init__(self, bootstrap: str | None = None, *, zookeeper: str | None = None, acks: int | str = 1,
                 max_in_flight: int = 16, timeout_s: float = 30.0, request_timeout_ms: int = 30_000,
                 client_id: str = "ferry-message-set-producer",
                 on_ack: Callable[[Ack], object] | None = None, metadata_wait_s: float = 5.0,
                 client_config: ClientConfig | None = None) -> None:
        if acks == "all":
            acks = -1
        if acks == 0 or acks == "0":
            raise ValueError("acks=0 is not supported: the broker sends no answer, so a refused set would be "
                             "lost silently and no offsets are known; use acks=1 or -1")
        if acks not in (1, -1):
            raise ValueError(f"acks must be 1 or -1 ('all'), not {acks!r}")
        if not 1 <= max_in_flight <= 1024:
            raise ValueError(f"max_in_flight must be 1..1024, not {max_in_flight}")
        self.acks = int(acks)
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self.on_ack = on_ack
        self.metadata_wait_s = metadata_wait_s
        self.cluster = connect_cluster(bootstrap, zookeeper, client_id, timeout_s, client_config)
        self.builder = MessageSetBuilder()
        self.last_offsets: dict[tuple[str, int], int] = {}
        self.acked = 0  # sets acknowledged
        self.failed = 0  # sets refused
        self._seq = 0
        self._routes: dict[tuple[str, int], _Route] = {}
        self._conns: dict[int, BrokerConnection] = {}
        self._error: ProduceError | None = None
        self._closed = False
        self._wait_for = -1  # send_and_wait's set and its base offset
        self._waited = -1

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> MessageSetProducer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.flush()
            finally:
                self.close()
        else:
            self.close()

    @property
    def in_flight(self) -> int:
        """Sets sent and not answered yet, over all connections."""
        return sum(c.in_flight for c in self._conns.values())

    # ------------------------------------------------------------------ routes
    def _route(self, topic: str, partition: int) -> _Route:
        route = self._routes.get((topic, partition))
        if route is None:
            if self._closed:
                raise ClientError("the producer is closed")
            node, host, port = partition_leader(self.cluster, topic, partition, self.metadata_wait_s)
            conn = self._conns.get(node)
            if conn is None or not conn.connected or conn.address != f"{host}:{port}":
                conn = BrokerConnection(node, host, port, self.client_id, self.timeout_s, self.timeout_s,
                                        send_buffer_bytes=_SOCKET_SEND_BUFFER, receive_buffer_bytes=_RECV_BUFFER,
                                        read_buffer_bytes=_RECV_BUFFER, security=self.cluster.security)
                conn.connect()
                self._conns[node] = conn
            middle = (_string(self.client_id) + b"\xff\xff" + struct.pack(">hi", self.acks, self.request_timeout_ms)
                      + _I32.pack(1) + _string(topic) + _I32.pack(1) + _I32.pack(partition))
            # answer's body: topics count, topic name, partitions count, then the partition's result
            result_at = 4 + 2 + len(topic.encode()) + 4
            head = struct.Struct(f">ihhi{len(middle)}si")
            route = self._routes[(topic, partition)] = _Route(conn, middle, result_at, head, head.size - 4)
        return route

    def connect(self, topic: str, partition: int) -> tuple[int, str]:
        """Look the partition's leader up and connect now (send() does it on first use): (node id,
        host:port). UnknownTopicError / UnknownPartitionError / BrokerUnavailableError as send()."""
        conn = self._route(topic, partition).conn
        return conn.node_id, conn.address

    def _drop(self, conn: BrokerConnection) -> None:
        """Forget a dead connection and every route through it (the next send looks the leader up)."""
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]
        for key in [k for k, r in self._routes.items() if r.conn is conn]:
            del self._routes[key]

    # ------------------------------------------------------------------ sending
    def send(self, topic: str, partition: int, message_set: bytes | bytearray | memoryview | Sequence[bytes]
             ) -> int:
        """Queue one message set (encoded RecordBatch bytes, or a list of values to encode) for the
        partition; returns its sequence number (the ``seq`` of its Ack). Blocks while ``max_in_flight``
        sets are unanswered on the leader's connection. Raises the first ProduceError seen since the last
        raise (this set is then not sent)."""
        if self._error is not None:
            self._raise_error()
        if type(message_set) is bytes or isinstance(message_set, (bytearray, memoryview)):
            records = message_set
            if len(records) < BATCH_HEADER_SIZE or records[MAGIC_POS] != CURRENT_MAGIC:
                raise ValueError("message_set is not a RecordBatch v2 (use a list of values, or "
                                 "MessageSetBuilder.build)")
        else:
            records = self.builder.build(message_set)
        route = self._routes.get((topic, partition)) or self._route(topic, partition)
        conn = route.conn
        if conn.in_flight >= self.max_in_flight:
            self._receive(conn, max(1, self.max_in_flight // 4))
            if self._error is not None:
                self._raise_error()
        n = len(records)  # a route's connection is open: a failed one is dropped with its routes (_lost)
        head = route.head.pack(route.size + n, PRODUCE, PRODUCE_VERSION, conn.correlation_id, route.middle, n)
        seq = self._seq
        try:
            conn.send_frame([head, records], (seq, topic, partition, route.result_at), route.size + n + 4)
        except BrokerUnavailableError as e:
            raise self._lost(conn, e) from None
        self._seq = seq + 1
        return seq

    def send_and_wait(self, topic: str, partition: int,
                      message_set: bytes | bytearray | memoryview | Sequence[bytes]) -> int:
        """Send one set and wait for its answer (and every earlier one): its base offset."""
        self._wait_for = self.send(topic, partition, message_set)
        self._waited = -1
        try:
            self.flush()
        finally:
            self._wait_for = -1
        return self._waited

    def flush(self) -> None:
        """Wait for the answer to every set sent; raise the first error seen (ProduceError,
        BrokerUnavailableError)."""
        failure: BrokerUnavailableError | None = None
        for conn in list(self._conns.values()):
            if conn.in_flight:
                try:
                    self._receive(conn, conn.in_flight)
                except BrokerUnavailableError as e:
                    failure = failure or e
        if self._error is not None:
            self._raise_error()
        if failure is not None:
            raise failure

    def _raise_error(self) -> None:
        err, self._error = self._error, None
        assert err is not None
        raise err

    # ------------------------------------------------------------------ answers
    def _receive(self, conn: BrokerConnection, at_least: int) -> None:
        """Read answers on ``conn`` until ``at_least`` more arrived (or the connection has none left), and
        any more already read."""
        at_least = min(at_least, conn.in_flight)
        done = 0
        unpack_result = _PART_RESULT.unpack_from
        on_ack, last_offsets = self.on_ack, self.last_offsets
        while done < at_least:
            try:
                answers = conn.read_answers()
            except BrokerUnavailableError as e:
                raise self._lost(conn, e) from None
            for (seq, topic, partition, result_at), body in answers:
                if len(body) < result_at + 14:
                    raise self._lost(conn, conn.fail("answer malformed"))
                part, code, base = unpack_result(body, result_at)
                if part != partition:
                    raise self._lost(conn, conn.fail(f"answer for partition {part}, expected {partition}"))
                if code:
                    self._refused(conn, code, seq, topic, partition, body)
                else:
                    self.acked += 1
                    last_offsets[(topic, partition)] = base
                    if seq == self._wait_for:
                        self._waited = base
                    if on_ack is not None:
                        on_ack(Ack(seq, topic, partition, base))
            done += len(answers)

    def _lost(self, conn: BrokerConnection, err: BrokerUnavailableError) -> BrokerUnavailableError:
        """Forget a failed connection and its routes (the next send looks the leader up again)."""
        self._drop(conn)
        return BrokerUnavailableError(f"{err} (unanswered message sets may or may not have been written)")

    def _refused(self, conn: BrokerConnection, code: int, seq: int, topic: str, partition: int,
                 body: memoryview) -> None:
        message = None
        try:
            for r in produce.parse_response(body).get(topic, []):
                if r.partition == partition:
                    message = r.error_message
        except Exception:  # noqa: BLE001 — the error code alone is still worth raising
            pass
        self.failed += 1
        if code in LEADERSHIP_ERRORS:  # look the leader up again before the next set to this partition
            route = self._routes.get((topic, partition))
            if route is not None and route.conn is conn:
                del self._routes[(topic, partition)]
            self.cluster.leaders.pop((topic, partition), None)
        if self._error is None:
            self._error = ProduceError(code, topic, partition, seq, message)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Close the connections without waiting (call flush() first to wait for the answers)."""
        self._closed = True
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._routes.clear()
        self.cluster.close()


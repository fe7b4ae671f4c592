"""A small Kafka wire client for moving record batches as bytes (the mirror's fetch and produce path).

confluent-kafka and kafka-python hand records to the application one by one; the mirror wants the
batches themselves. `WireClient` knows one cluster: its brokers and partition leaders (Metadata), lazily
opened connections (`BrokerConnection`, the raw layer's one connection class), and the blocking helpers
ListOffsets and InitProducerId.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from ferry.client.errors import BrokerUnavailableError, ClientError, for_code
from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.protocol import init_producer_id, list_offsets, metadata
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.list_offsets import PartitionOffsetResult
from ferry.wire.protocol.metadata import MetadataResponse
from ferry.wire.sasl_login import PLAINTEXT, ClientSecurity

log = logging.getLogger(__name__)

# Errors after which the partition's leader must be looked up again.
LEADERSHIP_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE,
})


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` -> [(host, port)]; ValueError on a malformed entry."""
    out = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bad broker address {item!r} (want host:port)")
        out.append((host, int(port)))
    return out


BootstrapSource = str | Callable[[], Iterable[tuple[str, int]]]


class WireClient:
    """One cluster seen through the wire protocol: metadata, leaders, connections.

    ``bootstrap`` is ``host:port,...`` or a callable returning addresses (e.g. the live brokers from
    the cluster's ZooKeeper registry, so that the client follows brokers that moved). Not thread-safe:
    each thread of the mirror owns its clients. ``security``: TLS/SASL on every connection (a secured listener:
    the brokers' Metadata then advertises that listener's addresses).
    """

    def __init__(self, bootstrap: BootstrapSource, client_id: str = "ferry", timeout_s: float = 30.0,
                 connect_timeout_s: float = 5.0, *, security: ClientSecurity = PLAINTEXT) -> None:
        self._bootstrap = bootstrap
        self.security = security
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.partition_counts: dict[str, int] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ connections
    def _bootstrap_addresses(self) -> list[tuple[str, int]]:
        if callable(self._bootstrap):
            return list(self._bootstrap())
        return parse_bootstrap(self._bootstrap)

    def connection(self, node_id: int) -> BrokerConnection:
        conn = self._connections.get(node_id)
        if conn is None:
            addr = self.brokers.get(node_id)
            if addr is None:
                raise BrokerUnavailableError(f"broker {node_id} is not in the cluster metadata")
            conn = BrokerConnection(node_id, addr[0], addr[1], self.client_id, self.timeout_s,
                                    self.connect_timeout_s, security=self.security)
            self._connections[node_id] = conn
        return conn

    def close_connection(self, node_id: int) -> None:
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node_id in list(self._connections):
            self.close_connection(node_id)

    # ------------------------------------------------------------------ metadata
    def refresh_metadata(self, topics: Sequence[str] | None = None) -> MetadataResponse:
        """Ask any reachable broker (known ones first, then the bootstrap list) for metadata."""
        candidates: list[tuple[int | None, str, int]] = [(n, h, p) for n, (h, p) in self.brokers.items()]
        candidates += [(None, h, p) for h, p in self._bootstrap_addresses()]
        errors = []
        seen = set()
        for node_id, host, port in candidates:
            if (host, port) in seen:
                continue
            seen.add((host, port))
            try:
                if node_id is not None and node_id in self._connections:
                    conn = self._connections[node_id]
                    body = conn.request(*metadata.encode_request(topics))
                else:
                    conn = BrokerConnection(-1, host, port, self.client_id, self.timeout_s,
                                            self.connect_timeout_s, security=self.security)
                    try:
                        body = conn.request(*metadata.encode_request(topics))
                    finally:
                        conn.close()
            except ClientError as e:
                errors.append(str(e))
                if node_id is not None:
                    self.close_connection(node_id)
                continue
            md = metadata.parse_response(body)
            self._apply(md, topics)
            return md
        raise BrokerUnavailableError("no broker answered a metadata request: " + ("; ".join(errors) or
                                                                                 "no brokers known"))

    def _apply(self, md: MetadataResponse, topics: Sequence[str] | None) -> None:
        new_brokers = {b.node_id: (b.host, b.port) for b in md.brokers.values()}
        for node_id, addr in list(self.brokers.items()):
            if new_brokers.get(node_id) != addr:
                self.close_connection(node_id)  # gone or moved
        self.brokers = new_brokers
        if topics is None:
            self.leaders.clear()
            self.partition_counts.clear()
        for name, t in md.topics.items():
            for key in [k for k in self.leaders if k[0] == name]:
                del self.leaders[key]
            if t.error_code != ErrorCode.NONE:
                self.partition_counts.pop(name, None)
                continue
            self.partition_counts[name] = len(t.partitions)
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE and p.leader >= 0:
                    self.leaders[(name, p.partition)] = p.leader

    def leader(self, topic: str, partition: int, refresh: bool = True) -> int | None:
        """The partition's leader from the cache, asking the cluster once if it is unknown."""
        node = self.leaders.get((topic, partition))
        if node is None and refresh:
            self.refresh_metadata([topic])
            node = self.leaders.get((topic, partition))
        return node

    # ------------------------------------------------------------------ blocking helpers
    def list_offsets(self, wanted: dict[tuple[str, int], int],
                     read_committed: bool = False) -> dict[tuple[str, int], PartitionOffsetResult]:
        """ListOffsets for {(topic, partition): timestamp}; per-partition errors are in the results.
        ``read_committed``: "latest" is the last stable offset (where a read_committed reader stops).

        A partition whose leader is unknown or unreachable gets LEADER_NOT_AVAILABLE / NETWORK_EXCEPTION.
        """
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
        out: dict[tuple[str, int], PartitionOffsetResult] = {}
        for (topic, partition), ts in wanted.items():
            try:
                node = self.leader(topic, partition)
            except BrokerUnavailableError:
                node = None
            if node is None:
                out[(topic, partition)] = PartitionOffsetResult(partition, ErrorCode.LEADER_NOT_AVAILABLE)
                continue
            by_leader.setdefault(node, {}).setdefault(topic, []).append((partition, ts))
        for node, topics in by_leader.items():
            try:
                body = self.connection(node).request(*list_offsets.encode_request(topics.items(), read_committed))
            except ClientError:
                self.close_connection(node)
                for topic, parts in topics.items():
                    for partition, _ in parts:
                        out[(topic, partition)] = PartitionOffsetResult(partition, ErrorCode.NETWORK_EXCEPTION)
                continue
            for topic, results in list_offsets.parse_response(body).items():
                for res in results:
                    out[(topic, res.partition)] = res
                    if res.error_code in LEADERSHIP_ERRORS:
                        self.leaders.pop((topic, res.partition), None)
        return out

    def offsets(self, wanted: dict[tuple[str, int], int], read_committed: bool = False) -> dict[tuple[str, int], int]:
        """{(topic, partition): offset} for {(topic, partition): timestamp} (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
        or a time in ms: -1 when no message is that recent); any partition's error raises (for_code)."""
        got = self.list_offsets(wanted, read_committed)
        out = {}
        for key in wanted:
            res = got.get(key)
            code = res.error_code if res is not None else ErrorCode.UNKNOWN_SERVER_ERROR
            if code != ErrorCode.NONE:
                raise for_code(code, f"ListOffsets for {key[0]}/{key[1]}")
            out[key] = res.offset
        return out

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch from any broker."""
        if not self.brokers:
            self.refresh_metadata([])
        errors = []
        for node_id in list(self.brokers):
            try:
                res = init_producer_id.parse_response(self.connection(node_id).request(*init_producer_id.encode_request()))
            except ClientError as e:
                self.close_connection(node_id)
                errors.append(str(e))
                continue
            if res.error_code != ErrorCode.NONE:
                errors.append(str(for_code(res.error_code, f"InitProducerId on broker {node_id}")))
                continue
            return res.producer_id, res.producer_epoch
        raise BrokerUnavailableError("no broker handed out a producer id: " + "; ".join(errors))

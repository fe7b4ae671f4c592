"""Admin access to the brokers' consumer groups (Kafka's group protocol; docs/groups.md), for ``ferry groups``.

Not to be confused with the paper's ZooKeeper groups (group_store.py, ConsumerConnector). Listing asks every
live broker (each lists the groups it coordinates), describing and committing go to the group's coordinator
(FindCoordinator, asked of any broker). Committed offsets are read straight from ZooKeeper
(``ferry.zk.group_offsets``), where the coordinator keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ferry.client.errors import BrokerUnavailableError, ClientError, NoBrokersAvailableError, for_code
from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol import (
    consumer_protocol,
    delete_groups,
    describe_groups,
    find_coordinator,
    list_groups,
    offset_commit,
)
from ferry.zk.znodes import BrokerInfo

COORDINATOR_RETRIES = 10  # NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE while the coordinator moves


@dataclass
class KafkaGroupMember:
    member_id: str
    client_id: str
    client_host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class KafkaGroupDescription:
    group: str
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead (= does not exist)
    protocol_type: str
    protocol: str
    coordinator: int
    members: list[KafkaGroupMember] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.state != "Dead"

    def owners(self) -> dict[tuple[str, int], str]:
        return {(t, p): m.member_id for m in self.members for t, ps in m.assignment.items() for p in ps}


class KafkaGroups:
    """One connection per broker, opened on first use; close() (or a with block) closes them."""

    def __init__(self, brokers: Mapping[int, BrokerInfo], client_id: str = "ferry-groups",
                 timeout_s: float = 10.0, client_config: ClientConfig | None = None) -> None:
        """``client_config``: TLS/SASL (wire/client_config.py); each broker is reached on its listener of that
        security.protocol."""
        if not brokers:
            raise NoBrokersAvailableError("no live broker is registered")
        self.brokers = dict(brokers)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.client_config = client_config or ClientConfig.plaintext()
        self._security = self.client_config.security()
        self._conns: dict[int, BrokerConnection] = {}

    def __enter__(self) -> KafkaGroups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def _conn(self, node: int) -> BrokerConnection:
        conn = self._conns.get(node)
        if conn is None:
            address = self.brokers[node].address_for(self.client_config.security_protocol)
            if address is None:
                raise NoBrokersAvailableError(f"broker {node} has no {self.client_config.security_protocol} listener")
            conn = self._conns[node] = BrokerConnection(node, *address, self.client_id, self.timeout_s,
                                                        security=self._security)
        return conn

    def _request(self, node: int, request: tuple[int, int, list]) -> memoryview:
        api_key, version, body = request
        try:
            return self._conn(node).request(api_key, version, body)
        except BrokerUnavailableError:
            self._conns.pop(node, None)
            raise

    def list(self) -> dict[str, str]:
        """{group: protocol type} over every live broker (a broker that cannot answer is skipped)."""
        out: dict[str, str] = {}
        for node in sorted(self.brokers):
            try:
                code, groups = list_groups.parse_response(self._request(node, list_groups.encode_request()))
            except ClientError:
                continue
            if code == 0:
                out.update(groups)
        return out

    def coordinator(self, group: str) -> int:
        last: Exception | None = None
        for attempt in range(COORDINATOR_RETRIES):
            node = sorted(self.brokers)[attempt % len(self.brokers)]
            try:
                code, message, coord, _host, _port = find_coordinator.parse_response(
                    self._request(node, find_coordinator.encode_request(group)))
            except ClientError as e:
                last = e
                continue
            if code == 0 and coord in self.brokers:
                return coord
            last = for_code(code, f"FindCoordinator({group}): {message or ''}".rstrip(": "))
        raise ClientError(f"no coordinator for group {group!r}: {last}")

    def describe(self, group: str) -> KafkaGroupDescription:
        node = self.coordinator(group)
        (g,) = describe_groups.parse_response(self._request(node, describe_groups.encode_request([group])))
        if g.error_code:
            raise for_code(g.error_code, f"DescribeGroups({group})")
        members = [KafkaGroupMember(m.member_id, m.client_id, m.client_host,
                                    consumer_protocol.parse_assignment(m.assignment)) for m in g.members]
        return KafkaGroupDescription(group, g.state, g.protocol_type, g.protocol, node, members)

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit from outside the group (generation -1): the coordinator refuses it while the group has
        members (UNKNOWN_MEMBER_ID), as Kafka does."""
        node = self.coordinator(group)
        errors = offset_commit.parse_response(self._request(node, offset_commit.encode_request(group, dict(offsets))))
        failed = {tp: code for tp, code in errors.items() if code}
        if failed:
            (tp, code), *_ = sorted(failed.items())
            raise for_code(code, f"OffsetCommit({group}) on {tp[0]}-{tp[1]} "
                                              f"({len(failed)} partition(s) refused)")

    def delete(self, group: str) -> None:
        node = self.coordinator(group)
        code = delete_groups.parse_response(self._request(node, delete_groups.encode_request([group]))).get(group, -1)
        if code:
            raise for_code(code, f"DeleteGroups({group})")

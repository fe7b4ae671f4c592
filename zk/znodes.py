"""What the registry's znodes hold, and their JSON encoding.

Layout under a cluster's chroot (Kafka's, minus replication):
``/brokers/ids/<id>`` (ephemeral) ``{"version":4,"host":..,"port":..,"datacenter":..,"timestamp":"<ms>",
"endpoints":["PLAINTEXT://h:9092","SSL://h:9093"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT",..}}``
(Kafka's version 4 fields; a registration without endpoints is one PLAINTEXT listener at host:port), plus
ferry's own ``"ferry_version"`` and ``"ferry_native"`` (the release and its native parts, e.g. "3/3 native": a
mixed-version cluster shows in `ferry topics describe` and the dashboard); Kafka's fields keep Kafka's meaning,
so tools that read Kafka's registrations still read ours;
``/brokers/topics/<topic>`` ``{"version":1,"partitions":{"0":[1],"1":[2]},"config":{"retention.ms":".."},
"topic_id":"<base64url uuid>"}`` where the first broker of each replica list is the partition's leader; the
topic id (Kafka's, KIP-516: Metadata v10+ and KIP-848 assignments name topics by it) is drawn at creation; a
topic written before ids has one derived from its name.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field

BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{int(broker_id)}"


def topic_path(name: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{name}"


@dataclass(frozen=True)
class Endpoint:
    """One advertised listener of a broker: clients that came in on ``listener`` are sent to host:port."""

    listener: str
    security_protocol: str
    host: str
    port: int


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    datacenter: str = ""
    endpoints: tuple[Endpoint, ...] = ()
    # What the broker runs ("" when its registration does not say: an older ferry, or another tool). Not part
    # of a broker's identity: two registrations of one broker at one address are the same broker.
    ferry_version: str = field(default="", compare=False)
    native: str = field(default="", compare=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """(host, port) of the named listener; None when the broker has no such listener."""
        for e in self.endpoints:
            if e.listener == listener:
                return e.host, e.port
        if not self.endpoints and listener == "PLAINTEXT":
            return self.host, self.port
        return None

    def address_for(self, security_protocol: str) -> tuple[str, int] | None:
        """(host, port) a client speaking ``security_protocol`` connects to (as Kafka's ZooKeeper-based clients
        chose): the listener of that name, else the first of that protocol; None when the broker has none."""
        found = self.endpoint(security_protocol)
        if found is None:
            found = next(((e.host, e.port) for e in self.endpoints if e.security_protocol == security_protocol),
                         None)
        return found

    def encode(self) -> bytes:
        doc = {
            "version": 4 if self.endpoints else 1,
            "host": self.host,
            "port": self.port,
            "datacenter": self.datacenter,
            "timestamp": str(int(time.time() * 1000)),
        }
        if self.ferry_version:
            doc["ferry_version"] = self.ferry_version
        if self.native:
            doc["ferry_native"] = self.native
        if self.endpoints:
            doc["endpoints"] = [_endpoint_text(e) for e in self.endpoints]
            doc["listener_security_protocol_map"] = {e.listener: e.security_protocol for e in self.endpoints}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        """Raises ValueError on anything but a well-formed broker registration."""
        doc = _json_object(data, f"broker {broker_id}")
        host, port = doc.get("host"), doc.get("port")
        if not isinstance(host, str) or not host or not isinstance(port, int) or isinstance(port, bool):
            raise ValueError(f"broker {broker_id} registration lacks host/port: {doc!r}")
        datacenter = doc.get("datacenter") or ""
        return cls(id=int(broker_id), host=host, port=port, datacenter=str(datacenter),
                   endpoints=_decode_endpoints(broker_id, doc),
                   ferry_version=str(doc.get("ferry_version") or ""), native=str(doc.get("ferry_native") or ""))


def _endpoint_text(e: Endpoint) -> str:
    host = f"[{e.host}]" if ":" in e.host else e.host
    return f"{e.listener}://{host}:{e.port}"


def _decode_endpoints(broker_id: int, doc: dict) -> tuple[Endpoint, ...]:
    texts = doc.get("endpoints") or []
    protocols = doc.get("listener_security_protocol_map") or {}
    if not isinstance(texts, list) or not isinstance(protocols, dict):
        raise ValueError(f"broker {broker_id} registration has malformed endpoints: {doc!r}")
    out = []
    for text in texts:
        name, sep, address = str(text).partition("://")
        host, sep2, port = address.rpartition(":")
        if not sep or not sep2 or not port.isdigit():
            raise ValueError(f"broker {broker_id} registration has a malformed endpoint {text!r}")
        out.append(Endpoint(name, str(protocols.get(name, name)), host.strip("[]"), int(port)))
    return tuple(out)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: dict[int, int]  # partition -> leader broker id
    config: dict[str, str] = field(default_factory=dict)
    replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)  # partition -> replica list
    topic_id: str = ""  # KIP-516's Uuid, base64url without padding as Kafka writes it ("" = none yet)

    @property
    def topic_uuid(self) -> bytes:
        """The 16 bytes of the topic id (one derived from the name for a topic written before ids)."""
        if self.topic_id:
            return base64.urlsafe_b64decode(self.topic_id + "==")
        return uuid.uuid5(uuid.NAMESPACE_URL, "ferry-topic:" + self.name).bytes

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def encode(self) -> bytes:
        replicas = self.replicas or {p: (leader,) for p, leader in self.partitions.items()}
        doc = {
            "version": 1,
            "partitions": {str(p): list(replicas[p]) for p in sorted(replicas)},
            "config": dict(sorted(self.config.items())),
        }
        if self.topic_id:
            doc["topic_id"] = self.topic_id
        return json.dumps(doc).encode()

    @classmethod
    def from_assignment(
        cls, name: str, assignment: dict[int, tuple[int, ...] | list[int]], config: dict[str, str] | None = None,
        topic_id: str = "",
    ) -> TopicInfo:
        replicas = {int(p): tuple(int(b) for b in r) for p, r in sorted(assignment.items())}
        return cls(
            name=name,
            partitions={p: r[0] for p, r in replicas.items()},
            config=dict(config or {}),
            replicas=replicas,
            topic_id=topic_id,
        )

    @classmethod
    def decode(cls, name: str, data: bytes) -> TopicInfo:
        """Raises ValueError on anything but a well-formed topic assignment."""
        doc = _json_object(data, f"topic {name!r}")
        parts = doc.get("partitions")
        if not isinstance(parts, dict) or not parts:
            raise ValueError(f"topic {name!r} has no partition assignment: {doc!r}")
        assignment: dict[int, tuple[int, ...]] = {}
        for key, brokers in parts.items():
            if not str(key).isdigit() or not isinstance(brokers, list) or not brokers:
                raise ValueError(f"topic {name!r} has a bad partition entry {key!r}: {brokers!r}")
            if not all(isinstance(b, int) and not isinstance(b, bool) for b in brokers):
                raise ValueError(f"topic {name!r} partition {key} names a non-integer broker: {brokers!r}")
            assignment[int(key)] = tuple(brokers)
        if sorted(assignment) != list(range(len(assignment))):
            raise ValueError(f"topic {name!r} partitions are not 0..{len(assignment) - 1}: {sorted(assignment)}")
        config = doc.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"topic {name!r} config is not an object: {config!r}")
        topic_id = doc.get("topic_id") or ""
        if not isinstance(topic_id, str) or (topic_id and len(topic_id) != 22):
            raise ValueError(f"topic {name!r} has a malformed topic_id: {topic_id!r}")
        return cls.from_assignment(name, assignment, {str(k): str(v) for k, v in config.items()}, topic_id)


def new_topic_id() -> str:
    """A fresh topic id as Kafka writes it in ZooKeeper: 16 random bytes, base64url, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _json_object(data: bytes | None, what: str) -> dict:
    try:
        doc = json.loads((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: znode data is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{what}: znode data is not a JSON object")
    return doc


# ---------------------------------------------------------------------------- replication (Kafka's layout)
# ``/brokers/topics/<topic>/partitions/<p>/state`` (persistent)
#   ``{"version":1,"controller_epoch":3,"leader":1,"leader_epoch":7,"isr":[1,2,3]}``; leader -1 = offline.
#   Written by the controller (elections; its writes are checked against /controller_epoch's version in the
#   same ZooKeeper transaction) and by the partition's leader (ISR shrink/expand), always conditionally on
#   the znode version the writer last read.
# ``/controller`` (ephemeral) ``{"version":1,"brokerid":1,"timestamp":"<ms>"}`` — the one controller.
# ``/controller_epoch`` (persistent) ``"<n>"`` — bumped by every new controller.
# ``/admin/controlled_shutdown/<id>`` (ephemeral) — a broker asks the controller to move its leaders off.
# ``/admin/preferred_replica_election`` ``{"version":1,"partitions":[{"topic":t,"partition":p}]}``.
# ``/admin/reassign_partitions`` ``{"version":1,"partitions":[{"topic":t,"partition":p,"replicas":[1,2,3]}]}``
#   — Kafka's format; the controller adds the new replicas, waits until they are in the ISR, moves the
#   leader if it is not among them, then writes the final replica list and deletes the request.
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"
PREFERRED_ELECTION_PATH = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
NO_LEADER = -1


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}/partitions/{int(partition)}/state"


@dataclass(frozen=True)
class PartitionState:
    """Leader, leader epoch and in-sync replicas of one partition (Kafka's LeaderAndIsr)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0

    def encode(self) -> bytes:
        doc = {"version": 1, "controller_epoch": self.controller_epoch, "leader": self.leader,
               "leader_epoch": self.leader_epoch, "isr": list(self.isr)}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, what: str = "partition state") -> PartitionState:
        """Raises ValueError on anything but a well-formed state."""
        doc = _json_object(data, what)
        leader, epoch, isr = doc.get("leader"), doc.get("leader_epoch"), doc.get("isr")
        cepoch = doc.get("controller_epoch", 0)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (leader, epoch, cepoch)):
            raise ValueError(f"{what}: leader/leader_epoch/controller_epoch must be integers: {doc!r}")
        if not isinstance(isr, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in isr):
            raise ValueError(f"{what}: isr must be a list of broker ids: {doc!r}")
        return cls(leader=leader, leader_epoch=epoch, isr=tuple(isr), controller_epoch=cepoch)

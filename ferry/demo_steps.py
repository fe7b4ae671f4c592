"""The demo's cluster, as local processes: ZooKeeper, live and offline brokers (and the standalone mirror when
asked: demo_mirror.py says which kind copies); its topics, schemas and published events. The hourly load (demo_dag.py) and the books (demo_report.py) are steps of their own."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from ferry.client.producer import Producer
from ferry.demo_events import activity_stream
from ferry.demo_secure import DemoSecurity
from ferry.embedded import (
    BrokerProcess,
    ManagedProcess,
    ZooKeeperServer,
    free_port,
    spawn_ferry,
    wait_for_port,
)
from ferry.schemas.registry import SchemaRegistry, subject_for_topic
from ferry.schemas.wire import AvroSerializer
from ferry.wire.client_config import ClientConfig
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import TopicExistsError
from ferry.zk.topic_name import AUDIT_TOPIC

LIVE_BROKERS, OFFLINE_BROKERS = 2, 1
# Replication where a datacenter has several brokers (as Ansible sets it, group_vars/all.yml): the live
# topics and `_audit` on both live brokers, acks=all satisfied by one in-sync copy (min.insync.replicas 1,
# so a broker restart does not stop the producers). Offline has one broker: replication factor 1 (the
# mirror's default, min(3, offline brokers)). A third live broker for RF 3 / min.insync.replicas 2 would
# cost one more process on a laptop for no change in what the demo shows.
LIVE_REPLICATION_FACTOR = min(3, LIVE_BROKERS)
LIVE_MIN_INSYNC_REPLICAS = 2 if LIVE_REPLICATION_FACTOR >= 3 else 1


class DemoProgress:
    """Prints what the demo is doing, with elapsed time, so a person can follow along; progress bars (rich)
    only on a terminal — a log file gets one line per finished step instead."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._bars: dict[str, tuple[RichProgress, TaskID]] = {}

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    def bar(self, label: str, done: int, total: int) -> None:
        if not sys.stdout.isatty():
            if done >= total:
                self.say(f"{label}: {done}/{total}")
            return
        entry = self._bars.get(label)
        if entry is None:
            bars = RichProgress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn())
            bars.start()
            entry = self._bars[label] = (bars, bars.add_task(label, total=total))
        bars, task = entry
        bars.update(task, completed=done, total=total)
        if done >= total:
            bars.stop()
            del self._bars[label]


class DemoCluster:
    """ZooKeeper, live and offline brokers and the mirror as local processes under one directory."""

    def __init__(self, root: Path, progress: DemoProgress, partitions: int = 4,
                 security: DemoSecurity | None = None) -> None:
        self.root = root
        self.progress = progress
        self.partitions = partitions
        self.security = security  # --secure: TLS + SCRAM + ACLs (demo_secure.py); None: loopback PLAINTEXT
        self.zk: ZooKeeperServer | None = None
        self.brokers: list[BrokerProcess] = []
        self.mirror: ManagedProcess | None = None
        self.ports_file = root / "ports.json"

    # -- processes -------------------------------------------------------------------------------------------
    def _ports(self) -> dict[str, int]:
        """Reuse the ports of a previous run in the same directory (so its ZooKeeper data stays valid)."""
        if self.ports_file.exists():
            ports = json.loads(self.ports_file.read_text())
        else:
            ports = {"zookeeper": free_port()}
            for i in range(1, LIVE_BROKERS + 1):
                ports[f"live-{i}"] = free_port()
            for i in range(1, OFFLINE_BROKERS + 1):
                ports[f"offline-{100 + i}"] = free_port()
            ports["mirror-metrics"] = free_port()
        missing = [f"metrics-{name}" for name in list(ports) if name.startswith(("live-", "offline-"))
                   and not name.endswith("-sasl") and f"metrics-{name}" not in ports]
        for name in missing:  # every broker serves /metrics (a run before brokers did keeps its other ports)
            ports[name] = free_port()
        for name in [n for n in ports if n.startswith(("live-", "offline-")) and not n.endswith("-sasl")]:
            if self.security is not None and f"{name}-sasl" not in ports:  # a plaintext demo's dir, now secured
                ports[f"{name}-sasl"] = free_port()
        if self.security is not None and "zookeeper-tls" not in ports:
            ports["zookeeper-tls"] = free_port()
        self.ports_file.write_text(json.dumps(ports))
        return ports

    def client(self, datacenter: str, user: str) -> ClientConfig:
        """The client settings of ``user`` in ``datacenter`` (plaintext when the demo is not secured)."""
        return self.security.client(datacenter, user) if self.security else ClientConfig.plaintext()

    def _secure_args(self, datacenter: str, port_name: str, ports: dict[str, int]) -> tuple[str, ...]:
        return self.security.broker_args(datacenter, ports[f"{port_name}-sasl"]) if self.security else ()

    @property
    def live_zk(self) -> str:
        assert self.zk is not None
        return f"{self.zk.connect}/ferry/live"

    @property
    def offline_zk(self) -> str:
        assert self.zk is not None
        return f"{self.zk.connect}/ferry/offline"

    def start(self) -> None:
        ports = self._ports()
        if self.security is not None:  # TLS only, digest ACLs on every znode (demo_secure.py)
            tls = self.security.secure_zookeeper(ports["zookeeper-tls"])
            self.zk = ZooKeeperServer(port=0, data_dir=self.root / "zookeeper", tls=tls).start()
            self.progress.say(f"ZooKeeper on {self.zk.connect} over TLS only, znodes ACL'd to the demo's digest "
                              "identity (chroots /ferry/live, /ferry/offline)")
        else:
            self.zk = ZooKeeperServer(port=ports["zookeeper"], data_dir=self.root / "zookeeper").start()
            self.progress.say(f"ZooKeeper on {self.zk.connect} (chroots /ferry/live, /ferry/offline)")
        if self.security is not None:
            self.security.prepare({"live": self.live_zk, "offline": self.offline_zk})
            self.progress.say(f"secured: CA and broker certificate, SCRAM users and ACLs of least privilege "
                              f"(client files in {self.security.folder / 'clients'})")
        replication = ("--override", f"default.replication.factor={LIVE_REPLICATION_FACTOR}",
                       "--override", f"min.insync.replicas={LIVE_MIN_INSYNC_REPLICAS}")
        for i in range(1, LIVE_BROKERS + 1):
            metrics = ports[f"metrics-live-{i}"]
            b = BrokerProcess(i, self.root / "live" / f"broker-{i}", self.live_zk, "live", port=ports[f"live-{i}"],
                              extra_args=(*replication, "--metrics-port", str(metrics),
                                          *self._secure_args("live", f"live-{i}", ports)))
            self.brokers.append(b.start())
            self.progress.say(f"live broker {i} on {self._listeners(b, ports, f'live-{i}')} "
                              f"(metrics on http://127.0.0.1:{metrics}/metrics)")
        for i in range(101, 101 + OFFLINE_BROKERS):
            metrics = ports[f"metrics-offline-{i}"]
            b = BrokerProcess(i, self.root / "offline" / f"broker-{i}", self.offline_zk, "offline",
                              port=ports[f"offline-{i}"],
                              extra_args=("--metrics-port", str(metrics),
                                          *self._secure_args("offline", f"offline-{i}", ports)))
            self.brokers.append(b.start())
            self.progress.say(f"offline broker {i} on {self._listeners(b, ports, f'offline-{i}')} "
                              f"(metrics on http://127.0.0.1:{metrics}/metrics)")

    def _listeners(self, broker: BrokerProcess, ports: dict[str, int], name: str) -> str:
        if self.security is None:
            return broker.bootstrap
        return f"SASL_SSL://127.0.0.1:{ports[name + '-sasl']} (PLAINTEXT {broker.bootstrap}: nobody may do anything)"

    def create_topics(self, topics: tuple[str, ...]) -> None:
        reg = ClusterRegistry(self.live_zk).start()
        try:
            for topic, n in [(t, self.partitions) for t in topics] + [(AUDIT_TOPIC, 2)]:
                try:
                    reg.create_topic(topic, n, {"retention.ms": str(7 * 24 * 3_600_000)},
                                     replication_factor=LIVE_REPLICATION_FACTOR)
                    self.progress.say(f"created live topic {topic} ({n} partitions, "
                                      f"{LIVE_REPLICATION_FACTOR} replicas each)")
                except TopicExistsError:
                    self.progress.say(f"live topic {topic} exists (reusing {self.root})")
        finally:
            reg.stop()

    def register_schemas(self, topics: tuple[str, ...]) -> None:
        events = Path(__file__).resolve().parent.parent / "schemas" / "events"
        with SchemaRegistry(self.live_zk) as reg:
            for topic in topics:
                schema_id = reg.register(subject_for_topic(topic), (events / f"{topic}.avsc").read_text())
                self.progress.say(f"schema {subject_for_topic(topic)} registered as id {schema_id}")

    def start_mirror(self) -> None:
        """The standalone mirror process (`ferry demo --mirror standalone`; the default is a link: demo_mirror.py)."""
        ports = self._ports()
        self.mirror = spawn_ferry("mirror", self.root / "mirror.out", [
            "mirror", "--source-zookeeper", self.live_zk, "--target-zookeeper", self.offline_zk, "--include", ".*",
            "--streams", "2", "--metrics-port", str(ports["mirror-metrics"]), "--datacenter", "offline",
            "--commit-interval", "1", *self._mirror_configs()])
        wait_for_port("127.0.0.1", ports["mirror-metrics"], 30, self.mirror.proc, self.mirror.log_file)
        self.progress.say(f"mirror running (metrics on http://127.0.0.1:{ports['mirror-metrics']}/metrics)")

    def _mirror_configs(self) -> list[str]:
        """The mirror's own users on each side, as files (never a password on its command line)."""
        if self.security is None:
            return []
        return ["--source-config", str(self.security.client_file("live", "mirror")),
                "--target-config", str(self.security.client_file("offline", "mirror"))]

    # -- the data ---------------------------------------------------------------------------------------------
    def publish(self, n_events: int, start_ms: int, end_ms: int, hosts: list[str], seed: int) -> dict[str, int]:
        """Publish Avro events from `hosts` simulated frontends, each an audited producer of its own."""
        produced: dict[str, int] = {}
        with SchemaRegistry(self.live_zk) as reg:
            serializers: dict[str, AvroSerializer] = {}
            frontend = self.client("live", "frontend")
            producers = {h: Producer(zookeeper=self.live_zk, application=h, audit_interval_s=2.0,
                                     client_config=frontend) for h in hosts}
            try:
                for i, ev in enumerate(activity_stream(n_events, start_ms, end_ms, hosts, seed), 1):
                    ser = serializers.get(ev.topic)
                    if ser is None:
                        ser = serializers[ev.topic] = AvroSerializer(reg, subject_for_topic(ev.topic))
                    producers[ev.record["host"]].send(ev.topic, ser.serialize(ev.record), ev.key,
                                                      timestamp_ms=ev.event_time_ms)
                    produced[ev.topic] = produced.get(ev.topic, 0) + 1
                    if i % 2000 == 0 or i == n_events:
                        self.progress.bar("publishing", i, n_events)
            finally:
                undelivered = sum(p.close() for p in producers.values())
        if undelivered:
            raise RuntimeError(f"{undelivered} events were not delivered")
        self.progress.say("published " + ", ".join(f"{t}={n}" for t, n in sorted(produced.items()))
                          + f" from {len(hosts)} hosts (audit counts published to {AUDIT_TOPIC})")
        return produced

    # -- shutdown ---------------------------------------------------------------------------------------------
    def __enter__(self) -> DemoCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.say("stopping mirror, brokers and ZooKeeper")
        if self.mirror is not None:
            self.mirror.stop()
        for b in reversed(self.brokers):
            b.stop()
        if self.zk is not None:
            self.zk.stop()
        self.progress.say(f"stopped; data and logs kept in {self.root} (--clean to start over)")

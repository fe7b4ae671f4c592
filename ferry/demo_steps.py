"""The demo's steps, each a method of DemoCluster: start, publish, mirror, load, report, stop."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from ferry.audit.live import read_live_counts
from ferry.audit.reader import read_audit_events
from ferry.audit.reconciler import reconcile
from ferry.client.producer import Producer
from ferry.demo_events import activity_stream
from ferry.embedded import (
    BrokerProcess,
    ManagedProcess,
    ZooKeeperServer,
    free_port,
    spawn_ferry,
    wait_for_port,
)
from ferry.loaders.session import build_session
from ferry.mirror.status import mirror_status
from ferry.schemas.registry import SchemaRegistry, subject_for_topic
from ferry.schemas.wire import AvroSerializer
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

    def __init__(self, root: Path, progress: DemoProgress, partitions: int = 4) -> None:
        self.root = root
        self.progress = progress
        self.partitions = partitions
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
            self.ports_file.write_text(json.dumps(ports))
        return ports

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
        self.zk = ZooKeeperServer(port=ports["zookeeper"], data_dir=self.root / "zookeeper").start()
        self.progress.say(f"ZooKeeper on {self.zk.connect} (chroots /ferry/live, /ferry/offline)")
        replication = ("--override", f"default.replication.factor={LIVE_REPLICATION_FACTOR}",
                       "--override", f"min.insync.replicas={LIVE_MIN_INSYNC_REPLICAS}")
        for i in range(1, LIVE_BROKERS + 1):
            b = BrokerProcess(i, self.root / "live" / f"broker-{i}", self.live_zk, "live", port=ports[f"live-{i}"],
                              extra_args=replication)
            self.brokers.append(b.start())
            self.progress.say(f"live broker {i} on {b.bootstrap}")
        for i in range(101, 101 + OFFLINE_BROKERS):
            b = BrokerProcess(i, self.root / "offline" / f"broker-{i}", self.offline_zk, "offline",
                              port=ports[f"offline-{i}"])
            self.brokers.append(b.start())
            self.progress.say(f"offline broker {i} on {b.bootstrap}")

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
        ports = self._ports()
        self.mirror = spawn_ferry("mirror", self.root / "mirror.out", [
            "mirror", "--source-zookeeper", self.live_zk, "--target-zookeeper", self.offline_zk, "--include", ".*",
            "--streams", "2", "--metrics-port", str(ports["mirror-metrics"]), "--datacenter", "offline",
            "--commit-interval", "1"])
        wait_for_port("127.0.0.1", ports["mirror-metrics"], 30, self.mirror.proc, self.mirror.log_file)
        self.progress.say(f"mirror running (metrics on http://127.0.0.1:{ports['mirror-metrics']}/metrics)")

    # -- the data ---------------------------------------------------------------------------------------------
    def publish(self, n_events: int, start_ms: int, end_ms: int, hosts: list[str], seed: int) -> dict[str, int]:
        """Publish Avro events from `hosts` simulated frontends, each an audited producer of its own."""
        produced: dict[str, int] = {}
        with SchemaRegistry(self.live_zk) as reg:
            serializers: dict[str, AvroSerializer] = {}
            producers = {h: Producer(zookeeper=self.live_zk, application=h, audit_interval_s=2.0) for h in hosts}
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

    def wait_mirrored(self, produced: dict[str, int], timeout_s: float = 120.0) -> None:
        """Wait until the mirror's committed offsets reach the live end offsets (lag 0)."""
        deadline = time.monotonic() + timeout_s
        lag = -1
        while time.monotonic() < deadline:
            status = mirror_status(self.live_zk, self.offline_zk, "ferry-mirror", include=".*")
            lag = status.total_lag
            if lag == 0 and {r.topic for r in status.partitions} >= set(produced):
                self.progress.say("mirror caught up: lag 0 on every partition")
                return
            self.progress.say(f"mirror lag {lag} messages")
            time.sleep(1.0)
        raise RuntimeError(f"mirror still {lag} messages behind after {timeout_s:.0f}s (see {self.root}/mirror.out)")

    def run_hourly_dag(self, hours: list[int], short: bool = False) -> None:
        """Run the generated hourly DAG (dags/) in-process with ``dag.test()`` once per hour: plan, Spark
        load, reconcile, publish. Airflow keeps its SQLite database under the demo directory."""
        repo = Path(__file__).resolve().parent.parent
        home = self.root / "airflow"
        home.mkdir(exist_ok=True)
        config = self.root / "ferry_dags.yaml"
        config.write_text(
            "defaults:\n"
            f"  zookeeper: '{self.offline_zk}'\n"
            f"  state_dir: '{self.root / 'warehouse-state'}'\n"
            "  database: ferry\n  lateness_minutes: 0\n  retries: 0\n  check_poke_s: 5\n"
            f"  live_zookeepers: ['{self.live_zk}']\n"
            f"  max_per_split: {20_000 if short else 200_000}\n"
            "  spark_conf: {spark.ui.showConsoleProgress: 'false'}\n"
            "groups:\n  - name: activity\n    topics: [page_view, click, search]\n")
        os.environ.update({
            "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"), "FERRY_DAGS_CONFIG": str(config),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"), "PYSPARK_PYTHON": sys.executable,
            "FERRY_SPARK_LOG_LEVEL": "ERROR", "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "SPARK_LOCAL_IP": "127.0.0.1"})
        if not (home / "airflow.db").exists():
            self.progress.say("preparing Airflow's database (airflow db migrate, once per demo directory)")
            airflow = str(Path(sys.executable).with_name("airflow"))
            proc = subprocess.run([airflow, "db", "migrate"], capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise RuntimeError("airflow db migrate failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
        sys.path.insert(0, str(repo / "dags"))
        # the DAG factory is not a ferry module: it lives in the dags folder (on the path only from here) and
        # builds Airflow objects; the demo's other steps never pay for Airflow
        from ferry_dag_factory import build_dag, load_config

        dag = build_dag(load_config(config)[0])
        for noisy in ("kazoo", "py4j", "airflow"):  # Airflow's logging setup turns these up; the demo has its own
            logging.getLogger(noisy).setLevel(logging.WARNING)
        for n, hour in enumerate(hours, 1):
            logical = dt.datetime.fromtimestamp(hour / 1000, dt.UTC) + dt.timedelta(hours=1)
            self.progress.say(f"Airflow: {dag.dag_id} for the hour {_hour(hour)} ({n}/{len(hours)}): "
                              "plan -> load (Spark) -> reconcile -> publish")
            dr = dag.test(logical_date=logical)
            states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
            self.progress.say(f"  run {dr.state}: " + ", ".join(f"{t}={s}" for t, s in sorted(states.items())))

    def report(self, topics: tuple[str, ...], hours: list[int]) -> dict:
        """The books per topic and hour, the mirror's lag, and what an analyst would ask the warehouse."""
        audit_log = read_audit_events(self.offline_zk)
        live = read_live_counts([self.live_zk])  # the producers' counts as the live datacenter knows them
        books = reconcile(audit_log.events + live.events, since_ms=hours[0], until_ms=hours[-1] + 3_600_000)
        rows = [h for h in books.hours if h.topic in topics]
        print()
        print("== The books (live producers' counts + offline _audit, per topic and hour of event time) ==")
        print(_table(("topic", "hour (UTC)", "produced", "mirrored", "loaded", "missing", "dupes", "complete"),
                     [(h.topic, _hour(h.hour_start), h.produced, h.mirrored, h.loaded, h.missing, h.duplicates,
                       "yes" if h.complete else "NO") for h in rows]))
        status = mirror_status(self.live_zk, self.offline_zk, "ferry-mirror", include=".*")
        print()
        print(f"== Mirror (group ferry-mirror, members {', '.join(status.members) or '-'}) ==")
        per_topic: dict[str, list[int]] = {}
        for r in status.partitions:
            agg = per_topic.setdefault(r.topic, [0, 0, 0, 0])
            agg[0] += 1
            agg[1] += r.live_end or 0
            agg[2] += r.offline_end or 0
            agg[3] += r.lag or 0
        print(_table(("topic", "partitions", "live end", "offline end", "lag"),
                     [(t, *v) for t, v in sorted(per_topic.items())]))
        print()
        print("== Analyst: top pages per hour (SELECT ... FROM ferry.page_view) ==")
        top = self.analyst_query()
        print(_table(("dt", "hr", "page", "views", "members"), top))
        complete = (bool(rows) and all(h.complete for h in rows) and len(rows) == len(topics) * len(hours)
                    and not live.unreachable)
        print()
        print("every hour complete: " + ("yes" if complete else "NO (see the books above)"))
        return {"complete": complete, "books": [h.to_dict() for h in rows], "mirror": status.to_dict(),
                "top_pages": top}

    def analyst_query(self) -> list[tuple]:
        spark = build_session(self.root / "warehouse-state")
        df = spark.sql("""
            SELECT dt, hr, page, views, members FROM (
              SELECT dt, hr, page, count(*) AS views, count(DISTINCT member_id) AS members,
                     row_number() OVER (PARTITION BY dt, hr ORDER BY count(*) DESC) AS rank
              FROM ferry.page_view GROUP BY dt, hr, page) WHERE rank <= 3 ORDER BY dt, hr, views DESC""")
        return [tuple(r) for r in df.collect()]

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


def _hour(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:00", time.gmtime(ms / 1000))


def _table(headers: tuple, rows: list[tuple]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if isinstance(v, str) else c.rjust(w)
                       for c, w, v in zip(r, widths, (headers if k == 0 else rows[k - 1]), strict=True))
             for k, r in enumerate(cells)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) if rows else "\n".join(lines) + "\n(none)"

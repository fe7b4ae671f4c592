"""A small real pipeline for the dashboard's tests: a live and an offline cluster (broker processes), the
mirror between them (data, `_audit` and the schema registry), Avro events with producer audit counts from
ferry's Producer, and real `ferry load` runs into the warehouse: one that commits (and publishes the
warehouse counts), one that fails on a record that is not Avro (its error noted in the ledger); plus a run
that began and never ended (as a killed load leaves it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS, hour_start
from ferry.client.audit.event import AUDIT_TOPIC
from ferry.client.producer import Producer
from ferry.loaders.ledger import Ledger
from ferry.zk import ClusterRegistry
from tests.mirror.mirror_harness import MirrorProcess, committed_to_end, wait_for

TOPIC = "views"
BROKEN = "broken"  # a topic whose one message is not Avro: its load fails
ROOT = Path(__file__).resolve().parents[2]
VIEW = {"type": "record", "name": "View", "namespace": "ferry.dashboard.test",
        "fields": [{"name": "page", "type": "string"}, {"name": "n", "type": "long"}]}


@dataclass
class Pipeline:
    live_zk: str
    offline_zk: str
    state_dir: Path
    mirror: MirrorProcess
    past_hour: int  # hour start (ms) of the complete hour the pipeline made
    tmp: Path
    live_bootstrap: str = ""
    offline_cluster: object = None  # tests/conftest.py's Cluster: a test may stop its brokers

    def caught_up(self, topics: list[str] | None = None) -> bool:
        from ferry.mirror.status import mirror_status

        try:
            return committed_to_end(mirror_status(self.live_zk, self.offline_zk, "ferry-mirror"),
                                    topics or [TOPIC, AUDIT_TOPIC])
        except Exception:  # noqa: BLE001 - not registered yet: keep waiting
            return False

    def produce(self, n: int, ts0: int, host_app: str = "web") -> None:
        """n Avro events to the live cluster; the Producer publishes their counts to the live `_audit` on close."""
        from ferry.schemas.registry import SchemaRegistry, subject_for_topic
        from ferry.schemas.wire import AvroSerializer

        with SchemaRegistry(self.live_zk) as reg:
            ser = AvroSerializer(reg, subject_for_topic(TOPIC), VIEW)
        with Producer(zookeeper=self.live_zk, application=host_app) as p:
            for i in range(n):
                p.send(TOPIC, ser({"page": f"p{i % 5}", "n": i}), timestamp_ms=ts0 + (i * 997) % BUCKET_MS)

    def load(self, topics: str) -> subprocess.CompletedProcess:
        """`ferry load` of the offline cluster into this pipeline's warehouse (its ledger: ``state_dir``)."""
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
                   PYTHONPATH=str(ROOT))
        return subprocess.run([sys.executable, "-m", "ferry.cli", "load", "--zookeeper", self.offline_zk,
                               "--topics", topics, "--state-dir", str(self.state_dir), "--conf",
                               "spark.sql.shuffle.partitions=2", "--live-zookeeper", self.live_zk],
                              capture_output=True, text=True, timeout=600, env=env)


def start_pipeline(cluster_factory, tmp: Path, n: int = 40) -> Pipeline:
    live, offline = cluster_factory(1, "live"), cluster_factory(1, "offline")
    for c in (live, offline):
        with ClusterRegistry(c.zk_connect) as reg:
            for name, parts in ((AUDIT_TOPIC, 1), (TOPIC, 2), (BROKEN, 1)):
                if reg.topic(name) is None:
                    reg.create_topic(name, parts)
    mirror = MirrorProcess(tmp / "mirror.log", live.zk_connect, offline.zk_connect, f"{TOPIC}|{BROKEN}|{AUDIT_TOPIC}",
                           "--group", "ferry-mirror", "--commit-interval", "0.5").start()
    past = hour_start(int(time.time() * 1000)) - 2 * HOUR_MS
    pipe = Pipeline(live.zk_connect, offline.zk_connect, tmp / "loader-state", mirror, past, tmp, live.bootstrap, offline)
    pipe.produce(n, past)  # two buckets' worth at most: (i*997) % 10 min spreads within the first bucket
    with Producer(zookeeper=pipe.live_zk, application="web") as p:
        p.send(BROKEN, b"not avro", timestamp_ms=past + 60_000)
    wait_for(lambda: pipe.caught_up([TOPIC, BROKEN, AUDIT_TOPIC]), 90, "the mirror to copy the topics and `_audit`")
    ok = pipe.load(TOPIC)  # loads `views` and `_audit`, publishes the warehouse counts, balances the books
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    bad = pipe.load(BROKEN)
    assert bad.returncode == 1 and "noted in the ledger" in bad.stdout, bad.stdout[-3000:] + bad.stderr[-3000:]
    ledger = Ledger(pipe.state_dir)
    with ledger.lock():  # a run that began and never ended, as `kill -9` of a load leaves it
        ledger.begin(f"killed-{uuid.uuid4().hex[:6]}", [str(tmp / "wh")])
    return pipe

"""Loader fixtures: one real Spark session (local[2], Hive + Derby) per test session, one offline cluster
(a real broker process under a fresh ZooKeeper chroot) per module, and helpers that produce Avro events
through ferry's audited Producer."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.embedded import BrokerProcess

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

PAGE_VIEW = {
    "type": "record", "name": "PageView", "namespace": "ferry.test",
    "fields": [
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "guid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "member_id", "type": ["null", "long"], "default": None},
        {"name": "page", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "attrs", "type": {"type": "map", "values": "long"}, "default": {}},
    ],
}
HOUR_MS = 3_600_000

# rows and distinct (topic, partition, offset) of a table, in a separate Spark (exactly once checks)
COUNT_SCRIPT = """
import json, sys
from ferry.loaders.session import build_session
spark = build_session(sys.argv[1], master="local[1]")
db, table = sys.argv[2], sys.argv[3]
r = spark.sql(f"SELECT count(*) AS n, count(DISTINCT _topic, _partition, _offset) AS d FROM {db}.{table}").collect()[0]
print("RESULT " + json.dumps({"rows": r.n, "distinct": r.d}))
"""


@dataclass
class Offline:
    zk: str
    broker: BrokerProcess

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """One Hive-enabled session for every loader test (a session costs ~5-40 s to start here)."""
    from ferry.loaders.session import build_session

    session = build_session(tmp_path_factory.mktemp("spark-state"), master="local[2]",
                            conf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def offline(zk_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Offline]:
    """A one-broker "offline" cluster shared by a module's tests (each test uses its own topics)."""
    from ferry.zk import ClusterRegistry

    zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/offline"
    broker = BrokerProcess(1, tmp_path_factory.mktemp("offline") / "broker-1", zk, "offline")
    broker.start()
    with ClusterRegistry(zk) as reg:
        reg.create_topic("_audit", 1)
    yield Offline(zk, broker)
    broker.stop()


def hour_start(ms: int) -> int:
    return ms - ms % HOUR_MS


def past_hour(hours_ago: int) -> int:
    """Start (ms) of the UTC hour ``hours_ago`` hours before the current one."""
    return hour_start(int(time.time() * 1000)) - hours_ago * HOUR_MS


def create_topic(offline: Offline, partitions: int = 2, prefix: str = "pv") -> str:
    from ferry.zk import ClusterRegistry

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with ClusterRegistry(offline.zk) as reg:
        reg.create_topic(name, partitions)
    return name


def produce(offline: Offline, topic: str, timestamps: list[int], schema: dict = PAGE_VIEW,
            extra: dict | None = None, round_robin: int = 0) -> int:
    """Produce one Avro event per timestamp (audited as tier producer); returns how many were acknowledged."""
    from ferry.client.producer import Producer
    from ferry.schemas.registry import SchemaRegistry
    from ferry.schemas.wire import AvroSerializer

    with SchemaRegistry(offline.zk) as reg:
        ser = AvroSerializer(reg, topic, schema)
        producer = Producer(bootstrap=offline.bootstrap, application="loader-test", datacenter="offline",
                            audit_interval_s=3600)
        for i, ts in enumerate(timestamps):
            rec = {"event_time": ts, "guid": str(uuid.uuid4()), "member_id": i if i % 3 else None,
                   "page": f"p{i % 7}", "tags": ["a", f"t{i % 2}"], "attrs": {"i": i}}
            rec.update(extra or {})
            producer.send(topic, ser(rec), timestamp_ms=ts, partition=i % round_robin if round_robin else None)
        assert producer.flush(60) == 0
        left = producer.close(60)
        assert left == 0
    return len(timestamps)


def spread(start_ms: int, n: int, span_ms: int = HOUR_MS) -> list[int]:
    """``n`` event times spread evenly over [start_ms, start_ms + span_ms)."""
    return [start_ms + (i * span_ms) // n for i in range(n)]


def label(ms: int) -> tuple[str, str]:
    import datetime as dt

    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


@pytest.fixture
def load_config(tmp_path: Path, offline: Offline):
    """``load_config(topics, **overrides)`` -> a LoadConfig with this test's own ledger and database."""
    from ferry.loaders.load_config import LoadConfig

    db = f"t_{uuid.uuid4().hex[:10]}"

    def make(topics, **kw) -> LoadConfig:
        kw.setdefault("max_per_split", 400)
        return LoadConfig(zookeeper=offline.zk, topics=topics, state_dir=str(tmp_path / "state"),
                          warehouse=str(tmp_path / "warehouse"), database=db, **kw)

    return make


# re-exported for the test modules (pytest runs in importlib mode: no package imports between tests)
@pytest.fixture
def helpers():
    return type("H", (), {"produce": staticmethod(produce), "create_topic": staticmethod(create_topic),
                          "past_hour": staticmethod(past_hour), "spread": staticmethod(spread),
                          "label": staticmethod(label), "HOUR_MS": HOUR_MS, "PAGE_VIEW": PAGE_VIEW})

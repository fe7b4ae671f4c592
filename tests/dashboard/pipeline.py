"""A small real pipeline for the dashboard's tests: a live and an offline cluster (broker processes), the
mirror between them, producer audit counts from ferry's Producer, warehouse counts published as a load
publishes them, and a loads' ledger with one committed and one unfinished run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ferry.audit.completeness import hour_label as label
from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS, hour_start
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent
from ferry.client.producer import Producer
from ferry.loaders.ledger import Ledger
from ferry.zk import ClusterRegistry
from tests.mirror.mirror_harness import MirrorProcess, committed_to_end, wait_for

TOPIC = "views"


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

    def caught_up(self) -> bool:
        from ferry.mirror.status import mirror_status

        try:
            return committed_to_end(mirror_status(self.live_zk, self.offline_zk, "ferry-mirror"), [TOPIC, AUDIT_TOPIC])
        except Exception:  # noqa: BLE001 - not registered yet: keep waiting
            return False

    def produce(self, n: int, ts0: int, host_app: str = "web") -> None:
        """n messages to the live cluster; the Producer publishes their counts to the live `_audit` on close."""
        with Producer(zookeeper=self.live_zk, application=host_app) as p:
            for i in range(n):
                p.send(TOPIC, b"v%d" % i, timestamp_ms=ts0 + (i * 997) % BUCKET_MS)

    def publish_warehouse(self, hour: int, counts: dict[int, int]) -> None:
        """The warehouse tier's counts of ``hour`` on the offline `_audit`, as a committed load publishes them."""
        with Producer(zookeeper=self.offline_zk, application="ferry-load", audit=False) as p:
            for bucket, n in counts.items():
                e = AuditEvent.new(TOPIC, "warehouse", bucket, n, host="loader", datacenter="offline",
                                   application="ferry-load", time_ms=int(time.time() * 1000))
                p.send(AUDIT_TOPIC, e.to_json(), TOPIC.encode())


def start_pipeline(cluster_factory, tmp: Path, n: int = 40) -> Pipeline:
    live, offline = cluster_factory(1, "live"), cluster_factory(1, "offline")
    for c in (live, offline):
        with ClusterRegistry(c.zk_connect) as reg:
            for name, parts in ((AUDIT_TOPIC, 1), (TOPIC, 2)):
                if reg.topic(name) is None:
                    reg.create_topic(name, parts)
    mirror = MirrorProcess(tmp / "mirror.log", live.zk_connect, offline.zk_connect, f"{TOPIC}|{AUDIT_TOPIC}",
                           "--group", "ferry-mirror", "--commit-interval", "0.5").start()
    past = hour_start(int(time.time() * 1000)) - 2 * HOUR_MS
    pipe = Pipeline(live.zk_connect, offline.zk_connect, tmp / "loader-state", mirror, past, tmp, live.bootstrap, offline)
    pipe.produce(n, past)  # two buckets' worth at most: (i*997) % 10 min spreads within the first bucket
    wait_for(pipe.caught_up, 90, "the mirror to copy the topic and `_audit`")
    pipe.publish_warehouse(past, {past: n})
    ledger = Ledger(pipe.state_dir)
    with ledger.lock():
        ledger.begin("run-ok", [str(tmp / "wh")])
        ledger.commit({"run_id": "run-ok", "rows": n, "ranges": [{"topic": TOPIC, "partition": 0, "start": 0,
                                                                  "end": n}], "hours": {TOPIC: [list(label(pipe.past_hour))]}})
        ledger.begin("run-crashed", [str(tmp / "wh")])  # began, never committed: a failed run
    return pipe

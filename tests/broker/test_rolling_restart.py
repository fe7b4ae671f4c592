"""A rolling restart under an idempotent acks=all producer, with real broker processes: each broker in turn
gets SIGTERM (a controlled shutdown: its leaderships move to in-sync replicas first) and comes back, then the
preferred replicas are elected again (`ferry topics elect-leaders`), twice over. What the Ansible test
(tests/infra/test_ansible.py) does to containers, here quicker and with the producer's acknowledged offsets
checked: nothing failed, nothing lost, nothing written twice, order kept, replicas byte-identical."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fault_helpers import wait_until
from replication_helpers import FAST, ReplicatedCluster
from test_replication_faults import ContinuousProducer, stop_and_check_exactly_once

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _elect_preferred(zk: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "ferry.cli", "topics", "elect-leaders", "--all-topic-partitions",
                          "--zookeeper", zk], capture_output=True, text=True, timeout=90, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_rolling_restarts_and_preferred_elections_under_idempotent_acks_all(zk_server, tmp_path):
    c = ReplicatedCluster(zk_server.connect, tmp_path, 3, FAST)
    try:
        topic, partitions = "rolling", 4
        c.registry.create_topic(topic, partitions, {"min.insync.replicas": "2"}, replication_factor=3)
        c.wait_isr(topic, partitions, 3)
        # the limit only bounds the run: it must outlast every restart (400/s for 500 s)
        prod = ContinuousProducer(c.bootstrap, topic, partitions, limit=200_000, per_second=400)
        prod.start()
        wait_until(lambda: prod.acked_count() >= 100, 30, "the producer's first acknowledgements")
        for _cycle in range(2):
            for b in (1, 2, 3):
                acked_before = prod.acked_count()
                c.brokers[b].stop()  # SIGTERM: controlled shutdown
                c.brokers[b].start(timeout=60)
                c.wait_isr(topic, partitions, 3, timeout=60)
                wait_until(lambda n=acked_before: prod.acked_count() > n, 30, f"acknowledgements after broker {b}")
            _elect_preferred(c.zk)
            replicas = c.registry.topic(topic).replicas
            for p in range(partitions):
                c.wait_state(topic, p, lambda s, first=replicas[p][0]: s.leader == first, 30, "the preferred leader")
        run, total = stop_and_check_exactly_once(c, topic, partitions, prod, "restart")
        assert total == len(run.acked)
        print(f"{run.sent} sent, {len(run.acked)} acknowledged, {run.retries} produce retries")
    finally:
        c.stop()

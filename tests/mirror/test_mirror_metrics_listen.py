"""`ferry mirror --metrics-listen HOST:PORT` serves the mirror's metrics (the flag every metrics-serving
process shares; --metrics-port is its older, hidden spelling)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ferry.zk.local_process import free_port
from tests.client.conftest import create_topic

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two brokers and a mirror process
def test_mirror_serves_metrics_on_metrics_listen(cluster_factory):
    live = cluster_factory(n_brokers=1, datacenter="live")
    offline = cluster_factory(n_brokers=1, datacenter="offline")
    create_topic(live.zk_connect, "_audit", 1)
    create_topic(offline.zk_connect, "_audit", 1)
    create_topic(live.zk_connect, "metered", 1)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "mirror", "--source-zookeeper", live.zk_connect,
                             "--target-zookeeper", offline.zk_connect, "--include", "metered",
                             "--metrics-listen", f"127.0.0.1:{port}"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        text = ""
        while not re.search(r"^ferry_mirror_owned_partitions [1-9]", text, re.M):  # metered and _audit
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, text[-2000:]
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                pass
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()

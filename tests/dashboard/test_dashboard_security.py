"""`ferry dashboard --command-config` (docs/dashboard.md "Secured clusters"): against a cluster whose authorizer
refuses anonymous clients, the dashboard reads `_audit` over SASL_SSL as a `monitor` user and shows the counts;
without the settings it shows the cluster as unreadable; the password is in no page, no JSON, no log and no
process list; a missing file is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from acl_helpers import binding, grant  # noqa: E402
from secure_cluster import add_user, start_secure_cluster  # noqa: E402

from ferry.dashboard.process import start_dashboard  # noqa: E402
from ferry.embedded import free_port  # noqa: E402
from ferry.wire.protocol.acl_types import AclOperation, ResourceType  # noqa: E402
from ferry.zk import ClusterRegistry  # noqa: E402

pytestmark = pytest.mark.slow

MONITOR_PW = "Monitor-secret-pw-11"
OPS_PW = "Ops-secret-pw-12"


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=60).read().decode()


def test_dashboard_reads_a_secured_cluster_with_its_own_user(zk_server, tmp_path):
    from ferry.client.producer import Producer
    from ferry.wire.client_config import ClientConfig

    cluster = start_secure_cluster(zk_server.connect, tmp_path / "offline", "offline",
                                   extra_props="authorizer.class.name=ferry\nsuper.users=User:ops\n")
    procs = []
    try:
        add_user(cluster.zk, "ops", OPS_PW)
        add_user(cluster.zk, "monitor", MONITOR_PW)
        grant(cluster.zk, binding(ResourceType.TOPIC, "_audit", AclOperation.READ, principal="User:monitor"))
        topic = f"dash_{uuid.uuid4().hex[:8]}"
        with ClusterRegistry(cluster.zk) as reg:
            reg.create_topic("_audit", 1)
            reg.create_topic(topic, 1)
        ops = ClientConfig.from_file(cluster.sasl_ssl_config("ops", OPS_PW))
        now_ms = int(time.time() * 1000)
        producer = Producer(zookeeper=cluster.zk, application="dash-test", audit_interval_s=3600, client_config=ops)
        for i in range(25):
            producer.send(topic, b"x%d" % i, timestamp_ms=now_ms)
        assert producer.close(60) == 0  # its audit counts go to `_audit` as it closes

        monitor = cluster.sasl_ssl_config("monitor", MONITOR_PW, name="monitor.properties")
        secured_port, plain_port = free_port(), free_port()
        procs.append(start_dashboard(tmp_path / "secured.out", cluster.zk, [], None, "127.0.0.1", secured_port,
                                     offline_only=True, command_config=monitor))
        procs.append(start_dashboard(tmp_path / "plain.out", cluster.zk, [], None, "127.0.0.1", plain_port,
                                     offline_only=True))
        grid = json.loads(_get(f"http://127.0.0.1:{secured_port}/api/completeness"))
        assert grid["error"] is None, grid["error"]
        produced = sum(c["produced"] for c in grid["cells"].get(topic, {}).values())
        assert produced == 25, grid["cells"]
        anonymous = json.loads(_get(f"http://127.0.0.1:{plain_port}/api/completeness"))
        assert topic not in anonymous["cells"], anonymous  # refused: `_audit` is hidden from it, nothing shown

        pages = [_get(f"http://127.0.0.1:{secured_port}{p}") for p in ("/", "/api/completeness", "/api/clusters",
                                                                       "/api/mirror", "/api/loads")]
        ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, timeout=30).stdout
        assert str(monitor) in ps  # the file's path is on the command line, its content is not
        for text in (*pages, ps, (tmp_path / "secured.out").read_text()):
            assert MONITOR_PW not in text

        r = subprocess.run([sys.executable, "-m", "ferry.cli", "dashboard", "--zookeeper", cluster.zk,
                            "--offline-only", "--listen", f"127.0.0.1:{free_port()}", "--command-config",
                            str(tmp_path / "missing.properties")], capture_output=True, text=True, timeout=60,
                           cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "missing.properties" in r.stderr, r.stderr
    finally:
        for p in procs:
            p.stop()
        cluster.stop()

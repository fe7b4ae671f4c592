"""The mirror between two secured clusters (docs/mirror.md "Secured clusters"): each side reached over SASL_SSL
with its own user and the least the ACLs grant (live: Read on the topics and the group; offline: Write and
Create), through `ferry mirror --source-config / --target-config`; it copies exactly, `ferry mirror status`
reads both sides the same way, and the passwords appear in no process list and no log. A refused login at start
is one line naming the cluster, exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mirror_harness import MirrorProcess, mirrored_to_end, produce, read_log, wait_for, wait_partitions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from acl_helpers import binding, grant  # noqa: E402
from secure_cluster import add_user, start_secure_cluster  # noqa: E402

from ferry.wire.protocol.acl_types import AclOperation, ResourceType  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402

pytestmark = pytest.mark.slow

LIVE_PW, OFFLINE_PW = "Live-mirror-pw-1", "Offline-mirror-pw-2"
# ops on the loopback PLAINTEXT listener (the test's producer and its log reads) is the super user
# (and `ops`, for the ACL admin check over SASL_SSL)
ADMIN = "authorizer.class.name=ferry\nsuper.users=User:ANONYMOUS;User:ops\n"
OPS_PW = "Ops-admin-pw-3"


class Side:
    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.zk_connect = cluster.zk
        self.bootstrap = cluster.plaintext


@pytest.fixture
def secured_pair(zk_server, tmp_path):
    live = start_secure_cluster(zk_server.connect, tmp_path / "live", "live", extra_props=ADMIN)
    offline = start_secure_cluster(zk_server.connect, tmp_path / "offline", "offline", extra_props=ADMIN)
    try:
        add_user(live.zk, "mirror-live", LIVE_PW)
        add_user(offline.zk, "mirror-offline", OFFLINE_PW)
        add_user(live.zk, "ops", OPS_PW)
        user = "User:mirror-live"
        grant(live.zk, binding(ResourceType.TOPIC, "*", AclOperation.READ, principal=user),
              binding(ResourceType.GROUP, "ferry-mirror", AclOperation.READ, principal=user))
        user = "User:mirror-offline"
        grant(offline.zk, *(binding(ResourceType.TOPIC, "*", op, principal=user)
                            for op in (AclOperation.WRITE, AclOperation.CREATE)))
        yield live, offline
    finally:
        live.stop()
        offline.stop()


def _ps() -> str:
    return subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, timeout=10).stdout


def test_mirror_between_two_secured_clusters_with_separate_users(secured_pair, tmp_path):
    live, offline = secured_pair
    topics = {"sec-views": 2, "sec-clicks": 1, "_audit": 1}
    with ClusterRegistry(live.zk) as reg:
        for t, n in topics.items():
            reg.create_topic(t, n, None, 1)
    for t, n in topics.items():
        wait_partitions(live.plaintext, t, n)
    produce(live.plaintext, "sec-views", 2, 1500)
    produce(live.plaintext, "sec-clicks", 1, 700, compression="zstd")
    source = live.sasl_ssl_config("mirror-live", LIVE_PW, name="source.properties")
    target = offline.sasl_ssl_config("mirror-offline", OFFLINE_PW, name="target.properties")
    mirror = MirrorProcess(tmp_path / "mirror.log", live.zk, offline.zk, "sec-.*", "--source-config", str(source),
                           "--target-config", str(target), "--commit-interval", "0.5", "--audit-interval", "1",
                           "--log-level", "DEBUG").start()
    try:
        listing = _ps()
        assert str(source) in listing and LIVE_PW not in listing and OFFLINE_PW not in listing
        produce(live.plaintext, "sec-views", 2, 500, start=1500)
        wait_for(lambda: mirrored_to_end(Side(live), Side(offline), ["sec-views", "sec-clicks"]), 120,
                 "the mirror to copy both topics", interval=1.0)
        names = {"sec-views": 2, "sec-clicks": 1}
        assert read_log(offline.plaintext, names) == read_log(live.plaintext, names)  # byte for byte, no duplicates
        r = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "status", "--source-zookeeper", live.zk,
                            "--target-zookeeper", offline.zk, "--source-config", str(source), "--target-config",
                            str(target), "--json"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert '"total_lag": 0' in r.stdout and LIVE_PW not in r.stdout + r.stderr
        # the same rows over the Kafka protocol alone: the live SASL_SSL listener, the mirror's user (Read on the
        # group and the topics), --command-config
        k = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "status", "--bootstrap-server",
                            live.bootstrap("SASL_SSL"), "--command-config", str(source), "--include", "sec-.*",
                            "--json"], capture_output=True, text=True, timeout=60)
        assert k.returncode == 0, k.stderr
        rows = {(p["topic"], p["partition"]): (p["copied_to"], p["lag"], p["lag_seconds"])
                for p in json.loads(k.stdout)["partitions"]}
        assert rows == {("sec-views", 0): (1000, 0, 0.0), ("sec-views", 1): (1000, 0, 0.0),
                        ("sec-clicks", 0): (700, 0, 0.0), ("_audit", 0): rows[("_audit", 0)]}
        assert LIVE_PW not in k.stdout + k.stderr
    finally:
        mirror.stop()
    log = mirror.log_text()
    assert "mirror" in log and LIVE_PW not in log and OFFLINE_PW not in log
    for broker in (*live.brokers, *offline.brokers):
        text = broker.log_file.read_text(errors="replace")
        assert LIVE_PW not in text and OFFLINE_PW not in text
    # `ferry acls` through a broker's ACL APIs over SASL_SSL: ops (a super user) reads them, the mirror's user may not
    acls = ["acls", "list", "--json", "--bootstrap-server", live.bootstrap("SASL_SSL"), "--command-config"]
    r = subprocess.run([sys.executable, "-m", "ferry.cli", *acls, str(live.sasl_ssl_config("ops", OPS_PW))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted((a["resourceType"], a["principal"]) for a in json.loads(r.stdout)) == [
        ("Group", "User:mirror-live"), ("Topic", "User:mirror-live")]
    r = subprocess.run([sys.executable, "-m", "ferry.cli", *acls, str(source)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("side", ["live", "offline"])
def test_a_refused_login_at_start_names_the_cluster(secured_pair, tmp_path, side):
    live, offline = secured_pair
    with ClusterRegistry(live.zk) as reg:
        reg.create_topic("sec-views", 1, None, 1)
    wrong = "Not-the-password-9"
    source = live.sasl_ssl_config("mirror-live", wrong if side == "live" else LIVE_PW)
    target = offline.sasl_ssl_config("mirror-offline", wrong if side == "offline" else OFFLINE_PW)
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "--source-zookeeper", live.zk,
                        "--target-zookeeper", offline.zk, "--include", "sec-.*", "--source-config", str(source),
                        "--target-config", str(target)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    lines = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and f"the {side} cluster" in lines[0] and "refused the mirror's login" in lines[0]
    assert "Traceback" not in r.stderr and wrong not in r.stderr
    assert time.monotonic() - started < 60

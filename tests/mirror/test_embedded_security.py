"""The embedded mirror towards a secured live cluster (docs/mirror.md "Embedded mirror", docs/security.md): a link's
--source-config makes the offline leaders fetch over the live brokers' SASL_SSL listener as the mirror's user (Read
on the topics only) and copy exactly; a wrong password or a config file gone from the broker makes the link
"failed: <one line>" in `describe` and `status`, the broker goes on copying its other links, and the password
appears in no log, znode or status; once the file is fixed the link runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mirror_harness import produce, read_log, wait_for, wait_partitions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from acl_helpers import binding, grant  # noqa: E402
from secure_cluster import add_user, start_secure_cluster  # noqa: E402

from ferry.wire.protocol.acl_types import AclOperation, ResourceType  # noqa: E402
from ferry.zk import ZkConnect  # noqa: E402
from ferry.zk import connect as zk_connect  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402

pytestmark = pytest.mark.slow

PW, WRONG = "Live-link-pw-7", "Not-the-link-pw-8"
# the test's producer and log reads use the loopback PLAINTEXT listener (ANONYMOUS, a super user)
ADMIN = "authorizer.class.name=ferry\nsuper.users=User:ANONYMOUS\n"


def link(offline, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "link", *args, "--zookeeper",
                           offline.zk_connect], capture_output=True, text=True, timeout=60)


def described(offline, name: str) -> dict:
    out = link(offline, "describe", name, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def znodes_text(zk: str) -> str:
    """Every znode's data under the offline chroot (the links, their progress and failures), as one text."""
    client = zk_connect(ZkConnect.parse(zk), timeout=10.0)
    try:
        out, todo = [], ["/"]
        while todo:
            path = todo.pop()
            data, _ = client.get(path)
            out.append((data or b"").decode(errors="replace"))
            todo += [f"{path.rstrip('/')}/{c}" for c in client.get_children(path)]
        return "\n".join(out)
    finally:
        client.stop()
        client.close()


def test_link_with_source_config_copies_from_a_sasl_ssl_live_cluster(zk_server, cluster_factory, tmp_path):
    live = start_secure_cluster(zk_server.connect, tmp_path / "live", "live", extra_props=ADMIN)
    try:
        add_user(live.zk, "mirror-live", PW)
        grant(live.zk, binding(ResourceType.TOPIC, "*", AclOperation.READ, principal="User:mirror-live"))
        offline = cluster_factory(1, "offline")
        with ClusterRegistry(live.zk) as reg:
            reg.create_topic("sec-views", 2, None, 1)
        wait_partitions(live.plaintext, "sec-views", 2)
        produce(live.plaintext, "sec-views", 2, 1200, compression="zstd")

        wrong = live.sasl_ssl_config("mirror-live", WRONG, name="wrong.properties")
        # one link per live cluster (docs/mirror.md): the failures are shown one after the other on one link
        r = link(offline, "create", "dc1", "--source-zookeeper", live.zk, "--include", "sec-.*",
                 "--source-config", str(wrong))
        assert r.returncode == 0, r.stderr
        wait_for(lambda: described(offline, "dc1")["state"].startswith("failed: "), 60,
                 "the wrong password to fail the link")
        failed = described(offline, "dc1")
        assert "\n" not in failed["state"] and "refused the link's login" in failed["state"], failed["state"]
        assert all(p["copied_to"] == -1 for p in failed["partitions"])
        status = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "status", "--target-zookeeper",
                                 offline.zk_connect], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "link dc1: failed: " in status.stdout
        assert PW not in status.stdout and WRONG not in status.stdout
        zk_text = znodes_text(offline.zk_connect)
        assert "refused the link's login" in zk_text  # the failure is reported in the offline ZooKeeper
        assert PW not in zk_text and WRONG not in zk_text

        # the password fixed in the file: the brokers read it again and the link runs, copying every message once
        live.write_config("wrong.properties", {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                               "sasl.username": "mirror-live", "sasl.password": PW,
                                               "ssl.ca.location": str(live.certs.ca)})
        wait_partitions(offline.bootstrap, "sec-views", 2, timeout=60)
        names = {"sec-views": 2}
        wait_for(lambda: read_log(offline.bootstrap, names, timeout=20) == read_log(live.plaintext, names, timeout=20),
                 120, "the copy over SASL_SSL", interval=1.0)
        rows = read_log(offline.bootstrap, names)
        assert sum(len(r) for r in rows.values()) == 1200  # byte-identical, nothing twice
        wait_for(lambda: (d := described(offline, "dc1"))["state"] == "running" and len(d["partitions"]) == 2
                 and all(p["copied_to"] == 600 for p in d["partitions"]) and d["failures"] == [], 90,
                 "the fixed link to report its copy")

        # a --source-config file missing on the broker: failed, naming it; deleting the failed link clears it
        gone = live.sasl_ssl_config("mirror-live", PW, name="gone.properties")
        assert link(offline, "alter", "dc1", "--source-config", str(gone)).returncode == 0
        gone.unlink()  # the broker reads the file when the link (re)starts there: now missing
        wait_for(lambda: "gone.properties" in described(offline, "dc1")["state"], 60, "the missing file")
        assert described(offline, "dc1")["state"].startswith("failed: ")
        (broker,) = offline.brokers.values()
        assert broker.running
        text = broker.log_file.read_text(errors="replace")
        assert "Traceback" not in text and PW not in text and WRONG not in text
        assert "not applied" not in text  # the old PLAINTEXT warning is gone
        assert link(offline, "delete", "dc1").returncode == 0
        wait_for(lambda: "gone.properties" not in znodes_text(offline.zk_connect), 30, "the failure to go")
    finally:
        live.stop()

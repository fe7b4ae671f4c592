"""Each broker says in its ZooKeeper registration which ferry it runs; `ferry topics describe` lists the brokers
with their versions and warns when they differ. Real ZooKeeper, real broker processes: broker 2 runs the same
code installed as another release (tests/release_label.py), as a half-done rolling upgrade leaves a cluster."""

from __future__ import annotations

import json
import re

import pytest
from kazoo.client import KazooClient

from ferry.cli import main
from ferry.client.tools.broker_description import version_mismatch
from ferry.wire import release
from ferry.zk.znodes import BrokerInfo
from tests.release_label import pythonpath_first, relabelled_release

OTHER = "0.1.0.post1"  # the version tests/infra/test_ansible.py's rolling upgrade rolls out


def _registration(zk_connect: str, broker_id: int) -> dict:
    hosts, _, chroot = zk_connect.partition("/")
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(f"/{chroot}/brokers/ids/{broker_id}")
    finally:
        zk.stop()
        zk.close()
    return json.loads(data)


def test_describe_lists_each_brokers_version_and_warns_on_a_mismatch(cluster_factory, tmp_path, monkeypatch,
                                                                      capsys) -> None:
    cluster = cluster_factory(1, "live")
    with monkeypatch.context() as m:  # broker 2 only: the other release's metadata first on its path
        m.setenv("PYTHONPATH", pythonpath_first(relabelled_release(tmp_path / "other-release", OTHER)))
        m.setenv("PYTHONSAFEPATH", "1")  # not the working directory first: a checkout's ferry.egg-info would win
        cluster.add_broker(2)
    ours = release.ferry_version()
    assert ours not in (OTHER, release.UNKNOWN)

    # The registration keeps Kafka's fields (other tools read them) and adds ferry's own.
    doc = _registration(cluster.zk_connect, 1)
    assert doc["version"] == 4 and doc["host"] == "127.0.0.1" and doc["port"] == cluster.brokers[1].port
    assert doc["timestamp"].isdigit()
    assert doc["ferry_version"] == ours
    m = re.fullmatch(r"(\d+)/(\d+) native", doc["ferry_native"])  # FERRY_REQUIRE_NATIVE=1: every part on
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 2, doc["ferry_native"]
    assert _registration(cluster.zk_connect, 2)["ferry_version"] == OTHER

    zk = cluster.zk_connect
    assert main(["topics", "create", "clicks", "--partitions", "2", "--zookeeper", zk]) == 0
    capsys.readouterr()
    assert main(["topics", "describe", "--zookeeper", zk]) == 0
    captured = capsys.readouterr()
    brokers = [line for line in captured.out.splitlines() if line.startswith("BrokerId:")]
    assert brokers == [
        f"BrokerId: 1\tAddress: 127.0.0.1:{cluster.brokers[1].port}\tDatacenter: live\tVersion: {ours}"
        f"\tNative: {doc['ferry_native']}",
        f"BrokerId: 2\tAddress: 127.0.0.1:{cluster.brokers[2].port}\tDatacenter: live\tVersion: {OTHER}"
        f"\tNative: {doc['ferry_native']}",
    ]
    assert captured.err == (f"ferry topics describe: warning: brokers run different ferry versions: "
                            f"{ours} on broker 1; {OTHER} on broker 2\n")
    # the filtered listings keep kafka-topics' shape (partition lines only); the warning still goes to stderr
    assert main(["topics", "describe", "--under-replicated", "--zookeeper", zk]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "different ferry versions" in captured.err

    # broker 2 upgraded to our release (stopped, started without the relabel): the warning goes away
    cluster.brokers[2].stop()
    cluster.brokers[2].start()
    assert main(["topics", "describe", "clicks", "--zookeeper", zk]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert sum(f"\tVersion: {ours}\t" in line for line in captured.out.splitlines()) == 2


@pytest.mark.parametrize(("versions", "expected"), [
    ({1: "0.1.0", 2: "0.1.0"}, None),
    ({1: "0.1.0"}, None),
    ({}, None),
    ({1: "0.1.0", 2: "0.2.0", 3: "0.1.0"}, "brokers run different ferry versions: 0.1.0 on brokers 1,3; 0.2.0 on broker 2"),
    ({1: "0.1.0", 2: ""}, "brokers run different ferry versions: 0.1.0 on broker 1; unknown on broker 2"),
])
def test_version_mismatch_line(versions: dict[int, str], expected: str | None) -> None:
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b, "live", ferry_version=v) for b, v in versions.items()}
    assert version_mismatch(brokers) == expected


def test_registration_round_trip_and_older_registrations() -> None:
    info = BrokerInfo(3, "h", 9092, "live", ferry_version="0.1.0", native="3/3 native")
    back = BrokerInfo.decode(3, info.encode())
    assert (back.ferry_version, back.native) == ("0.1.0", "3/3 native") and back == info
    doc = json.loads(info.encode())
    assert set(doc) == {"version", "host", "port", "datacenter", "timestamp", "ferry_version", "ferry_native"}
    # a registration written without ferry's fields (an older ferry, another tool) still reads
    old = BrokerInfo.decode(3, b'{"version":1,"host":"h","port":9092,"timestamp":"1"}')
    assert (old.ferry_version, old.native) == ("", "") and "ferry_version" not in json.loads(old.encode())

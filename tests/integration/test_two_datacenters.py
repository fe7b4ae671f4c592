"""The whole pipeline across two datacenters in containers, broken on purpose (issue 8), secured (issue 38).

The scenarios run in this order on one pair of datacenters (tests/integration/conftest.py), each
publishing its own batch of audited Avro events into the live cluster; after each one the offline
cluster must hold every event published so far exactly once (counted by event guid). The last one runs
the loader for the hour and checks the warehouse and the audit books. The datacenters are secured (SASL_SSL,
SCRAM users per role, ACLs, ZooKeeper digest ACLs; tests/integration/secured_datacenters.py): the producers,
the mirror link (the embedded mirror: the offline broker, on both networks, pulls from live as the link's user),
the loader and the counts go through their client files, and
test_strangers_on_the_network_are_refused checks what a process without the right credentials gets.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from ferry_datacenters import (
    LINK,
    LINK_CLIENT,
    LIVE_ZK,
    LOADER_CLIENT,
    OFFLINE_ZK,
    Datacenters,
    wait_registered,
)
from ferry_docker_helpers import docker

# Fixture setup may build images from scratch (minutes) before the first test: beyond the default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


def assert_exactly_once(dcs: Datacenters, got: dict) -> None:
    for topic, n in dcs.produced.items():
        assert got.get(topic) == {"total": n, "distinct": n}, f"{topic}: produced {n}, offline has {got.get(topic)}"


def mirror_lag(dcs: Datacenters) -> int:
    """The link's lag as its leaders last reported it (`ferry mirror link describe --json`: live end - copied to,
    per partition); -1 while a partition has no report yet or is not copying."""
    import json

    p = docker("exec", dcs.names["offline-broker-1"], "ferry", "mirror", "link", "describe", LINK, "--zookeeper",
               OFFLINE_ZK, "--json", timeout=60, check=False)
    try:
        parts = json.loads(p.stdout)["partitions"]
    except (ValueError, KeyError):
        return -1
    if not parts or any(r["state"] != "copying" or r["live_end"] < 0 or r["copied_to"] < 0 for r in parts):
        return -1
    return sum(r["live_end"] - r["copied_to"] for r in parts)


def wait_mirror_idle(dcs: Datacenters, timeout: float = 60) -> None:
    """Lag 0: every live partition the link selects is copied up to its live end."""
    deadline = time.monotonic() + timeout
    lag = -1
    while time.monotonic() < deadline:
        lag = mirror_lag(dcs)
        if lag == 0:
            return
        time.sleep(1)
    raise AssertionError(f"mirror lag still {lag} after {timeout:.0f}s\n{dcs.logs('offline-broker-1')}")


def native_parts(dcs: Datacenters, role: str) -> dict[str, str]:
    """part -> the rest of its `ferry version` line ("on", or "off" and why) in the role's container."""
    out = docker("exec", dcs.names[role], "ferry", "version", timeout=60).stdout.decode()
    return {line.split()[1]: " ".join(line.split()[2:]) for line in out.splitlines() if line.startswith("native ")}


def test_every_container_runs_the_native_parts(datacenters: Datacenters) -> None:
    """The images install the wheel with its compiled parts: the brokers (the offline one copying through its
    mirror link) and the loader run what the benchmarks measure, not the pure-Python twins."""
    for role in ("live-broker-1", "offline-broker-1", "loader"):
        parts = native_parts(datacenters, role)
        assert len(parts) == 7 and all(state == "on" for state in parts.values()), f"{role}: {parts}"
    assert "native parts: " in datacenters.logs("live-broker-1", 400), "the broker did not say which parts run"


def test_audited_events_published_in_live_arrive_in_offline(datacenters: Datacenters) -> None:
    dcs = datacenters
    dcs.publish(1500, seed=1, app="frontend-1")
    live = dcs.count("live")
    assert_exactly_once(dcs, live)
    assert_exactly_once(dcs, dcs.wait_offline_has_everything())


PROBE = (Path(__file__).parent / "security_probe.py").read_bytes()


def refusals(dcs: Datacenters, role: str, config: str, bootstrap: str, zookeeper: str) -> dict:
    """security_probe.py's refusals in ``role``'s container, checked: only ``config``'s user gets metadata, it
    cannot write `page_view`, an anonymous ZooKeeper client can change nothing nor read that user's credentials."""
    r = dcs.workload(role, "refusals", "--config", config, "--bootstrap", bootstrap, "--zookeeper", zookeeper,
                     "--topic", "page_view", script=PROBE, timeout=240)
    assert r["authorized"]["served"] and {"page_view", "click", "search"} <= set(r["authorized"]["topics"]), r
    for who in ("anonymous_plain", "anonymous_tls", "wrong_password"):
        assert not r[who]["served"], (role, who, r[who])
    assert all(r[who]["errors"] for who in ("anonymous_plain", "anonymous_tls", "wrong_password")), r
    assert r["write_as_user"] == {"delivered": False, "error": "TOPIC_AUTHORIZATION_FAILED", "left": 0}, r
    assert r["zk_anonymous"] == {"read_credentials": "NoAuthError", "rewrite_topic": "NoAuthError",
                                 "create_znode": "NoAuthError"}, (role, r["zk_anonymous"])
    return r


def refused_logins(dcs: Datacenters, brokers: tuple[str, ...], user: str) -> list[str]:
    logs = "".join(dcs.logs(b, 2000) for b in brokers)
    return [ln for ln in logs.splitlines() if "failed authentication from" in ln and f"user '{user}'" in ln]


def test_strangers_on_the_network_are_refused(datacenters: Datacenters) -> None:
    """In each datacenter, with real clients: an anonymous client (plaintext, or TLS without SASL) and a wrong
    password get no metadata; a reading user (the mirror link's live user from the offline broker's container,
    the loader's user from the loader's) cannot write a topic; a ZooKeeper client without the digest identity can neither
    read that user's SCRAM credentials nor change or create a znode. The positive control: the user does get the
    metadata. The offline broker has no PLAINTEXT listener left (the loader's old one): an anonymous consumer
    there reads nothing."""
    dcs = datacenters
    refusals(dcs, "offline-broker-1", LINK_CLIENT, "live-broker-1:9093", LIVE_ZK)
    assert refused_logins(dcs, ("live-broker-1", "live-broker-2"), "mirror-link"), \
        "the wrong password was not refused and logged by the live brokers"
    refusals(dcs, "loader", LOADER_CLIENT, "offline-broker-1:9093", OFFLINE_ZK)
    assert refused_logins(dcs, ("offline-broker-1",), "loader"), \
        "the wrong password was not refused and logged by the offline broker"
    stranger = dcs.workload("loader", "read-plaintext", "--bootstrap", "offline-broker-1:9092",
                            "--topic", "page_view", script=PROBE, timeout=120)
    assert stranger["messages"] == 0 and stranger["errors"], stranger


def test_datacenter_link_cut_then_restored(datacenters: Datacenters) -> None:
    """The offline broker loses the live network (its link's live ZooKeeper session expires, its fetches fail),
    live keeps taking traffic; the link resumes from the offline log once the network is back."""
    dcs = datacenters
    before = dcs.count("offline")
    docker("network", "disconnect", dcs.networks["live"], dcs.names["offline-broker-1"])
    cut_at = time.monotonic()
    try:
        dcs.publish(1000, seed=2, app="frontend-2")
        during = dcs.count("offline")
        assert {t: v["total"] for t, v in during.items()} == {t: v["total"] for t, v in before.items()}, \
            "data crossed a cut link"
        time.sleep(max(0.0, 20 - (time.monotonic() - cut_at)))  # longer than the ZooKeeper session timeout
    finally:
        docker("network", "connect", "--alias", "offline-broker-1", dcs.networks["live"],
               dcs.names["offline-broker-1"])
    assert_exactly_once(dcs, dcs.wait_offline_has_everything(timeout=240))


def test_live_broker_stopped_and_restarted(datacenters: Datacenters) -> None:
    """Broker 2 leads half of the live partitions: producers wait for it, nothing is lost."""
    dcs = datacenters
    docker("stop", "-t", "30", dcs.names["live-broker-2"], timeout=90)
    result: dict = {}

    def publish() -> None:
        try:
            result["r"] = dcs.publish(1000, seed=3, app="frontend-3", timeout=240)
        except (AssertionError, subprocess.SubprocessError, RuntimeError) as e:
            result["error"] = e

    t = threading.Thread(target=publish)
    t.start()
    time.sleep(10)
    docker("start", dcs.names["live-broker-2"], timeout=90)
    wait_registered(dcs, "live-broker-1", LIVE_ZK, 2)
    t.join(timeout=330)
    assert not t.is_alive(), "publish never finished"
    assert "error" not in result, result.get("error")
    assert_exactly_once(dcs, dcs.wait_offline_has_everything(timeout=240))


def test_offline_broker_killed_and_restarted(datacenters: Datacenters) -> None:
    """kill -9 of the offline broker (which runs the mirror link's copy: the standalone mirror's kill, now)
    twice while events are being published and copied: each restart's leaders resume where the offline log
    says the copy ends, so every event arrives exactly once (no duplicates; the loader's books check the mirror
    tier's counts later)."""
    dcs = datacenters
    dcs.wait_offline_has_everything()
    result: dict = {}

    def publish() -> None:
        try:
            for i in range(5):  # five batches of events, one docker exec each: traffic for ~15 s
                dcs.publish(4000, seed=40 + i, app="frontend-4", timeout=240)
        except (AssertionError, subprocess.SubprocessError, RuntimeError) as e:
            result["error"] = e

    t = threading.Thread(target=publish)
    t.start()
    for _kill in range(2):
        time.sleep(4)
        docker("kill", dcs.names["offline-broker-1"], timeout=60)
        docker("start", dcs.names["offline-broker-1"], timeout=60)
        # registered again (it waits out its killed session) before the next kill
        wait_registered(dcs, "offline-broker-1", OFFLINE_ZK, 1, timeout=90)
    t.join(timeout=600)
    assert not t.is_alive(), "publish never finished"
    assert "error" not in result, result.get("error")
    assert_exactly_once(dcs, dcs.wait_offline_has_everything(timeout=240))
    resumed = [ln for ln in dcs.logs("offline-broker-1", 2000).splitlines() if "copies from live offset" in ln]
    assert resumed, dcs.logs("offline-broker-1")  # the restarted leaders went on from the offline log
    print("\n".join(resumed[-12:]))


def test_loader_completes_the_hour(datacenters: Datacenters) -> None:
    """The hourly load over SASL_SSL as `loader` (its plan, its split readers, its counts to `_audit`): the
    warehouse holds every event once, the audit books balance, the hour is complete."""
    import json

    dcs = datacenters
    dcs.wait_offline_has_everything()
    wait_mirror_idle(dcs)
    t0 = time.monotonic()
    p = docker("exec", dcs.names["loader"], "ferry", "load", "--zookeeper", OFFLINE_ZK, "--topics",
               ",".join(sorted(dcs.produced)), "--state-dir", "/var/lib/ferry/load", "--start", "earliest",
               "--command-config", LOADER_CLIENT, timeout=900, check=False)
    dcs.timings["load"] = time.monotonic() - t0
    assert p.returncode == 0, (p.stdout + p.stderr).decode(errors="replace")[-5000:]

    wh = dcs.workload("loader", "warehouse", "--state-dir", "/var/lib/ferry/load", timeout=600)
    for topic, n in dcs.produced.items():
        assert wh[topic] == {"rows": n, "distinct_offsets": n, "distinct_guids": n}, (topic, n, wh[topic])

    deadline = time.monotonic() + 120
    hours: list = []
    while time.monotonic() < deadline:
        # the loader's container is on the offline network only: the books as they reached the offline cluster
        p = docker("exec", dcs.names["loader"], "ferry", "audit", "report", "--zookeeper", OFFLINE_ZK,
                   "--offline-only", "--format", "json", "--hours", "0", "--command-config", LOADER_CLIENT,
                   timeout=120, check=False)
        assert p.returncode == 0, (p.stdout + p.stderr).decode(errors="replace")[-3000:]
        hours = [h for h in json.loads(p.stdout)["hours"] if h["hour_start"] == dcs.hour_ms]
        if len(hours) == len(dcs.produced) and all(h["complete"] for h in hours):
            break
        time.sleep(3)
    books = {h["topic"]: h for h in hours}
    for topic, n in dcs.produced.items():
        h = books.get(topic)
        assert h is not None, f"no audit for {topic} in the test hour: {hours}"
        assert (h["produced"], h["mirrored"], h["loaded"], h["duplicates"], h["complete"]) == (n, n, n, 0, True), h

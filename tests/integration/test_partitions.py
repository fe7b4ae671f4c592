"""Network partitions, Jepsen-style, on a three-broker datacenter in containers.

A leader is cut from part of the network while an acks=all idempotent producer (min.insync.replicas 2)
streams numbered values and every delivery report is stamped as it arrives: the leader from its followers
only (it keeps ZooKeeper and its clients), from ZooKeeper only (the zombie: followers and clients still reach
it), from its clients only, and one way (it cannot hear its followers, they still hear it). The cuts are
iptables DROP rules in the container's own network namespace (`nsenter` from the host), so a cut is exactly
the links named and established connections hang as on a real network. Then the cut heals.

The checker holds the whole history against the replicas afterwards:
- every acknowledged value is read back (read_committed, from the leader) exactly once, at the offset it was
  acknowledged at, in production order: no acknowledgement from a deposed leader was lost;
- no offset was acknowledged twice, and no offset holds two different records across replicas (every
  replica's batches below the high watermark byte-identical) or over time (a read taken during the cut agrees
  with the read at the end wherever both have the offset);
- leader epochs never go back in the log;
- the unavailability window of each fault (the longest gap between acknowledgements around it) is printed.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from ferry_datacenters import LIVE_ZK, Datacenters
from ferry_docker_helpers import docker
from replication_history import BOOTSTRAP, StreamingProducer, batches, copy_partition, probe

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

CUT_S = 15.0  # longer than the brokers' 6 s ZooKeeper session and their 3 s replica lag


def _host_tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is needed on the host to cut links inside a container's network namespace"
    return path


class LinkCut:
    """DROP rules between one container and some peers, in the container's network namespace only."""

    def __init__(self, dcs: Datacenters, role: str) -> None:
        self.role = role
        pid = docker("inspect", "-f", "{{.State.Pid}}", dcs.names[role]).stdout.decode().strip()
        self._netns = [_host_tool("nsenter"), "-t", pid, "-n", _host_tool("iptables")]

    def _iptables(self, *args: str) -> None:
        p = subprocess.run([*self._netns, *args], capture_output=True, timeout=30)
        assert p.returncode == 0, f"iptables {' '.join(args)} in {self.role}: {p.stderr.decode(errors='replace')}"

    def drop(self, peers: list[str], inbound: bool = True, outbound: bool = True) -> None:
        for ip in peers:
            if inbound:
                self._iptables("-A", "INPUT", "-s", ip, "-j", "DROP")
            if outbound:
                self._iptables("-A", "OUTPUT", "-d", ip, "-j", "DROP")

    def heal(self) -> None:
        self._iptables("-F", "INPUT")
        self._iptables("-F", "OUTPUT")


def address(dcs: Datacenters, role: str) -> str:
    """The container's address on the live network."""
    net = dcs.networks["live"]
    out = docker("inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{net}").IPAddress}}}}', dcs.names[role])
    ip = out.stdout.decode().strip()
    assert ip, f"{role} has no address on {net}"
    return ip


@dataclass
class Outcome:
    leader_before: int
    leader_after: int
    epoch_before: int
    epoch_after: int
    acknowledged: int
    unavailable_s: float
    acked_by_old_leader_after_cut: int  # all read back at the end (no acknowledgement of a deposed leader lost)


def run_partition(dcs: Datacenters, topic: str, cut: str, expect_new_leader: bool) -> Outcome:
    """Produce, cut the leader's links named by `cut`, hold, heal, produce on; then check the whole history."""
    created = probe(dcs, "create", "--zookeeper", LIVE_ZK, "--topic", topic, "--partitions", "1",
                    "--replication-factor", "3", "--min-isr", "2")
    assert created["ok"], created
    before = created["states"]["0"]
    leader = before["leader"]
    followers = [b for b in (1, 2, 3) if b != leader]
    peers = {"followers": [address(dcs, f"live-broker-{b}") for b in followers],
             "zookeeper": [address(dcs, "live-zk")],
             "clients": [address(dcs, "live-client")]}
    link = LinkCut(dcs, f"live-broker-{leader}")
    producer = StreamingProducer(dcs, rate=150, topic=topic, duration_s=200)
    producer.start()
    try:
        producer.wait_acks(300, 0.0, 60, "before the cut")
        t_cut = time.monotonic()
        try:
            if cut == "one-way":  # the leader's packets reach its followers; theirs never reach it
                link.drop(peers["followers"], inbound=True, outbound=False)
            else:
                link.drop(peers[cut])
            time.sleep(CUT_S)
            # what a reader sees during the cut (not when the reader is the one cut off from the leader)
            during = ({"records": []} if cut == "clients" else
                      probe(dcs, "consume", "--bootstrap", BOOTSTRAP, "--topic", topic, "--timeout", "30"))
        finally:
            link.heal()
        t_healed = time.monotonic()
        full = probe(dcs, "state", "--zookeeper", LIVE_ZK, "--topic", topic, "--isr-size", "3", "--timeout", "90")
        assert full["ok"], f"ISR not full within 90 s of healing: {full}\n{dcs.logs(link.role, 60)}"
        producer.wait_acks(300, time.monotonic(), 90, "after healing")
        result = producer.stop()
    finally:
        producer.kill()

    acks = producer.acks()
    failed = producer.lines("FAIL")
    assert not result["fatal"] and result["unflushed"] == 0, result
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
    assert len(acks) == result["produced"], (len(acks), result)
    if expect_new_leader:
        assert full["leader"] != leader and full["leader_epoch"] > before["leader_epoch"], (before, full)
    else:
        assert full["leader"] == leader, f"the leadership moved although the leader kept ZooKeeper: {before} {full}"

    read = probe(dcs, "consume", "--bootstrap", BOOTSTRAP, "--topic", topic, "--timeout", "60")
    records = {off: value for off, value in read["records"]}
    assert read["low"] == 0 and len(records) == read["high"], f"read {len(records)} of [0, {read['high']})"
    offsets = [off for _, off in acks.values()]
    assert len(set(offsets)) == len(offsets), "one offset acknowledged for two messages: two leaders wrote"
    lost = {n: (off, records.get(off)) for n, (_, off) in acks.items() if records.get(off) != f"{n:08d}"}
    assert not lost, f"{len(lost)} acknowledged values not where they were acknowledged: {sorted(lost.items())[:5]}"
    values = [records[off] for off in sorted(records)]
    assert len(set(values)) == len(values), "a value stored twice"
    assert values == sorted(values), "the partition's order differs from the production order"
    changed = [(off, v, records.get(off)) for off, v in during["records"] if records.get(off) != v]
    assert not changed, f"offsets read during the cut hold other records at the end: {changed[:5]}"

    with tempfile.TemporaryDirectory(prefix="ferry-partition-") as tmp:
        logs = {b: batches(copy_partition(dcs, b, Path(tmp), topic), read["high"]) for b in (1, 2, 3)}
    reference = logs[full["leader"]]
    for b in (1, 2, 3):
        assert logs[b] == reference, f"broker {b}'s batches differ from leader {full['leader']}'s below the HW"
    epochs = [e for _, e, _ in reference]
    assert epochs == sorted(epochs), f"leader epochs go back in the log: {epochs}"

    # what the leader of before the cut acknowledged once cut off: offsets written in its epoch, acknowledged
    # after the cut began; every one of them is among the values read back above (none lost when deposed)
    old_epoch_end = max((base + _records(raw) for base, e, raw in reference if e == before["leader_epoch"]),
                        default=0)
    late = [n for n, (_, off) in producer.acks(t_cut).items() if off < old_epoch_end]
    assert all(records.get(acks[n][1]) == f"{n:08d}" for n in late)

    arrivals = sorted(r.at for r in producer.reports if r.kind == "ACK")
    around = [t for t in arrivals if t_cut - 2 <= t]
    gaps = [b - a for a, b in zip(around, around[1:], strict=False)]
    outcome = Outcome(leader, full["leader"], before["leader_epoch"], full["leader_epoch"], len(acks),
                      round(max(gaps, default=0.0), 1), len(late))
    print(f"\n[partition {cut}] {outcome}; cut held {t_healed - t_cut:.1f}s")
    return outcome


def _records(raw: bytes) -> int:
    """Offsets a stored batch spans (lastOffsetDelta + 1: bytes 23-26 of its header)."""
    return int.from_bytes(raw[23:27], "big", signed=True) + 1


def test_leader_cut_from_its_followers_keeps_its_leadership_and_loses_nothing(replicated_datacenter) -> None:
    """The leader keeps ZooKeeper and clients: its ISR shrinks below min.insync.replicas, acks=all produces are
    refused (NOT_ENOUGH_REPLICAS, retried by the idempotent producer) until the followers are back."""
    out = run_partition(replicated_datacenter, "cut-followers", "followers", expect_new_leader=False)
    assert out.unavailable_s >= CUT_S / 2, f"acks=all was acknowledged with the followers cut off: {out}"


def test_leader_cut_from_its_clients_only(replicated_datacenter) -> None:
    out = run_partition(replicated_datacenter, "cut-clients", "clients", expect_new_leader=False)
    assert out.unavailable_s >= CUT_S / 2, out


def test_leader_that_cannot_hear_its_followers(replicated_datacenter) -> None:
    """One way: the leader's fetch responses leave, the followers' fetch requests never arrive."""
    out = run_partition(replicated_datacenter, "one-way", "one-way", expect_new_leader=False)
    assert out.unavailable_s >= CUT_S / 2, out


def test_zombie_leader_cut_from_zookeeper_only(replicated_datacenter) -> None:
    """The seed articles' zombie: followers and clients still reach the old leader, but its ZooKeeper session
    expires and the controller elects another. Nothing the old leader acknowledges may be lost, and when the
    cut heals while the new leader has written, the old one truncates and follows."""
    out = run_partition(replicated_datacenter, "zombie", "zookeeper", expect_new_leader=True)
    assert out.epoch_after > out.epoch_before, out

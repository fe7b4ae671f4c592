"""A three-broker datacenter in containers loses its leader's network under acks=all production (issue 16).

Topic RF 3, min.insync.replicas=2, one partition; an acks=all idempotent confluent-kafka producer numbers
its messages and streams every delivery report back to this process as it happens. The leader's container
is cut off its network (`docker network disconnect`, as the link-cut test of the two-datacenter suite
cuts the mirror): its ZooKeeper session expires, the controller elects one of the two others (the state
znode shows a new leader with a higher leader epoch), and the producer's writes move there. After the cut
is healed the old leader must come back as a follower: ISR full again, its log identical to the leader's
below the high watermark (batches decoded from the partition directory copied out of each container,
since only a leader answers a consumer's Fetch).

Why these checks prove "no two leaders accept writes": an acknowledged (offset, value) that does not match
what the new leader serves, an offset acknowledged twice, a value stored twice, or leader epochs that go
back in the log would each mean that two brokers wrote the partition's log at once.

The producer runs in a client container on the datacenter's network, not in this process: the networks
are internal and the brokers advertise their container names, so only processes on the network can
reach them (the way every integration test reaches the brokers); this process drives it through
`docker exec` and holds the delivery reports.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from ferry_datacenters import LIVE_ZK, Datacenters
from ferry_docker_helpers import docker
from replication_history import BOOTSTRAP, TOPIC, StreamingProducer, batches, copy_partition, probe

# Fixture setup may build images from scratch (minutes) before the first test: beyond the default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

CUT_AT_LEAST_S = 15.0  # longer than the brokers' 6 s ZooKeeper session: the cut leader's session expires


def test_leader_cut_off_its_network_loses_nothing_and_rejoins_as_follower(replicated_datacenter: Datacenters
                                                                          ) -> None:
    dcs = replicated_datacenter
    t_start = time.monotonic()
    created = probe(dcs, "create", "--zookeeper", LIVE_ZK, "--topic", TOPIC, "--partitions", "1",
                    "--replication-factor", "3", "--min-isr", "2")
    assert created["ok"], created
    before = created["states"]["0"]
    old = before["leader"]
    old_role = f"live-broker-{old}"
    assert sorted(before["isr"]) == [1, 2, 3], before

    producer = StreamingProducer(dcs, rate=150)
    producer.start()
    try:
        producer.wait_acks(300, 0.0, 60, "before the cut")
        docker("network", "disconnect", dcs.networks["live"], dcs.names[old_role])
        t_cut = time.monotonic()
        try:
            # A new leader among the two others, in a new leader epoch; the cut broker is out of the ISR.
            after = probe(dcs, "state", "--zookeeper", LIVE_ZK, "--topic", TOPIC, "--leader-not", str(old),
                          "--epoch-above", str(before["leader_epoch"]), "--timeout", "45")
            t_elected = time.monotonic()
            assert after["ok"], f"no new leader within 45 s of the cut: {after}\n{dcs.logs('live-broker-1', 40)}"
            new = after["leader"]
            assert new != old and old not in after["isr"] and len(after["isr"]) == 2, after
            # The writes move there: acknowledged with an ISR of 2 (= min.insync.replicas) while the old one is cut.
            producer.wait_acks(200, t_elected, 60, "on the new leader during the cut")
            time.sleep(max(0.0, CUT_AT_LEAST_S - (time.monotonic() - t_cut)))
            acked_during_cut = len(producer.acks(t_cut))
        finally:
            docker("network", "connect", "--alias", old_role, dcs.networks["live"], dcs.names[old_role])
        t_healed = time.monotonic()
        # It rejoins as a follower: the ISR full again, the leadership where the election put it.
        full = probe(dcs, "state", "--zookeeper", LIVE_ZK, "--topic", TOPIC, "--isr-size", "3", "--timeout", "60")
        t_rejoined = time.monotonic()
        assert full["ok"], f"ISR not full within 60 s of the reconnection: {full}\n{dcs.logs(old_role, 60)}"
        assert full["leader"] == new and full["leader_epoch"] == after["leader_epoch"], (after, full)
        producer.wait_acks(200, t_rejoined, 60, "with the ISR full again")
        result = producer.stop()
    finally:
        producer.kill()
    t_stopped = time.monotonic()

    acks = producer.acks()
    failed = producer.lines("FAIL")
    errors = producer.lines("ERROR")
    print(f"\n[replication] leader {old} cut {t_cut - t_start:.1f}s in; broker {new} leader (epoch "
          f"{before['leader_epoch']} -> {after['leader_epoch']}) {t_elected - t_cut:.1f}s after the cut; "
          f"reconnected after {t_healed - t_cut:.1f}s, ISR full {t_rejoined - t_healed:.1f}s later; "
          f"produced {result['produced']}, acknowledged {len(acks)} ({acked_during_cut} during the cut), "
          f"failed {len(failed)}, client errors {len(errors)}: {[e[1] for e in errors][:10]}")
    assert not result["fatal"], result
    assert result["unflushed"] == 0, result
    # Idempotent retries with a 90 s delivery timeout: every message ends up acknowledged somewhere.
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
    assert len(acks) == result["produced"], (len(acks), result)

    # Consume the partition from the (new) leader and hold every acknowledgement against it.
    read = probe(dcs, "consume", "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--timeout", "60")
    records = {off: value for off, value in read["records"]}
    assert read["low"] == 0 and len(records) == read["high"], \
        f"read {len(records)} records of [{read['low']}, {read['high']})"
    offsets = [off for _, off in acks.values()]
    assert len(set(offsets)) == len(offsets), "one offset acknowledged for two messages: two leaders wrote"
    wrong = {n: (off, records.get(off)) for n, (_, off) in acks.items() if records.get(off) != f"{n:08d}"}
    assert not wrong, f"{len(wrong)} acknowledged messages not where they were acknowledged, e.g. " \
                      f"{sorted(wrong.items())[:5]}"
    values = [records[off] for off in sorted(records)]
    assert len(set(values)) == len(values), "a value stored twice"
    assert values == sorted(values), "the partition's order differs from the production order"

    # Every replica holds the same batches below the high watermark, byte for byte; epochs never go back.
    with tempfile.TemporaryDirectory(prefix="ferry-replicas-") as tmp:
        logs = {b: batches(copy_partition(dcs, b, Path(tmp)), read["high"]) for b in (1, 2, 3)}
    leader_log = logs[new]
    assert leader_log and leader_log[0][0] == 0, "the leader's log does not start at 0"
    for b in (1, 2, 3):
        assert [(o, e) for o, e, _ in logs[b]] == [(o, e) for o, e, _ in leader_log], \
            f"broker {b}'s batches (offset, leader epoch) differ from leader {new}'s"
        assert logs[b] == leader_log, f"broker {b}'s batches differ in bytes from leader {new}'s"
    epochs = [e for _, e, _ in leader_log]
    assert epochs == sorted(epochs), f"leader epochs go back in the log: {epochs}"
    assert epochs[0] == before["leader_epoch"] and epochs[-1] == after["leader_epoch"], \
        (before, after, sorted(set(epochs)))
    # What the old leader had appended alone when it was cut (never acknowledged) it dropped on rejoining.
    truncations = [ln.split("replica_fetcher: ", 1)[-1] for ln in dcs.logs(old_role, 2000).splitlines()
                   if "truncating from" in ln]
    print(f"[replication] {len(records)} records, {len(leader_log)} batches identical on brokers 1-3; "
          f"epochs {sorted(set(epochs))}; old leader on rejoining: {truncations or 'nothing to truncate'}; "
          f"test {t_stopped - t_start:.1f}s + checks {time.monotonic() - t_stopped:.1f}s")

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

import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ferry_datacenters import LIVE_ZK, Datacenters
from ferry_docker_helpers import docker

from ferry.wire.record.record_batch import read_header

# Fixture setup may build images from scratch (minutes) before the first test: beyond the default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

PROBE = (Path(__file__).parent / "replication_probe.py").read_text()
TOPIC = "replicated"
BOOTSTRAP = "live-broker-1:9092,live-broker-2:9092,live-broker-3:9092"
DATA_DIR = "/var/lib/ferry/broker"
CUT_AT_LEAST_S = 15.0  # longer than the brokers' 6 s ZooKeeper session: the cut leader's session expires


def probe(dcs: Datacenters, *args: str, timeout: float = 120) -> dict:
    """replication_probe.py in the client container; its RESULT."""
    return dcs.workload("live-client", *args, timeout=timeout, script=PROBE.encode())


@dataclass
class Report:
    """One line of the producer's output, stamped with this process's monotonic clock on arrival."""

    at: float
    kind: str
    fields: list[str]


@dataclass
class StreamingProducer:
    """The producer of replication_probe.py running in the client container, its reports read as they come.

    The script goes in as `python -c` so that stdin stays free for the "stop" line that ends production.
    """

    dcs: Datacenters
    rate: float
    reports: list[Report] = field(default_factory=list)
    result: dict | None = None
    proc: subprocess.Popen | None = None
    stderr: bytes = b""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _reader: threading.Thread | None = None
    _drain: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["docker", "exec", "-i", self.dcs.names["live-client"], "python", "-c", PROBE, "produce",
             "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--rate", str(self.rate), "--duration", "150",
             "--message-timeout-ms", "90000"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # librdkafka logs every failed connection to the cut broker on stderr: an unread pipe fills up and
        # blocks its threads (no delivery reports at all), so stderr is drained too, its tail kept.
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr = (self.stderr + raw)[-20_000:]

    def _read(self) -> None:
        import json

        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith("RESULT "):
                self.result = json.loads(line[len("RESULT "):])
                continue
            kind, _, rest = line.partition(" ")
            with self._lock:
                self.reports.append(Report(time.monotonic(), kind, rest.split(" ", 3)))

    def acks(self, since: float = 0.0) -> dict[int, tuple[int, int]]:
        """value number -> (partition, offset) of the acknowledgements that arrived after `since`."""
        with self._lock:
            return {int(r.fields[0]): (int(r.fields[1]), int(r.fields[2])) for r in self.reports
                    if r.kind == "ACK" and r.at > since}

    def lines(self, kind: str) -> list[list[str]]:
        with self._lock:
            return [r.fields for r in self.reports if r.kind == kind]

    def wait_acks(self, n: int, since: float, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.acks(since)) >= n:
                return
            assert self.proc is not None and self.proc.poll() is None, f"producer exited: {self.tail()}"
            time.sleep(0.2)
        raise AssertionError(f"{what}: fewer than {n} acknowledgements in {timeout:.0f}s "
                             f"({len(self.acks(since))}); {self.tail()}")

    def stop(self, timeout: float = 120) -> dict:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout)
        for t in (self._reader, self._drain):
            if t is not None:
                t.join(10)
        assert self.result is not None, f"producer gave no result (rc {self.proc.returncode}): {self.tail()}"
        return self.result

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def tail(self) -> str:
        with self._lock:
            interesting = [f"{r.kind} {' '.join(r.fields)}" for r in self.reports if r.kind != "ACK"]
        return f"last non-ACK reports {interesting[-15:]}; stderr {self.stderr.decode(errors='replace')[-2000:]}"


def batches(partition_dir: Path, upto: int) -> list[tuple[int, int, bytes]]:
    """(base offset, partition leader epoch, whole batch bytes) of the batches below `upto`, in file order.

    A copy of the decoding in tests/broker/replication_helpers.py (that module is not importable from
    here): followers store the leader's batches as they are, offsets and leader epochs included."""
    out: list[tuple[int, int, bytes]] = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            h = read_header(data, pos)
            if h.batch_length <= 0 or pos + h.size > len(data) or h.base_offset >= upto:
                break
            out.append((h.base_offset, h.partition_leader_epoch, data[pos:pos + h.size]))
            pos += h.size
    return out


def copy_partition(dcs: Datacenters, broker: int, dest: Path) -> Path:
    """The partition directory of `broker`'s container, copied here (docker cp works while it runs)."""
    target = dest / f"broker-{broker}"
    docker("cp", f"{dcs.names[f'live-broker-{broker}']}:{DATA_DIR}/{TOPIC}-0", str(target), timeout=60)
    return target


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

"""What the replication tests in containers share: the streaming acks=all producer whose every delivery report
is stamped as it arrives, the probes run in the client container, and the replicas' logs copied out of the
broker containers and decoded batch by batch."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ferry_datacenters import Datacenters
from ferry_docker_helpers import docker

from ferry.wire.record.record_batch import read_header

PROBE = (Path(__file__).parent / "replication_probe.py").read_text()
TOPIC = "replicated"
BOOTSTRAP = "live-broker-1:9092,live-broker-2:9092,live-broker-3:9092"
DATA_DIR = "/var/lib/ferry/broker"


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
    topic: str = TOPIC
    duration_s: float = 150.0
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
             "--bootstrap", BOOTSTRAP, "--topic", self.topic, "--rate", str(self.rate),
             "--duration", str(self.duration_s),
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


def copy_partition(dcs: Datacenters, broker: int, dest: Path, topic: str = TOPIC) -> Path:
    """The partition directory of `broker`'s container, copied here (docker cp works while it runs)."""
    target = dest / f"broker-{broker}"
    docker("cp", f"{dcs.names[f'live-broker-{broker}']}:{DATA_DIR}/{topic}-0", str(target), timeout=60)
    return target

"""What a copy with one hop fewer could do on this machine (issue 20 goal 2): the ceiling of an offline broker
fetching from the live cluster itself, as Confluent's Cluster Linking and KIP-986 have it, against the same
MessageSetConsumer readers as bench_mirror_pipeline.py, in the same run.

Not a component of ferry: a diagnostic of its data path only. One process fetches every partition of the live
topic from its start to its end (Fetch v11, all partitions in each request, up to 4 MiB each), checks every
batch's CRC-32C (the mirror's native scan) and appends the batches unchanged to a file per partition
(``pwrite``); a flusher thread ``fdatasync``s the files while the copy goes on, and the copy ends when the
last byte is durable. It keeps none of the mirror's guarantees (no re-stamping for an idempotent producer,
no coalescing, no audit counts, no committed offsets): it says how much of the mirror's cost is its second
hop (the produce request: the mirror's ``send``, the offline broker's ``recv``, its request handling) and
its record re-writing, not what a link would cost in full.

    .venv/bin/python bench/bench_link_ceiling.py [--messages 8000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mirror_pipeline import cpu, fill, machine_cpu, machine_line, read_phase, settle  # noqa: E402

from ferry.client.wire_client import WireClient  # noqa: E402
from ferry.embedded import BrokerProcess, ZooKeeperServer  # noqa: E402
from ferry.mirror import _forward_scan  # noqa: E402
from ferry.wire.protocol import fetch  # noqa: E402
from ferry.wire.protocol.list_offsets import LATEST_TIMESTAMP  # noqa: E402
from ferry.wire.record.record_batch import read_header  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402

PARTITION_BYTES = 4 << 20


class Flusher(threading.Thread):
    """fdatasync every file in turn whenever something was written since the last pass, until stopped: the
    broker's flusher, overlapping the copy (and, like it, idle when nothing is new rather than spinning)."""

    def __init__(self, fds: list[int]) -> None:
        super().__init__(daemon=True)
        self.fds, self.dirty, self.stopping = fds, threading.Event(), threading.Event()

    def run(self) -> None:
        while True:
            self.dirty.wait()
            if self.stopping.is_set():
                return
            self.dirty.clear()
            self.sync()

    def stop(self) -> None:
        self.stopping.set()
        self.dirty.set()

    def sync(self) -> None:
        for fd in self.fds:
            os.fdatasync(fd)


def link_copy(bootstrap: str, topic: str, partitions: int, out_dir: Path) -> tuple[int, float, float, float]:
    """(messages, seconds, CPU seconds of this process, machine CPU seconds) for one copy of the whole topic."""
    client = WireClient(bootstrap, client_id="bench-link")
    client.refresh_metadata([topic])
    conn = client.connection(client.leader(topic, 0))
    ends = {p: off for (_, p), off in client.offsets({(topic, p): LATEST_TIMESTAMP
                                                       for p in range(partitions)}).items()}
    offsets = dict.fromkeys(ends, 0)
    fds = {p: os.open(out_dir / f"{p}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for p in ends}
    written = dict.fromkeys(ends, 0)
    flusher = Flusher(list(fds.values()))
    buf = bytearray()
    n = 0
    t0, c0, m0 = time.perf_counter(), cpu(), machine_cpu()
    flusher.start()
    try:
        deadline = time.monotonic() + 600
        while any(offsets[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise RuntimeError("the copy did not finish in 600 s")
            wanted = [fetch.FetchPartition(p, offsets[p], PARTITION_BYTES) for p in ends if offsets[p] < ends[p]]
            key, version, body = fetch.encode_request([(topic, wanted)], 0, 1, partitions * PARTITION_BYTES)
            conn.send(key, version, body)
            for res in fetch.parse_response(conn.receive(into=buf)).topics[topic]:
                data, p = res.records, res.partition
                if not data:
                    continue
                items, stop, offsets[p], _, _ = _forward_scan.scan(data, 0, offsets[p], 0, 0, False)
                if stop < len(data) and not items:
                    raise RuntimeError(f"partition {p}: a batch at {offsets[p]} does not pass its checks")
                written[p] += os.pwrite(fds[p], data[:stop], written[p])
                flusher.dirty.set()
                n += sum(read_header(data, start).records_count for _, start, _ in items)
        flusher.stop()
        flusher.join()
        flusher.sync()  # everything written is durable before the clock stops
        return n, time.perf_counter() - t0, cpu() - c0, machine_cpu() - m0
    finally:
        flusher.stop()
        flusher.join()  # not fdatasync-ing a file closed under it
        for fd in fds.values():
            os.close(fd)
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=8_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-link-"))
    zk = ZooKeeperServer(data_dir=tmp / "zk").start()
    live = None
    try:
        live_zk = f"{zk.connect}/b/live"
        live = BrokerProcess(1, tmp / "live", live_zk, "live").start()
        with ClusterRegistry(live_zk) as reg:
            reg.create_topic("backlog", args.partitions)
        time.sleep(1.0)
        fill(live.bootstrap, "backlog", args.messages, args.partitions)
        time.sleep(1.0)
        for rnd in range(args.rounds):
            rates = {check: read_phase(live.bootstrap, "backlog", args.partitions, check, f"round {rnd}")
                     for check in (False, True)}
            settle()
            out = tmp / f"copy{rnd}"
            out.mkdir()
            n, secs, cpus, busy = link_copy(live.bootstrap, "backlog", args.partitions, out)
            shutil.rmtree(out, ignore_errors=True)
            print(f"round {rnd}: one-hop copy {n:,} msgs {n / secs:,.0f} msg/s {cpus / n * 1e6:.2f} us CPU/msg -> "
                  f"{n / secs / rates[False]:.2f}x of the lean reader, {n / secs / rates[True]:.2f}x of the "
                  f"checking one; {machine_line(busy, secs, n)}", flush=True)
    finally:
        if live is not None:
            live.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

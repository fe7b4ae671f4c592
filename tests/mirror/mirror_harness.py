"""Helpers for the mirror's end-to-end tests: produce to live, read both sides with confluent-kafka, wait."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from ferry.client.audit.bucket import bucket_start
from ferry.embedded import ManagedProcess
from ferry.mirror.status import mirror_status
from ferry.zk.cluster_registry import ClusterRegistry

Row = tuple[bytes | None, bytes | None, tuple, int]  # key, value, headers, timestamp
Log = dict[tuple[str, int], list[Row]]


def produce(bootstrap: str, topic: str, partitions: int, n: int, *, start: int = 0, ts0: int | None = None,
            ts_step_ms: int = 37, compression: str = "lz4", tag: str = "", config: dict | None = None) -> Counter:
    """n messages spread over partitions with keys, headers and explicit timestamps; returns the
    expected audit counts per (topic, bucket). ``config``: more confluent-kafka producer settings."""
    ts0 = ts0 if ts0 is not None else int(time.time() * 1000) - 3_600_000
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": compression,
                  "enable.idempotence": True, "acks": "all", "batch.num.messages": 2000, **(config or {})})
    counts: Counter = Counter()
    errors: list = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    for i in range(start, start + n):
        ts = ts0 + i * ts_step_ms
        key = None if i % 7 == 0 else f"{tag}k{i}".encode()
        headers = [("ferry.host", b"test"), ("seq", str(i).encode())] if i % 3 else None
        while True:
            try:
                p.produce(topic, value=f"{tag}{topic}-{i}-".encode() * (1 + i % 4), key=key,
                          partition=i % partitions, timestamp=ts, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        counts[(topic, bucket_start(ts))] += 1
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(60)
    assert left == 0 and not errors, f"produce to live failed: {left} undelivered, {errors[:3]}"
    return counts


def read_log(bootstrap: str, topics: dict[str, int], timeout: float = 60.0) -> Log:
    """Every message of every partition, in offset order, from the beginning to the current end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends: dict[tuple[str, int], int] = {}
        tps = []
        for topic, n in topics.items():
            for p in range(n):
                lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                ends[(topic, p)] = hi
                if hi > lo:
                    tps.append(TopicPartition(topic, p, lo))
        out: Log = {tp: [] for tp in ends}
        if not tps:
            return out
        c.assign(tps)
        remaining = {(tp.topic, tp.partition) for tp in tps}
        deadline = time.monotonic() + timeout
        while remaining and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error():
                    continue
                key = (m.topic(), m.partition())
                out[key].append((m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
                if m.offset() + 1 >= ends[key]:
                    remaining.discard(key)
        assert not remaining, f"could not read to the end of {sorted(remaining)}"
        return out
    finally:
        c.close()


def dedup_first(rows: list[Row]) -> list[Row]:
    """Replays repeat a suffix; keep each message's first copy (messages are unique by value+headers)."""
    seen = set()
    out = []
    for r in rows:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def audit_counts(bootstrap: str, tier: str, partitions: int = 1) -> Counter:
    counts: Counter = Counter()
    for rows in read_log(bootstrap, {"_audit": partitions}).values():
        seen = set()
        for _k, v, _h, _ts in rows:
            e = json.loads(v)
            if e["tier"] == tier and e["guid"] not in seen:
                seen.add(e["guid"])
                counts[(e["topic"], e["bucket_start"])] += e["count"]
    return counts


def wait_for(cond: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def committed_to_end(status, topics: Iterable[str], offline_visible: bool = False) -> bool:
    """Every partition of ``topics`` checkpointed at its live end. ``offline_visible``: and the offline
    high watermark at least there too (an offline leader elected since the acknowledgement answers with
    its own HW until its followers fetch again: compare logs only when the copies are visible)."""
    wanted = set(topics)
    rows = [p for p in status.partitions if p.topic in wanted]
    return bool(rows) and all(p.live_end is not None and p.committed == p.live_end for p in rows) and \
        {p.topic for p in rows} == wanted and \
        (not offline_visible or all(p.offline_end is not None and p.offline_end >= p.live_end for p in rows))


def mirrored_to_end(live, offline, topics: Iterable[str], group: str = "ferry-mirror") -> bool:
    """Every partition the live cluster has of ``topics`` (also ones added since the mirror started, which it
    may not own yet) checkpointed at its live end and visible offline: the point to compare the logs at."""
    names = sorted(set(topics))
    status = mirror_status(live.zk_connect, offline.zk_connect, group,
                           include="|".join(re.escape(t) for t in names))
    return committed_to_end(status, names, offline_visible=True)


def describe_partition(zk_connect: str, bootstrap: str, topic: str, partition: int) -> str:
    """The partition's state in ZooKeeper and each broker's answer to ListOffsets, for a failure message."""
    parts = []
    try:
        with ClusterRegistry(zk_connect) as reg:
            parts.append(f"state {reg.partition_states(topic).get(partition)}")
    except Exception as e:  # a diagnosis must not hide the failure it explains
        parts.append(f"state unreadable ({e})")
    for address in bootstrap.split(","):
        c = Consumer({"bootstrap.servers": address, "group.id": "describe", "enable.auto.commit": False})
        try:
            parts.append(f"{address}: watermarks "
                         f"{c.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)}")
        except Exception as e:
            parts.append(f"{address}: {e}")
        finally:
            c.close()
    return "; ".join(parts)


def wait_partitions(bootstrap: str, topic: str, n: int, timeout: float = 30.0) -> None:
    """Until every broker's metadata shows ``topic`` with ``n`` partitions, each with a leader."""
    p = Producer({"bootstrap.servers": bootstrap})

    def ready() -> bool:
        md = p.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        return t is not None and t.error is None and len(t.partitions) == n and all(
            pm.leader >= 0 for pm in t.partitions.values())

    wait_for(ready, timeout, f"{topic} to have {n} partitions", interval=0.2)


class MirrorProcess(ManagedProcess):
    """`python -m ferry.cli mirror ...` as a child process (so a test can kill it with SIGKILL)."""

    def __init__(self, log_file: Path, source_zk: str, target_zk: str, include: str, *extra: str) -> None:
        super().__init__("mirror", log_file)
        self.argv = [sys.executable, "-m", "ferry.cli", "mirror", "--source-zookeeper", source_zk,
                     "--target-zookeeper", target_zk, "--include", include, *extra]

    def start(self) -> MirrorProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.spawn(self.argv, env=env)
        return self

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


def clusters_with_topics(cluster_factory, topics: dict[str, int], live_brokers: int = 1, offline_brokers: int = 1):
    """A live cluster holding ``topics`` (name -> partitions), every partition led, and an empty offline
    cluster: the usual start of a mirror test."""
    live = cluster_factory(live_brokers, "live")
    offline = cluster_factory(offline_brokers, "offline")
    with ClusterRegistry(live.zk_connect) as reg:
        for t, n in topics.items():
            reg.create_topic(t, n)
    for t, n in topics.items():
        wait_partitions(live.bootstrap, t, n)
    return live, offline


class SteadyProducer:
    """Produces to the live cluster at a steady pace from a thread until stopped (the traffic a mirror copies
    while a test breaks things). ``counts`` holds the acknowledged messages per (topic, bucket), as the
    producer tier's audit would count them."""

    def __init__(self, bootstrap: str, topics: dict[str, int], rate: int = 2000, tag: str = "s-") -> None:
        import threading

        self.bootstrap, self.topics, self.rate, self.tag = bootstrap, topics, rate, tag
        self.counts: Counter = Counter()
        self.errors: list = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "compression.type": "lz4",
                      "enable.idempotence": True, "acks": "all", "batch.num.messages": 200})
        ts0 = int(time.time() * 1000) - 3_600_000
        names = [(t, part) for t, n in sorted(self.topics.items()) for part in range(n)]
        i = 0
        t0 = time.monotonic()

        def delivered(err, msg) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                self.counts[(msg.topic(), bucket_start(msg.timestamp()[1]))] += 1

        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while i < due:
                topic, part = names[i % len(names)]
                headers = [("seq", str(i).encode())] if i % 3 else None
                p.produce(topic, value=f"{self.tag}{topic}-{i}-".encode() * (1 + i % 4), key=f"k{i}".encode(),
                          partition=part, timestamp=ts0 + i * 13, headers=headers, on_delivery=delivered)
                i += 1
            p.poll(0.02)
        self.sent = i
        left = p.flush(120)
        if left:
            self.errors.append(f"{left} undelivered")

    def close(self) -> None:
        """Stop producing (a test's clean-up: nothing checked)."""
        self._stop.set()
        self._thread.join(180)

    def stop(self) -> int:
        """Stop producing; returns how many messages were produced (all acknowledged, or AssertionError)."""
        self.close()
        assert not self._thread.is_alive() and not self.errors, f"live production failed: {self.errors[:3]}"
        assert sum(self.counts.values()) == self.sent
        return self.sent

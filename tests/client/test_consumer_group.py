"""Consumer groups end to end: real brokers, real ZooKeeper, members as processes that can be killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.client.consumer_connector import ConsumerConnector
from ferry.client.group_store import read_offsets, write_offset
from ferry.client.producer import Producer
from ferry.client.simple_consumer import SimpleConsumer
from tests.client.conftest import create_topic
from tests.client.group_helpers import by_owner, owners, wait_until, zk_client

ROOT = Path(__file__).resolve().parents[2]
MEMBER = Path(__file__).with_name("group_member.py")


class Member:
    def __init__(self, zk: str, group: str, consumer_id: str, topic: str, out: Path, streams: int = 2) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.out = out
        self.log = out.with_suffix(".log")
        self.proc = subprocess.Popen([sys.executable, str(MEMBER), zk, group, consumer_id, topic, str(streams),
                                      str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=open(self.log, "w"), text=True)  # noqa: SIM115
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"member {consumer_id} did not start: {self.log.read_text()[-2000:]}"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


def settled(o: dict[tuple[str, int], str], members: set[str]) -> dict[tuple[str, int], str] | None:
    """One snapshot of the owners (reading them twice can straddle a rebalance): all 12 owned by exactly these."""
    return o if len(o) == 12 and set(o.values()) == members else None


def consumed(files: list[Path]) -> list[tuple[int, int, str]]:
    out = []
    for f in files:
        if f.exists():
            for line in f.read_text().splitlines():
                p, o, v = line.split(" ", 2)
                out.append((int(p), int(o), v))
    return out


def produce(zk: str, topic: str, values: list[str]) -> None:
    with Producer(zookeeper=zk, audit=False, linger_ms=2) as p:
        for v in values:
            p.send(topic, v.encode())
        assert p.flush(30) == 0


def log_ends(zk: str, topic: str) -> dict[int, int]:
    with SimpleConsumer(zookeeper=zk) as c:
        return {p: c.watermarks(topic, p)[1] for p in c.partitions(topic)}


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_kill_a_member_lose_nothing_then_restart_from_committed_offsets(live, tmp_path):
    zk = live.zk_connect
    create_topic(zk, "events", 12)
    zkc = zk_client(zk)
    files = [tmp_path / f"m{i}.out" for i in range(3)]
    first = [f"a{i}" for i in range(6000)]
    produce(zk, "events", first)
    members = [Member(zk, "g", f"m{i}", "events", files[i]) for i in range(3)]
    try:
        o = wait_until(lambda: settled(owners(zkc, "g"), {"m0", "m1", "m2"}), what="12 partitions over 3 members")
        assert {c: len(ps) for c, ps in by_owner(o).items()} == {"m0": 4, "m1": 4, "m2": 4}
        wait_until(lambda: {v for _, _, v in consumed(files)} >= set(first), timeout=30, what="first batch consumed")

        # kill -9 m1 while messages keep coming: its session expires, its partitions move, nothing is lost
        m1_parts = set(by_owner(o)["m1"])
        members[1].kill()
        t_kill = time.monotonic()
        second = [f"b{i}" for i in range(6000)]
        produce(zk, "events", second)
        o = wait_until(lambda: settled(owners(zkc, "g"), {"m0", "m2"}), timeout=20, what="m1's partitions taken over")
        moved_after = time.monotonic() - t_kill
        assert moved_after < 12, f"partitions moved only after {moved_after:.1f}s"
        assert by_owner(o) == {"m0": list(range(6)), "m2": list(range(6, 12))}
        assert m1_parts <= set(range(12))
        wait_until(lambda: {v for _, _, v in consumed(files)} >= set(first + second), timeout=30,
                   what="no message lost")
        # in order within a partition, and no member saw a message twice (a rebalance commits what the
        # application took before releasing, so a partition a member keeps resumes exactly there)
        for f in files:
            last: dict[int, int] = {}
            for p, off, _ in consumed([f]):
                assert off > last.get(p, -1), f"{f.name}: partition {p} went from {last[p]} to {off}"
                last[p] = off
        # duplicates only where m1 died: what it had taken since its last commit (a 0.5 s window)
        got = consumed(files)
        seen: dict[str, int] = {}
        for _p, _, v in got:
            seen[v] = seen.get(v, 0) + 1
        dup_partitions = {p for p, _, v in got if seen[v] > 1}
        assert dup_partitions <= m1_parts

        # clean stop: everything consumed is committed
        for m in (members[0], members[2]):
            m.stop()
        ends = log_ends(zk, "events")
        assert read_offsets(zkc, "g") == {("events", p): end for p, end in ends.items()}
        assert owners(zkc, "g") == {}

        # the group restarts and resumes from the committed offsets: only new messages are delivered
        third = [f"c{i}" for i in range(3000)]
        produce(zk, "events", third)
        restart_files = [tmp_path / f"r{i}.out" for i in range(2)]
        members = [Member(zk, "g", f"r{i}", "events", restart_files[i]) for i in range(2)]
        wait_until(lambda: len(consumed(restart_files)) >= 3000, timeout=30, what="restarted group caught up")
        time.sleep(1.0)
        assert sorted(v for _, _, v in consumed(restart_files)) == sorted(third)
    finally:
        for m in members:
            m.stop()
        zkc.stop()
        zkc.close()


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_streams_deliver_in_order_and_offsets_reset_when_absent_or_out_of_range(live):
    zk = live.zk_connect
    create_topic(zk, "orders", 4)
    produce(zk, "orders", [f"x{i}" for i in range(400)])
    zkc = zk_client(zk)
    connectors: list[ConsumerConnector] = []
    try:
        # a new group with auto_offset_reset=latest starts at the end (and records that position)
        c = ConsumerConnector("late", zk, auto_offset_reset="latest", consumer_timeout_s=1.0)
        connectors.append(c)
        streams = c.create_message_streams({"orders": 2})["orders"]
        wait_until(lambda: len(c.owned_partitions()) == 4, what="owned")
        ends = log_ends(zk, "orders")
        wait_until(lambda: c.commit_offsets() is not None and read_offsets(zkc, "late") == {
            ("orders", p): e for p, e in ends.items()}, what="latest recorded")
        with Producer(zookeeper=zk, audit=False) as p:
            for i in range(200):
                p.send("orders", f"y{i}".encode(), partition=i % 4)
        per_stream = [list(s) for s in streams]
        got = [m for ms in per_stream for m in ms]
        assert sorted(m.value.decode() for m in got) == sorted(f"y{i}" for i in range(200))
        # each partition feeds exactly one stream (2 partitions each), in offset order
        stream_partitions = [{m.partition for m in ms} for ms in per_stream]
        assert stream_partitions[0].isdisjoint(stream_partitions[1])
        assert sorted(len(ps) for ps in stream_partitions) == [2, 2]
        for ms in per_stream:
            for part in {m.partition for m in ms}:
                offs = [m.offset for m in ms if m.partition == part]
                assert offs == sorted(offs) and len(set(offs)) == len(offs)
        c.shutdown()

        # a committed offset the log no longer has (out of range) falls back to auto_offset_reset
        write_offset(zkc, "early", "orders", 0, 10_000_000)
        c = ConsumerConnector("early", zk, auto_offset_reset="earliest", consumer_timeout_s=1.0)
        connectors.append(c)
        (stream,) = c.create_message_streams({"orders": 1})["orders"]
        got = list(stream)
        assert len(got) == 600
        c.shutdown()
        assert read_offsets(zkc, "early") == {("orders", p): e for p, e in log_ends(zk, "orders").items()}
    finally:
        for c in connectors:
            c.shutdown()
        zkc.stop()
        zkc.close()

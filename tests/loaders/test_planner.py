"""The planner against a real broker: ranges from the ledger, first-load start positions, splits, data
lost to retention (a broker restarted after its oldest segment was deleted), and the ledger itself."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from ferry.loaders.cluster_offsets import ClusterOffsets
from ferry.loaders.ledger import Ledger, LedgerError
from ferry.loaders.offsets import OffsetRange, OffsetSpecError, parse_offsets_json, split_range
from ferry.loaders.planner import DataLossError, PlanError, StartPosition, make_plan
from tests.loaders.conftest import Offline, past_hour, produce


def _send_batches(offline: Offline, topic: str, batches: int, per_batch: int, start_ms: int) -> None:
    """Separate flushes make separate record batches (so small segments roll between them)."""
    for b in range(batches):
        produce(offline, topic, [start_ms + b * 60_000 + i for i in range(per_batch)])


def test_split_and_offsets_json() -> None:
    assert split_range(OffsetRange("t", 0, 10, 35), 10) == [
        OffsetRange("t", 0, 10, 20), OffsetRange("t", 0, 20, 30), OffsetRange("t", 0, 30, 35)]
    assert split_range(OffsetRange("t", 0, 5, 5), 10) == []
    assert parse_offsets_json('{"a": {"0": 3, "1": 4}}') == {("a", 0): 3, ("a", 1): 4}
    with pytest.raises(OffsetSpecError, match="offset -1 of a/0"):
        parse_offsets_json('{"a": {"0": -1}}')
    with pytest.raises(OffsetSpecError, match="not JSON"):
        parse_offsets_json("{a")


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_ranges_start_positions_and_loss(cluster_factory, tmp_path: Path) -> None:
    from ferry.zk import ClusterRegistry

    cluster = cluster_factory(1, datacenter="offline")
    broker = next(iter(cluster.brokers.values()))
    offline = Offline(cluster.zk_connect, broker)
    with ClusterRegistry(offline.zk) as reg:
        reg.create_topic("_audit", 1)
        reg.create_topic("events", 1, {"segment.bytes": "1500"})
    t0 = past_hour(2)
    _send_batches(offline, "events", 8, 10, t0)

    with ClusterOffsets(zookeeper=offline.zk) as c:
        assert c.select_topics("ev.*") == {"events": 1}  # _audit is never matched by a regex
        assert c.select_topics(["events", "_audit"]) == {"events": 1, "_audit": 1}
        with pytest.raises(Exception, match="unknown topic"):
            c.select_topics(["nope"])
        topics = {"events": 1}
        high = c.watermarks("events", 0).high
        assert high == 80
        p = make_plan(c, topics, {}, start=StartPosition.parse("earliest"), max_per_split=30)
        assert p.ranges == [OffsetRange("events", 0, 0, 80)] and len(p.splits) == 3
        assert make_plan(c, topics, {}, start=StartPosition.parse("latest")).ranges == [
            OffsetRange("events", 0, 80, 80)]
        at = make_plan(c, topics, {}, start=StartPosition.parse(
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((t0 + 4 * 60_000) / 1000))))
        assert at.ranges[0].start <= 40 and at.ranges[0].end == 80  # never after the first message at that time
        assert make_plan(c, topics, {("events", 0): 50}).ranges == [OffsetRange("events", 0, 50, 80)]
        assert make_plan(c, topics, {("events", 0): 50}, until={("events", 0): 60}).ranges == [
            OffsetRange("events", 0, 50, 60)]
        with pytest.raises(PlanError, match="beyond the end of the log"):
            make_plan(c, topics, {("events", 0): 81})

    # retention deletes the oldest segment while offsets 0..N are not loaded yet
    broker.stop()
    log_dir = broker.data_dir / "events-0"
    segments = sorted(p for p in log_dir.glob("*.log"))
    assert len(segments) >= 3, "small segments rolled"
    for f in log_dir.glob(segments[0].stem + ".*"):
        f.unlink()
    broker.start()
    with ClusterOffsets(zookeeper=offline.zk) as c:
        low = c.watermarks("events", 0).low
        assert 0 < low < 80
        with pytest.raises(DataLossError, match=rf"events/0: committed offset 5 < log start offset {low}"):
            make_plan(c, {"events": 1}, {("events", 0): 5})
        p = make_plan(c, {"events": 1}, {("events", 0): 5}, skip_lost_data=True)
        assert p.ranges == [OffsetRange("events", 0, low, 80)]
        assert [x.to_dict() for x in p.lost] == [{"topic": "events", "partition": 0, "start": 5, "end": low}]

    # the CLI says it loudly and exits 1
    from ferry.cli import main

    state = tmp_path / "state"
    ledger = Ledger(state)
    with ledger.lock():
        ledger.reset_offsets({("events", 0): 5})
    assert main(["load", "--zookeeper", offline.zk, "--topics", "events", "--state-dir", str(state),
                 "--step", "plan", "--no-audit"]) == 1
    out = tmp_path / "plan.json"
    assert main(["load", "--zookeeper", offline.zk, "--topics", "events", "--state-dir", str(state),
                 "--step", "plan", "--no-audit", "--skip-lost-data", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["lost"][0]["end"] == low


def test_ledger_commit_is_atomic_and_locked(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    with pytest.raises(LedgerError, match="need Ledger.lock"):
        ledger.begin("r1", [])
    with ledger.lock():
        ledger.begin("r1", ["/w/t"])
        assert ledger.in_flight()["r1"]["roots"] == ["/w/t"]
        ledger.commit({"run_id": "r1", "ranges": [{"topic": "a", "partition": 0, "start": 0, "end": 7}],
                       "partitions": [{"table": "a", "dt": "d", "hr": "h", "location": "/v2", "previous": "/v1"}]})
        assert ledger.committed_offsets() == {("a", 0): 7}
        assert ledger.in_flight() == {} and [r["run_id"] for r in ledger.pending()] == ["r1"]
        ledger.mark_applied("r1", ["/v1"])
        assert ledger.pending() == [] and ledger.take_garbage(0) == ["/v1"]
    assert not list(tmp_path.glob(".*.tmp")), "no temporary file left behind"

    # one run per state directory: a second locker waits, then gives up with a clear error
    held = threading.Event()
    release = threading.Event()

    def hold():
        with Ledger(tmp_path).lock():
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    try:
        with pytest.raises(LedgerError, match=rf"another load holds .*ledger.lock \(pid {os.getpid()}\)"):
            with Ledger(tmp_path).lock(timeout=0.3, poll=0.05):
                pass
    finally:
        release.set()
        t.join()

    (tmp_path / "ledger.json").write_text("{torn")
    with pytest.raises(LedgerError, match="not valid JSON"):
        Ledger(tmp_path).committed_offsets()


def test_load_of_an_unknown_topic_fails_naming_it(offline, tmp_path) -> None:
    """`ferry load --topics nosuch` used to load only `_audit` and exit 0."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "ferry.cli", "load", "--zookeeper", offline.zk, "--topics", "nosuch",
                        "--state-dir", str(tmp_path / "state"), "--step", "plan"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "unknown topic nosuch" in p.stderr and "Traceback" not in p.stderr

"""The ledger's record of failed runs: a failure is noted (start, end, error in one line, stage, hours
attempted) without moving any offset, never counts as loaded, and its files stay in flight for the next
run's recovery; the hours a failed run was loading are found from the brokers' time index. The last test
fails a real load (Spark, a broker) and reads its note back."""

from __future__ import annotations

import json
import time

import pytest

from ferry.loaders.failed_run import HOUR_MS, hour_span
from ferry.loaders.ledger import HISTORY_KEEP, Ledger, LedgerError, error_line


def _committed(ledger: Ledger, run_id: str, end: int) -> None:
    ledger.begin(run_id, ["/wh/t"])
    ledger.commit({"run_id": run_id, "rows": end, "started": 1000.0,
                   "ranges": [{"topic": "t", "partition": 0, "start": 0, "end": end}], "hours": {"t": [["2024-05-01", "10"]]}})


def test_a_failed_run_moves_nothing_and_is_noted(tmp_path):
    ledger = Ledger(tmp_path)
    with ledger.lock():
        _committed(ledger, "run-1", 40)
        ledger.begin("run-2", ["/wh/t"])
        before = ledger.read()
        entry = ledger.fail("run-2", "BadRecordsError: t/0@41: not the registry's wire format\n(more)",
                            started=2000.0, stage="topics", hours={"t": [["2024-05-01", "11"]]}, topics=["t"],
                            messages=9)
        after = ledger.read()
    for key in ("offsets", "loaded_to", "history", "pending", "in_flight", "published", "lost"):
        assert after[key] == before[key], key  # the files stay in flight: the next run's recovery removes them
    assert ledger.committed_offsets() == {("t", 0): 40}
    assert entry["error"] == "BadRecordsError: t/0@41: not the registry's wire format (more)"  # one line
    assert entry["ended"] >= entry["started"] == 2000.0 and entry["committed"] is False
    assert ledger.failed_runs() == [entry] and after["failed_total"] == 1
    assert (entry["stage"], entry["hours"], entry["topics"], entry["messages"]) == (
        "topics", {"t": [["2024-05-01", "11"]]}, ["t"], 9)
    assert [h["run_id"] for h in ledger.history()] == ["run-1"] and ledger.history()[0]["started"] == 1000.0

    with ledger.lock():  # the next run commits the same range: loaded once, the failure stays in the notes
        _committed(ledger, "run-3", 49)
        ledger.abandon("run-2")
    assert ledger.committed_offsets() == {("t", 0): 49} and len(ledger.failed_runs()) == 1


def test_failure_after_the_commit_is_marked_committed_and_notes_are_bounded(tmp_path):
    ledger = Ledger(tmp_path)
    with ledger.lock():
        _committed(ledger, "run-1", 10)
        assert ledger.fail("run-1", "OSError: metastore down", started=1.0, stage="apply")["committed"] is True
        for i in range(HISTORY_KEEP + 5):
            ledger.fail(f"x{i}", "RuntimeError: boom", started=2.0)
    state = ledger.read()
    assert len(state["failed"]) == HISTORY_KEEP and state["failed_total"] == HISTORY_KEEP + 6
    assert state["failed"][-1]["run_id"] == f"x{HISTORY_KEEP + 4}"
    with pytest.raises(LedgerError):
        ledger.fail("y", "no lock", started=0.0)


def test_a_ledger_from_before_failure_notes_reads(tmp_path):
    (tmp_path / Ledger.FILE).write_text(json.dumps({"version": 1, "seq": 3, "offsets": {"t": {"0": 5}},
                                                    "history": [{"run_id": "old", "committed_at": 1.0}]}))
    state = Ledger(tmp_path).read()
    assert state["failed"] == [] and state["failed_total"] == 0 and state["history"][0]["run_id"] == "old"


def test_error_line():
    assert error_line(ValueError("bad\n  second line")) == "ValueError: bad"
    wrapped = RuntimeError("An error occurred while calling o42.collect.\n"
                           "pyspark.errors.exceptions.captured.PythonException: \n"
                           "  ferry.loaders.split_load.SplitReadError: views/0@17: fetch failed\n  at ...")
    assert error_line(wrapped) == "ferry.loaders.split_load.SplitReadError: views/0@17: fetch failed"
    assert error_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert len(error_line(RuntimeError("x" * 5000))) == 300


# ---- the hours a failed run attempted, from the time index -----------------------------------------------

NOW = 1_714_600_000_000  # 2024-05-01T21:46:40Z
H = NOW - NOW % HOUR_MS


def _index(stamps: dict[int, list[int]]):
    """first_offset_at over made-up logs: {partition: [timestamp of offset 0, 1, ...]} (as ListOffsets by time:
    the first offset whose timestamp is >= t, None past the end)."""
    calls = []

    def first_offset_at(t: int) -> dict[int, int | None]:
        calls.append(t)
        return {p: next((o for o, ts in enumerate(log) if ts >= t), None) for p, log in stamps.items()}

    return first_offset_at, calls


def test_hour_span_of_the_ranges():
    logs = {0: [H - 5 * HOUR_MS + i * 600_000 for i in range(30)],   # 6 per hour from H-5h to H-1h+50m
            1: [H - 3 * HOUR_MS + 60_000 * i for i in range(10)]}   # all in H-3h
    at, calls = _index(logs)
    assert hour_span(at, {0: (0, 30), 1: (0, 10)}, NOW) == (H - 5 * HOUR_MS, H - HOUR_MS)
    assert len(calls) <= 2 * 12  # two binary searches over 62 days of hours
    assert hour_span(at, {0: (12, 18)}, NOW) == (H - 3 * HOUR_MS, H - 3 * HOUR_MS)  # exactly one hour
    assert hour_span(at, {0: (11, 19), 1: (3, 4)}, NOW) == (H - 4 * HOUR_MS, H - 2 * HOUR_MS)
    assert hour_span(at, {0: (30, 30)}, NOW) is None  # nothing to read
    old = {0: [H - 100 * 24 * HOUR_MS, H - 2 * HOUR_MS]}  # before the window: clipped to its first hour
    at, _ = _index(old)
    first, last = hour_span(at, {0: (0, 2)}, NOW)
    assert last == H - 2 * HOUR_MS and first == H + HOUR_MS - 62 * 24 * HOUR_MS


# ---- a real load that fails ----------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.slow
def test_a_failing_load_notes_its_error_and_hours(spark, offline, load_config, helpers):
    from dataclasses import replace

    from ferry.client.producer import Producer
    from ferry.loaders import steps
    from ferry.loaders.load_config import BadRecordsError

    topic = helpers.create_topic(offline, partitions=1)
    h = helpers.past_hour(3)
    helpers.produce(offline, topic, helpers.spread(h, 20))
    with Producer(bootstrap=offline.bootstrap, audit=False) as p:
        p.send(topic, b"not avro at all", timestamp_ms=h + HOUR_MS + 10)  # the next hour
    cfg = load_config(topic, include_audit=False)
    t0 = time.time()
    with pytest.raises(BadRecordsError):
        steps.load(cfg, spark)
    ledger = Ledger(cfg.state_dir)
    (note,) = ledger.failed_runs()
    assert ledger.committed_offsets() == {} and ledger.history() == []  # never counts as loaded
    assert note["run_id"] in ledger.in_flight()  # its files are the next run's to remove
    assert note["error"].startswith("BadRecordsError: ") and f"{topic}/0@20" in note["error"]
    assert "\n" not in note["error"] and t0 <= note["started"] <= note["ended"] <= time.time()
    assert (note["stage"], note["topics"], note["messages"], note["committed"]) == ("topics", [topic], 21, False)
    assert note["hours"] == {topic: [list(helpers.label(h)), list(helpers.label(h + HOUR_MS))]}

    _, result = steps.load(replace(cfg, skip_bad_records=True), spark)  # the rerun commits; the note stays
    assert result.committed and result.rows == 20 and ledger.committed_offsets() == {(topic, 0): 21}
    assert ledger.in_flight() == {} and [f["run_id"] for f in ledger.failed_runs()] == [note["run_id"]]
    assert ledger.history()[-1]["started"] <= ledger.history()[-1]["committed_at"]

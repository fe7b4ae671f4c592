"""The lag and rate both mirror kinds report, and the one status table (pure functions: no cluster needed)."""

from __future__ import annotations

from ferry.mirror.copy_lag import CopyRates, lag_messages, lag_seconds
from ferry.mirror.copy_status import CopyRow, format_table


def test_lag_in_messages_and_seconds() -> None:
    assert lag_messages(1500, 1200) == 300
    assert lag_messages(1200, 1500) == 0  # the live end seen before the copy's last fetch
    assert lag_messages(-1, 10) is None and lag_messages(10, None) is None
    now = 1_700_000_100_000
    assert lag_seconds(300, now - 4_200, now) == 4.2  # the last copied message is 4.2 s old, more waits
    assert lag_seconds(0, now - 600_000, now) == 0.0  # caught up: an idle partition is not "behind"
    assert lag_seconds(300, None, now) is None and lag_seconds(None, now, now) is None
    assert lag_seconds(5, now + 1_000, now) == 0.0  # a producer's clock ahead of ours


def test_rates_between_readings() -> None:
    rates = CopyRates()
    assert rates.rate(("t", 0), 100, 10_000, now=10.0) == (0.0, 0.0)  # the first reading
    assert rates.rate(("t", 0), 300, 30_000, now=12.0) == (100.0, 10_000.0)
    assert rates.rate(("t", 0), 50, 5_000, now=14.0) == (0.0, 0.0)  # a new copier started from 0
    assert rates.rate(("t", 0), 150, 15_000, now=16.0) == (50.0, 5_000.0)
    rates.forget(set())
    assert rates.rate(("t", 0), 250, 25_000, now=18.0) == (0.0, 0.0)


def test_one_table_for_both_kinds() -> None:
    report = {"topic": "views", "partition": 0, "broker": 2, "live_end": 1500, "copied_to": 1200, "state": "copying",
              "error": None, "lag": 300, "lag_seconds": 4.2, "messages_per_s": 2950.0}
    waiting = {"topic": "views", "partition": 1, "broker": 1, "live_end": -1, "copied_to": -1,
               "state": "waiting for the live leader", "error": "live views-1 has no leader"}
    rows = [CopyRow.from_report(report), CopyRow.from_report(waiting)]
    assert rows[1].lag is None and rows[1].live_end is None and rows[1].owner == "1"
    lines = format_table(rows, "LEADER", "  ")
    assert lines[0].split() == ["TOPIC", "PARTITION", "LIVE-END", "COPIED-TO", "LAG", "LAG-S", "MSG/S", "LEADER",
                                "STATE"]
    assert lines[1].split() == ["views", "0", "1500", "1200", "300", "4.2", "2950.0", "2", "copying"]
    assert lines[2].split()[:8] == ["views", "1", "-", "-", "-", "-", "-", "1"]
    assert lines[2].endswith("waiting for the live leader (live views-1 has no leader)")
    assert all(line.startswith("  ") for line in lines)

"""Which hour a run judges, and how an hour still incomplete after its lateness fails `check_complete`."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest

from tests.dags.conftest import DAGS  # noqa: F401 - puts dags/ on sys.path

UTC = dt.UTC


def t(h: int, m: int = 0) -> dt.datetime:
    return dt.datetime(2024, 5, 1, h, m, tzinfo=UTC)


def test_check_hour():
    from ferry_dag_factory import check_hour

    # the live run for 10:00-11:00 starts at 11:00: with 2 h lateness it judges 08:00 (ended 09:00, +2 h = 11:00)
    assert check_hour(t(10), t(11), t(11, 1), 120) == t(8)
    assert check_hour(t(10), t(11), t(11, 1), 90) == t(8)
    assert check_hour(t(10), t(11), t(11, 1), 0) == t(10)
    # a backfill or a late rerun judges its own hour once the lateness has passed
    assert check_hour(t(10), t(11), t(13), 120) == t(10)
    assert check_hour(t(10), t(11), t(12, 59), 120) == t(8)


def _books(tmp_path, rows):
    path = tmp_path / "books.json"
    path.write_text(json.dumps({"hours": rows}))
    return {"books_file": str(path), "check_hour": ["2024-05-01", "08"]}


def _row(topic, status, produced, loaded, hr="08"):
    return {"topic": topic, "dt": "2024-05-01", "hr": hr, "produced": produced, "mirrored": produced,
            "loaded": loaded, "missing": max(produced - loaded, 0), "duplicates": max(loaded - produced, 0),
            "complete": status == "complete", "status": status}


def test_incomplete_hour_fails_the_check_naming_the_counts(tmp_path, caplog, capfd):
    from airflow.sdk.exceptions import AirflowFailException
    from ferry_dag_factory import GroupConfig, check_task

    cfg = GroupConfig(name="g", topics=["a", "b"], zookeeper="z", state_dir=str(tmp_path), lateness_minutes=120)
    plan = _books(tmp_path, [_row("a", "complete", 10, 10), _row("b", "incomplete", 10, 7),
                             _row("b", "incomplete", 5, 0, hr="09")])  # 09:00 is not judged by this run
    with caplog.at_level(logging.ERROR, logger="ferry.dags"), pytest.raises(AirflowFailException) as err:
        check_task(cfg, plan)
    assert "hour 2024-05-01 08:00 still incomplete 120 min after its end" in str(err.value)
    assert "b: produced 10, mirrored 10, loaded 7, missing 3, duplicates 0" in str(err.value)
    assert "a:" not in str(err.value)
    out, errout = capfd.readouterr()
    assert "missing 3" in caplog.text + out + errout  # the log line (where Airflow's logging sends it)

    ok = _books(tmp_path, [_row("a", "complete", 10, 10), _row("b", "empty", 0, 0)])
    assert check_task(cfg, ok) == "2024-05-01T08 ok"

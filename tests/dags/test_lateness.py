"""Which hour a run judges, and how an hour still incomplete after its lateness fails `check_complete`."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from tests.dags.conftest import DAGS  # noqa: F401 - puts dags/ on sys.path

UTC = dt.UTC


def t(h: int, m: int = 0) -> dt.datetime:
    return dt.datetime(2024, 5, 1, h, m, tzinfo=UTC)


def test_check_deadline_is_the_hours_end_plus_its_lateness():
    from ferry_dag_factory import check_deadline

    assert check_deadline(t(10), 120) == t(13)
    assert check_deadline(t(10, 30), 90) == t(12, 30)
    assert check_deadline(t(10), 0) == t(11)


def _row(topic, status, produced, loaded, hr="08", unreachable=()):
    return {"topic": topic, "dt": "2024-05-01", "hr": hr, "produced": produced, "mirrored": produced,
            "loaded": loaded, "missing": max(produced - loaded, 0), "duplicates": max(loaded - produced, 0),
            "complete": status == "complete", "status": status, "unreachable": list(unreachable)}


JUDGE = ("2024-05-01", "08")


def test_incomplete_hour_waits_then_fails_the_check_naming_the_counts(tmp_path, caplog, capfd):
    from airflow.sdk.exceptions import AirflowFailException
    from ferry_dag_factory import GroupConfig, judge_books

    cfg = GroupConfig(name="g", topics=["a", "b"], zookeeper="z", state_dir=str(tmp_path), lateness_minutes=120)
    books = [_row("a", "complete", 10, 10), _row("b", "incomplete", 10, 7),
             _row("b", "incomplete", 5, 0, hr="09")]  # 09:00 is not judged by this check
    assert judge_books(cfg, JUDGE, books, final=False) is None  # before the deadline: keep waiting
    with caplog.at_level(logging.ERROR, logger="ferry.dags"), pytest.raises(AirflowFailException) as err:
        judge_books(cfg, JUDGE, books, final=True)
    assert "hour 2024-05-01 08:00 still incomplete 120 min after its end" in str(err.value)
    assert "b: produced 10, mirrored 10, loaded 7, missing 3, duplicates 0" in str(err.value)
    assert "a:" not in str(err.value)
    out, errout = capfd.readouterr()
    assert "missing 3" in caplog.text + out + errout  # the log line (where Airflow's logging sends it)

    assert judge_books(cfg, JUDGE, [_row("a", "complete", 10, 10), _row("b", "empty", 0, 0)],
                       final=True) == "2024-05-01T08 ok"


def test_unknown_hour_is_never_ok_and_names_the_unreachable_cluster(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException
    from ferry_dag_factory import GroupConfig, judge_books

    cfg = GroupConfig(name="g", topics=["a"], zookeeper="z", state_dir=str(tmp_path), lateness_minutes=0)
    books = [_row("a", "unknown", 10, 10, unreachable=["10.0.0.1:2181/ferry/live"])]
    assert judge_books(cfg, JUDGE, books, final=False) is None
    with pytest.raises(AirflowFailException) as err:
        judge_books(cfg, JUDGE, books, final=True)
    assert "unknown: live producer counts unreachable from 10.0.0.1:2181/ferry/live" in str(err.value)

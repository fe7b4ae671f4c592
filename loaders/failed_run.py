"""A failed load run's note in the ledger: start, end, the error in one line, the stage it failed in, and
the event hours it was loading (the dashboard's Loads page and `/metrics` show them; the failed-load alert
fires on them). The note moves no offset: a failed run never counts as loaded.

A run learns its rows' hours only by decoding them (the hour of a row is its record timestamp), and a run
that fails has usually decoded nothing it kept. So the hours are asked of the offline brokers' time index
instead: ``ListOffsets`` by time gives, per partition, the first offset whose timestamp is at or after a
time, which grows with the time; the hours of a range ``[start, end)`` are then those whose first offset
lies below ``end`` and whose next hour's first offset lies above ``start``. Two binary searches over the
hours of the look-back window find the first and the last such hour per topic (one request per step for
all of a topic's partitions). Records written out of time order make this an estimate of the span, which
is what a person needs to see ("the 13:00-15:00 load failed"); the hours of topics the run had finished
before it failed are exact and come from the run itself.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from ferry.loaders.cluster_offsets import ClusterOffsets
from ferry.loaders.ledger import Ledger, error_line
from ferry.loaders.load_config import RunState, Say, new_run_id
from ferry.loaders.naming import table_for_topic
from ferry.loaders.offsets import OffsetRange
from ferry.wire.client_config import ClientConfig

HOUR_MS = 3_600_000
WINDOW_HOURS = 24 * 62  # how far back a failed run's hours are looked for (the dashboard's widest range)


def hour_span(first_offset_at: Callable[[int], dict[int, int | None]], ranges: dict[int, tuple[int, int]],
              now_ms: int, window_hours: int = WINDOW_HOURS) -> tuple[int, int] | None:
    """(first, last) hour start in ms of the records in ``ranges`` ({partition: (start, end)}), or None.

    ``first_offset_at(t)`` answers ``{partition: first offset with timestamp >= t, None if there is none}``
    for the partitions of ``ranges``.
    """
    ranges = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not ranges:
        return None
    top = now_ms - now_ms % HOUR_MS + HOUR_MS  # the end of the current hour
    low = top - window_hours * HOUR_MS

    def reaches(h: int) -> bool:
        """Some range holds a record of hour h or later: the first offset at or after h is below its end."""
        got = first_offset_at(h)
        return any(got.get(p) is not None and got[p] < end for p, (_, end) in ranges.items())

    def before(h: int) -> bool:
        """Some range holds a record before hour h: the first offset at or after h lies beyond its start."""
        got = first_offset_at(h)
        return any(got.get(p) is None or got[p] > start for p, (start, _) in ranges.items())

    # the last hour: the largest h in [low, top) with reaches(h) (true, then false, as h grows)
    if not reaches(low):
        return None
    lo, hi = 0, window_hours - 1  # in hours from low; reaches(low + lo) holds
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if reaches(low + mid * HOUR_MS):
            lo = mid
        else:
            hi = mid - 1
    last = low + lo * HOUR_MS
    # the first hour: the smallest h with before(h + 1 hour) (false, then true, as h grows); before the
    # window's start everything counts as its first hour
    lo, hi = 0, lo
    while lo < hi:
        mid = (lo + hi) // 2
        if before(low + (mid + 1) * HOUR_MS):
            hi = mid
        else:
            lo = mid + 1
    return low + lo * HOUR_MS, last


def attempted_hours(zookeeper: str, ranges: list[OffsetRange], tables: dict[str, str], now_ms: int,
                    timeout_s: float = 5.0, max_hours: int = 48,
                    client_config: ClientConfig | None = None) -> dict[str, list[list[str]]]:
    """``{table: [[dt, hr], ...]}`` of the hours the offset ``ranges`` hold (OffsetRange objects), as far as the
    offline cluster's time index tells; at most ``max_hours`` per table (the latest). Best effort: a topic
    the cluster cannot answer for is left out."""
    by_topic: dict[str, dict[int, tuple[int, int]]] = {}
    for r in ranges:
        if r.end > r.start:
            by_topic.setdefault(r.topic, {})[r.partition] = (r.start, r.end)
    out: dict[str, list[list[str]]] = {}
    if not by_topic:
        return out
    with ClusterOffsets(zookeeper=zookeeper, timeout_s=timeout_s, client_config=client_config) as cluster:
        for topic, parts in sorted(by_topic.items()):
            try:
                span = hour_span(lambda t, topic=topic, parts=parts: cluster.offsets_for_time(topic, sorted(parts), t),
                                 parts, now_ms)
            except Exception:  # noqa: BLE001 - an estimate for people: leave the topic out, keep the error
                continue
            if span is None:
                continue
            first = max(span[0], span[1] - (max_hours - 1) * HOUR_MS)
            labels = []
            for h in range(first, span[1] + 1, HOUR_MS):
                t = dt.datetime.fromtimestamp(h / 1000, dt.UTC)
                labels.append([t.strftime("%Y-%m-%d"), t.strftime("%H")])
            out[tables.get(topic, topic)] = labels
    return out


STAGES = ("plan", "begin", "topics", "commit", "apply")  # LoadResult.stages, in the order a run passes them


def note_failure(ledger: Ledger, run: RunState, exc: BaseException, *, zookeeper: str, say: Say,
                 client_config: ClientConfig | None = None) -> None:
    """Record ``exc`` as the failure of the ``run`` (hours attempted: asked of the cluster at ``zookeeper``).
    Never raises: the run's own error is what its caller must see."""
    result, plan = run.result, run.plan
    # "start": before the plan was made (source check, recovery of earlier runs, planning)
    stage = "start" if result is None else next((s for s in STAGES if s not in result.stages), "apply")
    done = result.topics if result is not None else []
    hours: dict[str, list] = {t.table: [list(h) for h in t.hours] for t in done}
    if plan is not None and plan.total and not isinstance(exc, KeyboardInterrupt):
        try:
            todo = [r for r in plan.ranges if r.topic not in {t.topic for t in done}]
            hours |= attempted_hours(zookeeper, todo, {t: table_for_topic(t) for t in plan.topics()},
                                     int(time.time() * 1000), client_config=client_config)
        except Exception:  # noqa: BLE001, S110 - the hours help people; the error is what must be kept
            pass
    try:
        entry = ledger.fail(run.run_id or new_run_id(), error_line(exc), started=run.started, stage=stage,
                            hours=hours, topics=plan.topics() if plan else [], messages=plan.total if plan else 0)
        say(f"run {entry['run_id']} failed ({stage}), noted in the ledger: {entry['error']}")
    except Exception as e:  # noqa: BLE001 - never hide the run's own error behind the note's
        say(f"could not note the failed run in the ledger: {e}")

"""The planner: which offsets a load run reads (Camus's "EtlInputFormat").

For every partition of the selected topics the range is ``[committed end, latest)`` where the committed
end comes from the ledger and the latest from ListOffsets on the offline cluster. A partition never
loaded before starts at the earliest offset, the latest, or the first offset at a time (ListOffsets by
timestamp). A committed offset below the log start offset means retention deleted data before it was
loaded: the run fails loudly unless told to skip, and a skip is recorded in the ledger.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from ferry.loaders.cluster_offsets import ClusterOffsets
from ferry.loaders.offsets import OffsetRange, split_ranges

log = logging.getLogger("ferry.load.planner")


class DataLossError(RuntimeError):
    """Committed offsets point at data the cluster no longer has."""


class PlanError(RuntimeError):
    """The plan cannot be made (e.g. the committed offset is beyond the end of the log)."""


@dataclass(frozen=True)
class StartPosition:
    """Where a partition that was never loaded begins: ``earliest``, ``latest`` or a time (ms, UTC)."""

    kind: str  # "earliest" | "latest" | "time"
    ts_ms: int | None = None

    @classmethod
    def parse(cls, text: str) -> StartPosition:
        text = (text or "earliest").strip()
        if text in ("earliest", "latest"):
            return cls(text)
        try:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"--start {text!r}: expected earliest, latest or an ISO time "
                             "(e.g. 2024-05-01T13:00:00Z)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return cls("time", int(when.timestamp() * 1000))


@dataclass
class LostRange:
    topic: str
    partition: int
    start: int  # committed offset
    end: int  # log start offset: [start, end) was deleted before it was loaded

    def to_dict(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}


@dataclass
class LoadPlan:
    ranges: list[OffsetRange]  # one per partition (possibly empty: start == end)
    splits: list[OffsetRange]  # the Spark input partitions
    lost: list[LostRange] = field(default_factory=list)
    bootstrap: str = ""

    @property
    def total(self) -> int:
        return sum(r.size for r in self.ranges)

    def topics(self) -> list[str]:
        return sorted({r.topic for r in self.ranges})

    def for_topic(self, topic: str) -> list[OffsetRange]:
        return [r for r in self.ranges if r.topic == topic]

    def to_dict(self) -> dict:
        return {"ranges": [r.to_dict() for r in self.ranges], "lost": [x.to_dict() for x in self.lost],
                "bootstrap": self.bootstrap, "total": self.total, "splits": len(self.splits)}

    def describe(self) -> str:
        lines = []
        for topic in self.topics():
            rs = self.for_topic(topic)
            n = sum(r.size for r in rs)
            parts = ", ".join(f"{r.partition}:[{r.start},{r.end})" for r in rs if r.size)
            lines.append(f"  {topic}: {n} messages" + (f" ({parts})" if parts else ""))
        for x in self.lost:
            lines.append(f"  LOST {x.topic}/{x.partition}: offsets [{x.start},{x.end}) deleted by retention "
                         "before they were loaded (skipped)")
        return "\n".join(lines)


def topics_to_load(cluster: ClusterOffsets, spec: str | list[str], include_audit: bool) -> dict[str, int]:
    """``{topic: partition count}`` of the topics ``spec`` selects, plus `_audit` (if it exists) when asked."""
    topics = cluster.select_topics(spec)
    if include_audit:
        all_topics = cluster.topics()
        if "_audit" in all_topics:
            topics["_audit"] = all_topics["_audit"]
    return topics


def make_plan(cluster: ClusterOffsets, topics: dict[str, int], committed: dict[tuple[str, int], int], *,
              start: StartPosition = StartPosition("earliest"), max_per_split: int | None = 1_000_000,
              skip_lost_data: bool = False, until: dict[tuple[str, int], int] | None = None) -> LoadPlan:
    """Ranges for every partition of ``topics`` (``{topic: partition count}``).

    ``until`` caps end offsets (a plan made earlier, e.g. by the DAG's plan task, so that a retried load
    reads the same ranges).
    """
    ranges: list[OffsetRange] = []
    lost: list[LostRange] = []
    lost_msgs: list[str] = []
    for topic, count in sorted(topics.items()):
        partitions = list(range(count))
        by_time: dict[int, int | None] = {}
        if start.kind == "time" and any((topic, p) not in committed for p in partitions):
            by_time = cluster.offsets_for_time(topic, partitions, int(start.ts_ms or 0))
        for p in partitions:
            wm = cluster.watermarks(topic, p)
            end = wm.high
            if until is not None and (topic, p) in until:
                end = min(end, until[(topic, p)])
            if (topic, p) in committed:
                begin = committed[(topic, p)]
                if begin > wm.high:
                    raise PlanError(f"{topic}/{p}: committed offset {begin} is beyond the end of the log "
                                    f"({wm.high}); was the topic deleted and re-created? Reset the ledger "
                                    "for it (ferry load --reset-offsets) after checking")
                if begin < wm.low:
                    lost.append(LostRange(topic, p, begin, wm.low))
                    lost_msgs.append(f"{topic}/{p}: committed offset {begin} < log start offset {wm.low} "
                                     f"({wm.low - begin} messages deleted by retention before loading)")
                    begin = wm.low
            elif start.kind == "earliest":
                begin = wm.low
            elif start.kind == "latest":
                begin = wm.high
            else:
                found = by_time.get(p)
                begin = wm.high if found is None else max(found, wm.low)
            end = max(end, begin)
            ranges.append(OffsetRange(topic, p, begin, end))
    if lost_msgs:
        text = "DATA LOSS: " + "; ".join(lost_msgs)
        if not skip_lost_data:
            raise DataLossError(text + ". Nothing was loaded. Re-run with --skip-lost-data to load what is "
                                "left (the lost ranges are recorded in the ledger).")
        log.error("%s (skipping, as told by --skip-lost-data)", text)
    return LoadPlan(ranges=ranges, splits=split_ranges(ranges, max_per_split), lost=lost,
                    bootstrap=cluster.bootstrap)

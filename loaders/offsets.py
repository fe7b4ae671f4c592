"""Offset ranges: the unit of work of a load (Camus's "EtlRequest").

A range is half-open, ``[start, end)``, over one topic partition. Ranges are written to Spark in the
JSON shape of Spark's Kafka source (``{"topic": {"0": 42}}``) so that the ``ferry`` data source can be
driven exactly like ``format("kafka")``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass


class OffsetSpecError(ValueError):
    """startingOffsets/endingOffsets JSON that does not describe valid ranges."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    def contains(self, offset: int) -> bool:
        return self.start <= offset < self.end

    def to_dict(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}

    @classmethod
    def from_dict(cls, d: dict) -> OffsetRange:
        return cls(str(d["topic"]), int(d["partition"]), int(d["start"]), int(d["end"]))


def split_range(r: OffsetRange, max_per_split: int | None) -> list[OffsetRange]:
    """Cut one range into pieces of at most ``max_per_split`` offsets (Spark input partitions)."""
    if r.size == 0:
        return []
    if not max_per_split or max_per_split <= 0 or r.size <= max_per_split:
        return [r]
    return [OffsetRange(r.topic, r.partition, s, min(s + max_per_split, r.end))
            for s in range(r.start, r.end, max_per_split)]


def split_ranges(ranges: Iterable[OffsetRange], max_per_split: int | None) -> list[OffsetRange]:
    out: list[OffsetRange] = []
    for r in sorted(ranges):
        out.extend(split_range(r, max_per_split))
    return out


def offsets_json(offsets: dict[tuple[str, int], int]) -> str:
    """``{(topic, partition): offset}`` -> Spark-Kafka-style JSON ``{"topic": {"0": offset}}``."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), off in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = int(off)
    return json.dumps(nested, sort_keys=True)


def parse_offsets_json(text: str, what: str = "offsets") -> dict[tuple[str, int], int]:
    """Inverse of :func:`offsets_json`, with errors that say which entry is wrong."""
    try:
        data = json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        raise OffsetSpecError(f"{what}: not JSON ({e}); expected {{\"topic\": {{\"0\": 42}}}}") from None
    if not isinstance(data, dict):
        raise OffsetSpecError(f"{what}: expected a JSON object {{\"topic\": {{\"partition\": offset}}}}")
    out: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OffsetSpecError(f"{what}: topic {topic!r} must map partitions to offsets")
        for p, off in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OffsetSpecError(f"{what}: partition {p!r} of topic {topic!r} is not an integer") from None
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise OffsetSpecError(f"{what}: offset {off!r} of {topic}/{partition} must be an integer >= 0 "
                                      "(earliest/latest are resolved by the planner)")
            out[(topic, partition)] = off
    return out


def ranges_from_offsets(starting: dict[tuple[str, int], int], ending: dict[tuple[str, int], int]
                        ) -> list[OffsetRange]:
    """Pair starting and ending offsets; both must name the same partitions and start <= end."""
    if set(starting) != set(ending):
        only_s = sorted(set(starting) - set(ending))
        only_e = sorted(set(ending) - set(starting))
        raise OffsetSpecError(f"startingOffsets and endingOffsets name different partitions "
                              f"(only starting: {only_s}, only ending: {only_e})")
    ranges = []
    for key in sorted(starting):
        s, e = starting[key], ending[key]
        if e < s:
            raise OffsetSpecError(f"{key[0]}/{key[1]}: endingOffset {e} is before startingOffset {s}")
        ranges.append(OffsetRange(key[0], key[1], s, e))
    return ranges

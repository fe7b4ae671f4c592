"""What a consumer subscribes to: a static {topic: streams} map or a topic filter (include/exclude regex).

The subscription is written into the consumer's registration node so that every member of a group can
tell, for each topic, which members share it (Algorithm 1 divides a topic's partitions among those).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ferry.client.topic_selection import TopicFilter

STRATEGIES = ("range", "roundrobin")


@dataclass(frozen=True)
class Subscription:
    topics: dict[str, int] = field(default_factory=dict)  # static: topic -> number of streams
    include: str | None = None  # filter: topics fully matching `include` and not `exclude`
    exclude: str | None = None
    streams: int = 1  # filter: number of streams shared by all matching topics
    strategy: str = "range"  # how the group divides partitions: "range" (Algorithm 1) or "roundrobin"
    _filter: TopicFilter | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.include is None and not self.topics:
            raise ValueError("a subscription needs at least one topic or an include pattern")
        for t, n in self.topics.items():
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"number of streams for topic {t!r} must be a positive integer, not {n!r}")
        if self.streams < 1:
            raise ValueError(f"number of streams must be positive, not {self.streams}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"assignment strategy must be one of {', '.join(STRATEGIES)}, not {self.strategy!r}")
        if self.include is not None:
            object.__setattr__(self, "_filter", TopicFilter(self.include, self.exclude))
        elif self.exclude is not None:
            TopicFilter(".*", self.exclude)  # validated like a filter's

    @property
    def is_filter(self) -> bool:
        return self.include is not None

    def matches(self, topic: str) -> bool:
        """A static subscription's topics, or what its filter selects (internal topics only when named:
        `topic_selection.is_internal`)."""
        if self._filter is None:
            return topic in self.topics
        return self._filter.matches(topic)

    def encode(self) -> bytes:
        doc: dict = {"version": 1, "timestamp": str(int(time.time() * 1000)), "strategy": self.strategy}
        if self.is_filter:
            doc.update(pattern="filter", include=self.include, exclude=self.exclude, streams=self.streams)
        else:
            doc.update(pattern="static", subscription=dict(self.topics))
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Subscription:
        """ValueError on anything but a registration this module wrote."""
        try:
            doc = json.loads(data or b"")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"consumer registration is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError("consumer registration is not a JSON object")
        try:
            strategy = str(doc.get("strategy", "range"))  # registrations older than strategies: range
            if doc.get("pattern") == "filter":
                exclude = doc.get("exclude")
                return cls(include=str(doc["include"]), exclude=None if exclude is None else str(exclude),
                           streams=int(doc.get("streams", 1)), strategy=strategy)
            sub = doc.get("subscription")
            if not isinstance(sub, dict):
                raise ValueError(f"consumer registration has no subscription: {doc!r}")
            return cls(topics={str(t): int(n) for t, n in sub.items()}, strategy=strategy)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad consumer registration {doc!r}: {exc}") from None

    def describe(self) -> str:
        if self.is_filter:
            return f"include={self.include}" + (f" exclude={self.exclude}" if self.exclude else "")
        return ",".join(f"{t}:{n}" for t, n in sorted(self.topics.items()))

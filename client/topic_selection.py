"""Which topics a spec selects: one rule for every user of topic names and patterns.

* `is_internal`: the one definition of an internal topic.
* `TopicFilter`: Kafka's whitelist with a blacklist (include / exclude regexes over whole names), used by
  the consumer group's filter subscriptions, the mirror (what it copies) and `ferry mirror status`.
* `select_topics`: a `--topics` spec (loads, the DAG steps, the cluster lookups). A list, or a
  comma-separated string, names topics; anything else is one topic's name if such a topic exists, else a
  regular expression over whole names.

A pattern never selects an internal topic unless it names it (see `is_internal`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]+")  # no regex metacharacter: meant as one topic's name
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")
_ESCAPE = re.compile(r"\\(.)")


def is_internal(topic: str) -> bool:
    """Whether ``topic`` holds the pipeline's own bookkeeping rather than an application's records: a name
    starting with ``_``. That is Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``)
    and ferry's ``_audit`` (every tier's counts; ferry keeps offsets and schemas in ZooKeeper, not in topics).

    A regular expression never selects an internal topic, however wide (``.*``), as Kafka's consumers skip
    internal topics (exclude.internal.topics); only naming one does: a `--topics` list or name, or a whole
    alternative of a pattern (``events|_audit``; see `named_in`). So loads take ``_audit`` only when asked,
    and the mirror copies it because it names it.
    """
    return topic.startswith("_")


def named_in(pattern: str) -> frozenset[str]:
    """The topic names ``pattern`` spells out as whole top-level alternatives (``(?:.*)|_audit`` names
    ``_audit``; escaped dots count: ``a\\.b`` names ``a.b``)."""
    alternatives, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            alternatives.append(pattern[start:i])
            start = i + 1
        i += 1
    alternatives.append(pattern[start:])
    names = set()
    for alt in alternatives:
        name = _ESCAPE.sub(r"\1", alt)
        if _TOPIC_NAME.fullmatch(name) and re.fullmatch(alt, name):
            names.add(name)
    return frozenset(names)


@dataclass(frozen=True)
class TopicFilter:
    """Kafka's whitelist and blacklist: the topics whose whole name matches ``include`` and not ``exclude``,
    never an internal topic unless ``include`` names it (`is_internal`). Both must be valid regexes."""

    include: str
    exclude: str | None = None
    _include: re.Pattern = field(init=False, repr=False, compare=False)
    _exclude: re.Pattern | None = field(init=False, repr=False, compare=False)
    _named: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = []
        for pattern in (self.include, self.exclude):
            try:
                compiled.append(re.compile(pattern) if pattern is not None else None)
            except re.error as exc:
                raise ValueError(f"bad topic pattern {pattern!r}: {exc}") from None
        object.__setattr__(self, "_include", compiled[0])
        object.__setattr__(self, "_exclude", compiled[1] if self.exclude else None)
        object.__setattr__(self, "_named", named_in(self.include))

    def matches(self, topic: str) -> bool:
        if is_internal(topic) and topic not in self._named:
            return False
        if not self._include.fullmatch(topic):
            return False
        return not self.excludes(topic)

    def excludes(self, topic: str) -> bool:
        """Whether the blacklist takes ``topic`` out, whatever ``include`` says."""
        return self._exclude is not None and self._exclude.fullmatch(topic) is not None


class TopicSelectionError(ValueError):
    """Named topics that do not exist, or a spec that is neither a topic nor a valid regular expression."""


def select_topics(spec: str | list[str], available: Iterable[str], *, include_internal: bool = False,
                  strict: bool = True) -> list[str]:
    """The topics of ``available`` that ``spec`` selects, sorted. ``include_internal``: a regex selects internal
    topics too. ``strict``: a named topic that is missing or an invalid regex raises TopicSelectionError;
    otherwise they select nothing."""
    names = sorted(set(available))
    listed = [s.strip() for s in spec.split(",") if s.strip()] if isinstance(spec, str) and "," in spec else spec
    if isinstance(listed, list):
        missing = [n for n in listed if n not in names]
        if missing and strict:
            raise TopicSelectionError(f"unknown topic(s) {', '.join(missing)}")
        return [n for n in names if n in listed]
    if listed in names:
        return [listed]
    if strict and _PLAIN_NAME.fullmatch(listed):  # a topic's name, not a pattern: it must exist
        raise TopicSelectionError(f"unknown topic {listed}")
    try:
        rx = re.compile(listed)
    except re.error as e:
        if strict:
            raise TopicSelectionError(f"--topics {listed!r} is neither a topic nor a valid regex: {e}") from None
        return []
    selected = TopicFilter(listed)
    return [n for n in names if selected.matches(n) or (include_internal and rx.fullmatch(n))]

"""Which topics a `--topics` spec names: one rule for every command that takes one (loads, the DAG steps,
the cluster lookups). A list, or a comma-separated string, names topics; anything else is one topic's
name if such a topic exists, else a regular expression over whole names. Internal topics (a leading ``_``,
e.g. `_audit`) match a regular expression only when asked for."""

from __future__ import annotations

import re
from collections.abc import Iterable

_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]+")  # no regex metacharacter: meant as one topic's name


class TopicSelectionError(ValueError):
    """Named topics that do not exist, or a spec that is neither a topic nor a valid regular expression."""


def select_topics(spec: str | list[str], available: Iterable[str], *, include_internal: bool = False,
                  strict: bool = True) -> list[str]:
    """The topics of ``available`` that ``spec`` selects, sorted. ``strict``: a named topic that is missing or
    an invalid regex raises TopicSelectionError; otherwise they select nothing."""
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
    return [n for n in names if rx.fullmatch(n) and (include_internal or not n.startswith("_"))]

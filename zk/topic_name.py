"""Topic-name rules, as Kafka has them.

Topic names become directory names (``<topic>-<partition>``) and znode names, so they are restricted
to ASCII letters, digits, '.', '_' and '-', at most 249 characters, and never "." or "..".
Because '.' and '_' collide in metric names, Kafka also refuses a topic that differs from an existing
one only by those two characters; so do we.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ferry.zk.errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
# The pipeline's audit topic: every tier publishes its counts here; brokers may create it (audit.topic.partitions).
AUDIT_TOPIC = "_audit"
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: object) -> str:
    """Return ``name`` if Kafka would accept it, else raise InvalidTopicError saying why."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL.match(name):
        bad = sorted({c for c in name if not _LEGAL.match(c)})
        raise InvalidTopicError(
            f"topic name {name!r} contains {''.join(bad)!r}; only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    return name


def colliding_topic(name: str, existing: Iterable[str]) -> str | None:
    """An existing topic that differs from ``name`` only by '.' versus '_', if any."""
    key = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == key:
            return other
    return None

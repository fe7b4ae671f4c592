"""Topic names follow Kafka's rules."""

from __future__ import annotations

import pytest

from ferry.zk import InvalidTopicError
from ferry.zk.topic_name import colliding_topic, validate_topic_name


@pytest.mark.parametrize("name", ["page_view", "a", "A.b-c_9", "x" * 249, "_audit", "..."])
def test_legal(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "empty"),
        (".", "cannot be"),
        ("..", "cannot be"),
        ("x" * 250, "limit is 249"),
        ("page view", "' '"),
        ("a/b", "'/'"),
        ("café", "'é'"),
        (None, "must be a string"),
    ],
)
def test_illegal(name: object, fragment: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert fragment in str(info.value)


def test_dot_underscore_collision() -> None:
    assert colliding_topic("a.b", ["a_b", "c"]) == "a_b"
    assert colliding_topic("a.b", ["a.b"]) is None
    assert colliding_topic("a.b", ["a-b"]) is None

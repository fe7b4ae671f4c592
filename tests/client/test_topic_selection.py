"""One rule for --topics specs (lists name topics, else a topic's own name, else a whole-name regex), consumer
filters and the mirror; one definition of an internal topic."""

from __future__ import annotations

import pytest

from ferry.client.subscription import Subscription
from ferry.client.topic_selection import (
    TopicFilter,
    TopicSelectionError,
    is_internal,
    named_in,
    select_topics,
)

TOPICS = ["_audit", "clicks", "page.view", "page_view", "searches"]


def test_lists_and_comma_strings_name_topics() -> None:
    assert select_topics(["clicks", "_audit"], TOPICS) == ["_audit", "clicks"]
    assert select_topics("searches, clicks", TOPICS) == ["clicks", "searches"]
    with pytest.raises(TopicSelectionError, match="unknown topic\\(s\\) nope"):
        select_topics("clicks,nope", TOPICS)
    assert select_topics("clicks,nope", TOPICS, strict=False) == ["clicks"]


def test_a_name_wins_over_the_regex_it_also_is() -> None:
    assert select_topics("page.view", TOPICS) == ["page.view"]  # not page_view too
    assert select_topics("page.vie.", TOPICS) == ["page.view", "page_view"]


def test_regexes_match_whole_names_and_skip_internal_topics_unless_asked() -> None:
    assert select_topics(".*s", TOPICS) == ["clicks", "searches"]
    assert select_topics(".*", TOPICS, include_internal=True)[0] == "_audit"
    assert select_topics("click.*x", TOPICS) == []  # a pattern may match nothing (yet)
    with pytest.raises(TopicSelectionError, match="unknown topic nosuch"):
        select_topics("nosuch", TOPICS)  # a plain name must exist
    assert select_topics("nosuch", TOPICS, strict=False) == []
    with pytest.raises(TopicSelectionError, match="neither a topic nor a valid regex"):
        select_topics("(", TOPICS)
    assert select_topics("(", TOPICS, strict=False) == []


def test_one_definition_of_internal_topics() -> None:
    assert is_internal("_audit") and is_internal("__consumer_offsets") and is_internal("__transaction_state")
    assert not is_internal("audit_") and not is_internal("page_view")


def test_a_pattern_selects_an_internal_topic_only_when_it_names_it() -> None:
    assert select_topics(".*|_audit", TOPICS) == TOPICS
    assert named_in(r"(?:.*)|_audit|page\.view|a(b|c)") == {"_audit", "page.view"}
    wide = TopicFilter(".*")
    assert not wide.matches("_audit") and not wide.matches("__consumer_offsets") and wide.matches("clicks")
    mirror = TopicFilter("(?:.*)|_audit", exclude="sec.*")
    assert mirror.matches("_audit") and not mirror.matches("__consumer_offsets")
    assert not mirror.matches("secret") and mirror.excludes("secret") and not mirror.excludes("_audit")
    assert not TopicFilter("(?:.*)|_audit", exclude="_audit").matches("_audit")  # named, then excluded


def test_consumer_filters_use_the_same_rule() -> None:
    sub = Subscription(include=r"t\d+|_audit", exclude="t9")
    assert sub.matches("t1") and sub.matches("_audit") and not sub.matches("t9")
    assert not Subscription(include=".*").matches("_audit")
    assert not Subscription(include=".*").matches("__t3")
    with pytest.raises(ValueError, match="bad topic pattern"):
        Subscription(include="(")

"""One rule for --topics specs: lists name topics, else a topic's own name, else a whole-name regex."""

from __future__ import annotations

import pytest

from ferry.client.topic_selection import TopicSelectionError, select_topics

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

"""The round-robin split: every (topic, partition) owned exactly once, spread evenly across topics, members
skipped for topics they do not read, and the same answer whatever order the inputs come in."""

from ferry.client.round_robin_assignor import round_robin_all, round_robin_share


def test_many_single_partition_topics_are_spread_evenly():
    topics = {f"t{i:02d}": [0] for i in range(10)}
    members = ["m1", "m2", "m3"]
    shares = round_robin_all(topics, {t: members for t in topics})
    assert sorted(len(s) for s in shares.values()) == [3, 3, 4]
    flat = sorted(tp for s in shares.values() for tp in s)
    assert flat == sorted((t, 0) for t in topics)
    assert shares["m1"] == [("t00", 0), ("t03", 0), ("t06", 0), ("t09", 0)]


def test_members_are_skipped_for_topics_they_do_not_read():
    topics = {"a": [0, 1, 2], "b": [0, 1]}
    subs = {"a": ["x", "y"], "b": ["y", "z"]}
    shares = round_robin_all(topics, subs)
    assert shares == {"x": [("a", 0), ("a", 2)], "y": [("a", 1), ("b", 0)], "z": [("b", 1)]}
    for m, share in shares.items():
        assert all(m in subs[t] for t, _ in share)


def test_input_order_does_not_matter_and_strangers_get_nothing():
    topics = {"b": [2, 0, 1], "a": [1, 0]}
    subs = {"a": ["n", "m"], "b": ["m", "n"]}
    again = round_robin_all({"a": [0, 1], "b": [0, 1, 2]}, {"a": ["m", "n"], "b": ["n", "m"]})
    assert round_robin_all(topics, subs) == again
    assert round_robin_share(topics, subs, "zz") == []
    assert round_robin_all({}, {}) == {}

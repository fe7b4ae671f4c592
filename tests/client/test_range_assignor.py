from ferry.client.range_assignor import assign_all, range_for


def test_ranges_are_contiguous_and_cover_every_partition_once():
    for n_parts in range(0, 15):
        for n_cons in range(1, 6):
            consumers = [f"c{i}" for i in range(n_cons)]
            shares = assign_all(list(range(n_parts)), consumers)
            flat = [p for c in sorted(consumers) for p in shares[c]]
            assert flat == list(range(n_parts))
            sizes = [len(shares[c]) for c in sorted(consumers)]
            assert max(sizes) - min(sizes) <= 1
            assert sizes == sorted(sizes, reverse=True)  # the remainder goes to the first consumers


def test_order_of_input_does_not_matter_and_strangers_get_nothing():
    assert range_for([3, 1, 2, 0], ["b", "a"], "a") == [0, 1]
    assert range_for([0, 1, 2, 3], ["a", "b"], "b") == [2, 3]
    assert range_for([0, 1], ["a"], "z") == []
    assert range_for(list(range(12)), ["x", "y", "z"], "y") == [4, 5, 6, 7]
    assert range_for(list(range(5)), ["a", "b", "c"], "a") == [0, 1]
    assert range_for(list(range(5)), ["a", "b", "c"], "c") == [4]

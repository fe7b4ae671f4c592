"""LeaderEpochFileCache: Kafka's leader-epoch-checkpoint format and its endOffsetFor / truncation semantics."""

from __future__ import annotations

import pytest

from ferry.broker.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    EpochEntry,
    LeaderEpochCheckpointError,
    LeaderEpochFileCache,
    read_epoch_checkpoint,
)


def _cache(tmp_path, *pairs: tuple[int, int]) -> LeaderEpochFileCache:
    c = LeaderEpochFileCache(tmp_path)
    for epoch, start in pairs:
        assert c.assign(epoch, start)
    return c


def test_empty_cache(tmp_path):
    c = LeaderEpochFileCache(tmp_path)
    assert c.latest_epoch == -1 and c.entries == [] and c.latest_entry() is None
    assert c.end_offset_for(0, 100) == (-1, -1)
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).exists()  # nothing written until something changes


def test_file_is_kafkas_text_format(tmp_path):
    _cache(tmp_path, (0, 0), (3, 120), (4, 500))
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n3\n0 0\n3 120\n4 500\n"


def test_empty_file_after_clear_is_valid(tmp_path):
    c = _cache(tmp_path, (1, 0))
    c.clear()
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n0\n"
    assert LeaderEpochFileCache(tmp_path).entries == []


def test_persists_across_reopen(tmp_path):
    _cache(tmp_path, (2, 10), (5, 40))
    again = LeaderEpochFileCache(tmp_path)
    assert again.entries == [EpochEntry(2, 10), EpochEntry(5, 40)] and again.latest_epoch == 5


def test_assign_ignores_old_or_equal_epochs_and_backward_offsets(tmp_path):
    c = _cache(tmp_path, (2, 10))
    assert not c.assign(2, 10)  # same epoch: no-op (every batch of an epoch calls assign)
    assert not c.assign(2, 50)  # same epoch, later offset: still the epoch's start at 10
    assert not c.assign(1, 60)  # older epoch
    assert not c.assign(3, 5)  # newer epoch starting before the latest: refused
    assert not c.assign(-1, 100) and not c.assign(4, -1)
    assert c.entries == [EpochEntry(2, 10)]
    assert c.assign(3, 10)  # a newer epoch may start at the same offset (a leader that wrote nothing)
    assert c.entries == [EpochEntry(2, 10), EpochEntry(3, 10)] and c.latest_epoch == 3


def test_end_offset_for(tmp_path):
    c = _cache(tmp_path, (1, 0), (3, 100), (6, 250))
    assert c.end_offset_for(6, 300) == (6, 300)  # latest epoch: the log end
    assert c.end_offset_for(3, 300) == (3, 250)  # ended where epoch 6 began
    assert c.end_offset_for(1, 300) == (1, 100)
    assert c.end_offset_for(2, 300) == (1, 100)  # unknown epoch between: the largest epoch below it
    assert c.end_offset_for(5, 300) == (3, 250)
    assert c.end_offset_for(0, 300) == (0, 0)  # below the first known epoch: its start (KIP-279)
    assert c.end_offset_for(7, 300) == (-1, -1)  # above the latest: undefined
    assert c.end_offset_for(-1, 300) == (-1, -1)


def test_epoch_for_offset(tmp_path):
    c = _cache(tmp_path, (1, 10), (3, 100))
    assert [c.epoch_for_offset(o) for o in (0, 10, 99, 100, 1000)] == [-1, 1, 1, 3, 3]


def test_truncate_from_end(tmp_path):
    c = _cache(tmp_path, (1, 0), (3, 100), (6, 250))
    assert c.truncate_from_end(300) == []  # nothing starts at/after 300
    assert c.truncate_from_end(250) == [EpochEntry(6, 250)]
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 100)] and c.latest_epoch == 3
    c.truncate_from_end(50)
    assert c.entries == [EpochEntry(1, 0)]
    assert LeaderEpochFileCache(tmp_path).entries == [EpochEntry(1, 0)]
    c.truncate_from_end(0)
    assert c.entries == [] and c.latest_epoch == -1
    assert c.assign(7, 0)  # after truncation an epoch may be assigned again


def test_truncate_from_start(tmp_path):
    c = _cache(tmp_path, (1, 0), (3, 100), (6, 250))
    c.truncate_from_start(50)  # inside epoch 1: it now starts at 50
    assert c.entries == [EpochEntry(1, 50), EpochEntry(3, 100), EpochEntry(6, 250)]
    c.truncate_from_start(100)  # exactly epoch 3's start: epoch 1 goes
    assert c.entries == [EpochEntry(3, 100), EpochEntry(6, 250)]
    c.truncate_from_start(20)  # below the first entry: nothing to do
    assert c.entries == [EpochEntry(3, 100), EpochEntry(6, 250)]
    c.truncate_from_start(400)
    assert c.entries == [EpochEntry(6, 400)] and c.latest_epoch == 6
    assert LeaderEpochFileCache(tmp_path).entries == [EpochEntry(6, 400)]


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\n1 0\n", "0\n1\nx y\n", "0\n2\n3 10\n2 20\n", "0\n2\n2 10\n3 5\n",
                                  ""])
def test_damaged_file_is_reported(tmp_path, text):
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text(text)
    with pytest.raises(LeaderEpochCheckpointError):
        read_epoch_checkpoint(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    with pytest.raises(LeaderEpochCheckpointError):
        LeaderEpochFileCache(tmp_path)


def test_entries_given_replace_the_file(tmp_path):
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("garbage")
    c = LeaderEpochFileCache(tmp_path, [EpochEntry(0, 0), EpochEntry(2, 30)])
    assert c.latest_epoch == 2
    assert LeaderEpochFileCache(tmp_path).entries == [EpochEntry(0, 0), EpochEntry(2, 30)]


def test_failed_write_leaves_the_cache_unchanged(tmp_path, monkeypatch):
    c = _cache(tmp_path, (1, 0))

    def boom(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ferry.broker.log.leader_epoch_cache.atomic_write", boom)
    with pytest.raises(OSError):
        c.assign(2, 10)
    with pytest.raises(OSError):
        c.truncate_from_end(0)
    assert c.entries == [EpochEntry(1, 0)] and c.latest_epoch == 1

"""The controller's decision as a pure function (broker/server/controller.decide) and its reading of the
topic's unclean.leader.election.enable: elections from the ISR only, offline when it is gone, unclean only
when enabled, controlled shutdown and preferred leaders."""

from __future__ import annotations

from ferry.broker.server.controller import KafkaController, decide
from ferry.wire.log_config import LogConfig
from ferry.zk.znodes import PartitionState

R = (1, 2, 3)


def st(leader: int, epoch: int, isr: tuple[int, ...]) -> PartitionState:
    return PartitionState(leader, epoch, isr, 1)


def test_a_new_partition_gets_its_first_live_replica_as_leader():
    assert decide(R, None, {2, 3}, set(), False, False, 5) == PartitionState(2, 0, (2, 3), 5)
    assert decide(R, None, set(), set(), False, False, 5) is None


def test_a_dead_leader_is_replaced_from_the_isr_with_a_new_epoch():
    assert decide(R, st(1, 4, (1, 2, 3)), {2, 3}, set(), False, False, 2) == PartitionState(2, 5, (2, 3), 2)
    assert decide(R, st(1, 4, (1, 3)), {2, 3}, set(), False, False, 2) == PartitionState(3, 5, (3,), 2)


def test_no_live_isr_member_means_offline_unless_unclean():
    assert decide(R, st(1, 4, (1,)), {2, 3}, set(), False, False, 2) == PartitionState(-1, 5, (1,), 2)
    assert decide(R, st(-1, 5, (1,)), {2, 3}, set(), False, False, 2) is None  # stays offline
    assert decide(R, st(-1, 5, (1,)), {1, 2}, set(), False, False, 2) == PartitionState(1, 6, (1,), 2)
    assert decide(R, st(1, 4, (1,)), {2, 3}, set(), True, False, 2) == PartitionState(2, 5, (2,), 2)


def test_controlled_shutdown_and_preferred_leaders():
    assert decide(R, st(1, 4, (1, 2, 3)), {1, 2, 3}, {1}, False, False, 2) == PartitionState(2, 5, (2, 3), 2)
    assert decide(R, st(1, 4, (1,)), {1, 2, 3}, {1}, False, False, 2) is None  # nobody in sync to take over
    assert decide(R, st(2, 4, (1, 2, 3)), {1, 2, 3}, set(), False, True, 2) == PartitionState(1, 5, (1, 2, 3), 2)
    assert decide(R, st(2, 4, (2, 3)), {1, 2, 3}, set(), False, True, 2) is None  # preferred not in sync


def test_unclean_election_is_the_topics_setting_else_the_brokers():
    c = KafkaController(1, lambda: None, None, None, log_defaults=LogConfig(unclean_leader_election_enable=False))
    assert c._unclean({}) is False
    assert c._unclean({"unclean.leader.election.enable": "true"}) is True
    assert c._unclean({"unclean.leader.election.enable": "nonsense"}) is False  # refused value: the default
    c = KafkaController(1, lambda: None, None, None, log_defaults=LogConfig(unclean_leader_election_enable=True))
    assert c._unclean({}) is True and c._unclean({"unclean.leader.election.enable": "false"}) is False

"""`ferry topics reassign|alter --replication-factor|elect-leaders` against a real ZooKeeper, without brokers:
the plans proposed, the request znodes written (Kafka's JSON), the checks and refusals, --verify's reading
of the topic and state znodes. The controller's side runs in test_replication_admin.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.cli import main
from ferry.client.tools.reassignment import ReassignmentPlanError, decode_plan, propose
from ferry.zk import ClusterRegistry
from ferry.zk.assignment import assign_replicas
from ferry.zk.znodes import (
    PREFERRED_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
    PartitionState,
    TopicInfo,
    partition_state_path,
    topic_path,
)


@pytest.fixture
def three(zk_connect: str) -> Iterator[tuple[str, ClusterRegistry]]:
    """Brokers 1, 2, 3 registered (by registries of this process; no broker runs)."""
    regs = [ClusterRegistry(zk_connect, timeout=4).start() for _ in range(3)]
    for i, reg in enumerate(regs, 1):
        reg.register_broker(i, "127.0.0.1", 19090 + i, "live")
    yield zk_connect, regs[0]
    for reg in regs:
        reg.stop()


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _plan(doc: dict) -> dict[tuple[str, int], list[int]]:
    return {(e["topic"], e["partition"]): e["replicas"] for e in doc["partitions"]}


def test_generate_current_and_proposed(three, capsys) -> None:
    zk, reg = three
    reg.create_topic("one", 4, replication_factor=1)
    reg.create_topic("two", 2, replication_factor=2)
    capsys.readouterr()
    assert main(["topics", "reassign", "--generate", "--topics", "one,two", "--broker-list", "1,2,3",
                 "--zookeeper", zk]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    current, proposed = json.loads(lines[1]), json.loads(lines[4])
    assert current["version"] == 1 and proposed["version"] == 1
    assert _plan(current) == {**{("one", p): list(r) for p, r in reg.topic("one").replicas.items()},
                              **{("two", p): list(r) for p, r in reg.topic("two").replicas.items()}}
    # Kafka's --generate: a fresh placement with each topic's own replication factor
    assert _plan(proposed) == {**{("one", p): list(r) for p, r in assign_replicas("one", [1, 2, 3], 0, 4, 1).items()},
                               **{("two", p): list(r) for p, r in assign_replicas("two", [1, 2, 3], 0, 2, 2).items()}}


def test_generate_raising_the_replication_factor_keeps_current_replicas_first(three, capsys) -> None:
    zk, reg = three
    info = reg.create_topic("grow", 6, replication_factor=1)
    capsys.readouterr()
    assert main(["topics", "reassign", "--generate", "--topics", "grow", "--broker-list", "1,2,3",
                 "--replication-factor", "3", "--zookeeper", zk]) == 0
    plan = _plan(_last_json(capsys.readouterr().out))
    for p, replicas in plan.items():
        assert replicas[0] == info.replicas[p[1]][0]  # the current leader stays preferred
        assert sorted(replicas) == [1, 2, 3]
    # the same plan from the library and from `alter` (dry run: nothing written)
    assert {k: list(v) for k, v in propose(info, [1, 2, 3], 3).items()} == plan
    assert main(["topics", "alter", "grow", "--replication-factor", "3", "--zookeeper", zk]) == 0
    out = capsys.readouterr().out
    assert "replication factor 1 -> 3" in out and "Dry run" in out
    assert reg.client.exists(REASSIGN_PARTITIONS_PATH) is None
    # lowering keeps the first R current replicas; 2 brokers listed but 3 wanted is refused
    info3 = TopicInfo.from_assignment("t", {0: (3, 1, 2), 1: (2, 3, 1)})
    assert propose(info3, [1, 2, 3], 2) == {("t", 0): (3, 1), ("t", 1): (2, 3)}
    assert propose(info3, [1, 2], 2) == {("t", 0): (1, 2), ("t", 1): (2, 1)}
    with pytest.raises(ReassignmentPlanError, match="larger than the 2"):
        propose(info3, [1, 2], 3)


def test_execute_writes_kafkas_json_and_refuses_a_second(three, capsys, tmp_path: Path) -> None:
    zk, reg = three
    reg.create_topic("mv", 2, replication_factor=1)
    before = reg.topic("mv").replicas
    plan = {"version": 1, "partitions": [{"topic": "mv", "partition": 0, "replicas": [1, 2, 3]},
                                         {"topic": "mv", "partition": 1, "replicas": [3, 2], "log_dirs": ["any", "any"]}]}
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    capsys.readouterr()
    assert main(["topics", "reassign", "--execute", "--reassignment-json-file", str(f), "--zookeeper", zk]) == 0
    out = capsys.readouterr().out
    assert "Successfully started partition reassignment for mv-0,mv-1" in out
    assert _plan(json.loads(out.splitlines()[1])) == {("mv", p): list(r) for p, r in before.items()}  # rollback
    data, _ = reg.client.get(REASSIGN_PARTITIONS_PATH)
    assert json.loads(data) == {"version": 1, "partitions": [
        {"topic": "mv", "partition": 0, "replicas": [1, 2, 3]}, {"topic": "mv", "partition": 1, "replicas": [3, 2]}]}
    assert reg.topic("mv").replicas == before  # the controller's business, not the tool's

    # a second request while one is pending: refused (exit 1), the pending one untouched
    assert main(["topics", "reassign", "--execute", "--reassignment-json-file", str(f), "--zookeeper", zk]) == 1
    err = capsys.readouterr().err
    assert "refused: a partition reassignment is in progress" in err and "mv-0,mv-1" in err
    assert reg.client.get(REASSIGN_PARTITIONS_PATH)[0] == data
    assert main(["topics", "alter", "mv", "--replication-factor", "2", "--execute", "--zookeeper", zk]) == 1
    assert "in progress" in capsys.readouterr().err

    # --verify: in progress while the request is pending; complete once the topic and its ISR say so
    assert main(["topics", "reassign", "--verify", "--reassignment-json-file", str(f), "--zookeeper", zk]) == 1
    out = capsys.readouterr().out
    assert "Reassignment of partition mv-0 is still in progress" in out and "mv-1 is still in progress" in out
    _finish(reg, "mv", {0: (1, 2, 3), 1: (3, 2)}, isr={0: (1, 2, 3), 1: (3,)})
    assert main(["topics", "reassign", "--verify", "--reassignment-json-file", str(f), "--zookeeper", zk]) == 1
    out = capsys.readouterr().out
    assert "Reassignment of partition mv-0 is complete." in out
    assert "mv-1 is still in progress: replicas 3,2, isr 3" in out  # broker 2 not caught up yet
    _finish(reg, "mv", {0: (1, 2, 3), 1: (3, 2)}, isr={0: (1, 2, 3), 1: (3, 2)})
    assert main(["topics", "reassign", "--verify", "--reassignment-json-file", str(f), "--zookeeper", zk]) == 0
    assert capsys.readouterr().out.count("is complete.") == 2


def _finish(reg: ClusterRegistry, topic: str, replicas: dict[int, tuple[int, ...]], isr: dict[int, tuple[int, ...]]
            ) -> None:
    """What the controller leaves behind: the final replica lists and states, the request deleted."""
    reg.client.set(topic_path(topic), TopicInfo.from_assignment(topic, replicas).encode())
    for p, members in isr.items():
        reg.client.set(partition_state_path(topic, p), PartitionState(members[0], 1, members, 1).encode())
    if reg.client.exists(REASSIGN_PARTITIONS_PATH):
        reg.client.delete(REASSIGN_PARTITIONS_PATH)


def test_alter_execute_starts_the_reassignment(three, capsys) -> None:
    zk, reg = three
    info = reg.create_topic("a", 3, replication_factor=1)
    assert main(["topics", "alter", "a", "--replication-factor", "3", "--execute", "--zookeeper", zk]) == 0
    assert "Successfully started partition reassignment for a-0,a-1,a-2" in capsys.readouterr().out
    written = decode_plan(reg.client.get(REASSIGN_PARTITIONS_PATH)[0].decode())
    assert written == propose(info, [1, 2, 3], 3)
    reg.client.delete(REASSIGN_PARTITIONS_PATH)
    assert main(["topics", "alter", "a", "--replication-factor", "1", "--zookeeper", zk]) == 0
    assert "replication factor 1 already" in capsys.readouterr().out
    for argv, fragment in [
        (["a"], "give one of --partitions N and --replication-factor R"),
        (["a", "--partitions", "4", "--replication-factor", "2"], "give one of"),
        (["a", "--replication-factor", "4", "--execute"], "larger than the 3 registered brokers"),
        (["a", "--replication-factor", "0"], "at least 1"),
        (["nope", "--replication-factor", "2"], "does not exist"),
    ]:
        assert main(["topics", "alter", *argv, "--zookeeper", zk]) == 2, argv
        err = capsys.readouterr().err
        assert fragment in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    assert reg.client.exists(REASSIGN_PARTITIONS_PATH) is None


@pytest.mark.parametrize("doc, fragment", [
    ("not json", "is not JSON"),
    ("[1]", "must be an object"),
    ('{"version": 2, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}', "unsupported version 2"),
    ('{"version": 1, "partitions": []}', "non-empty list"),
    ('{"version": 1, "partitions": [{"partition": 0, "replicas": [1]}]}', '"topic" must be'),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', '"partition" of t'),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "non-empty list of broker"),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, "2"]}]}', "list of broker ids"),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "name a broker twice"),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]},'
     ' {"topic": "t", "partition": 0, "replicas": [2]}]}', "t-0 is listed twice"),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}',
     'may only say "any"'),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}',
     "one entry per replica"),
    ('{"version": 1, "partitions": [{"topic": "nope", "partition": 0, "replicas": [1]}]}', "'nope' does not exist"),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 2, "replicas": [1]}]}', "no partition 2"),
    ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 7]}]}',
     "broker(s) 7 are not registered"),
])
def test_execute_refuses_bad_plans(three, capsys, tmp_path: Path, doc: str, fragment: str) -> None:
    zk, reg = three
    reg.create_topic("t", 2, replication_factor=1)
    f = tmp_path / "plan.json"
    f.write_text(doc)
    capsys.readouterr()
    assert main(["topics", "reassign", "--execute", "--reassignment-json-file", str(f), "--zookeeper", zk]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ferry topics reassign: error: ") and fragment in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert reg.client.exists(REASSIGN_PARTITIONS_PATH) is None


def test_reassign_usage_errors(three, capsys, tmp_path: Path) -> None:
    zk, reg = three
    reg.create_topic("t", 1)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text('{"version": 1, "topics": [{"topic": "t"}]}')
    assert main(["topics", "reassign", "--generate", "--topics-to-move-json-file", str(topics_file),
                 "--broker-list", "2,3", "--zookeeper", zk]) == 0
    assert _plan(_last_json(capsys.readouterr().out)) == {("t", 0): list(assign_replicas("t", [2, 3], 0, 1, 1)[0])}
    for argv, fragment in [
        (["--generate", "--broker-list", "1"], "--generate needs the topics"),
        (["--generate", "--topics", "t"], "--broker-list"),
        (["--generate", "--topics", "t", "--broker-list", "1,x"], "broker ids separated by commas"),
        (["--generate", "--topics", "t", "--broker-list", "1,1"], "names a broker twice"),
        (["--generate", "--topics", "t", "--broker-list", "1,9"], "broker(s) 9 that are not registered"),
        (["--generate", "--topics", "nope", "--broker-list", "1"], "'nope' does not exist"),
        (["--generate", "--topics", "t", "--broker-list", "1", "--replication-factor", "2"], "larger than the 1"),
        (["--execute"], "--reassignment-json-file FILE is required"),
        (["--verify", "--reassignment-json-file", str(tmp_path / "missing.json")], "cannot read"),
        (["--execute", "--reassignment-json-file", str(topics_file), "--broker-list", "1"], "only goes with --generate"),
    ]:
        assert main(["topics", "reassign", *argv, "--zookeeper", zk]) == 2, argv
        err = capsys.readouterr().err
        assert fragment in err and err.count("\n") == 1, (argv, err)


def test_elect_leaders_without_a_controller(three, capsys) -> None:
    """Nothing to do: exit 0 without a request; a pending request: refused; nobody takes ours: exit 1."""
    zk, reg = three
    reg.create_topic("e", 3, replication_factor=2)
    capsys.readouterr()
    assert main(["topics", "elect-leaders", "--all-topic-partitions", "--zookeeper", zk]) == 0
    out = capsys.readouterr().out
    assert out.count("already preferred") == 3 and "no election needed" in out
    assert reg.client.exists(PREFERRED_ELECTION_PATH) is None

    # partition 1 led by its second replica
    replicas = reg.topic("e").replicas[1]
    reg.client.set(partition_state_path("e", 1), PartitionState(replicas[1], 1, replicas, 1).encode())
    reg.client.ensure_path("/admin")
    reg.client.create(PREFERRED_ELECTION_PATH, b'{"version":1,"partitions":[{"topic":"x","partition":0}]}')
    assert main(["topics", "elect-leaders", "--topic", "e", "--zookeeper", zk]) == 1
    err = capsys.readouterr().err
    assert "refused: a preferred replica election is pending already" in err and "x-0" in err
    reg.client.delete(PREFERRED_ELECTION_PATH)

    assert main(["topics", "elect-leaders", "--topic", "e", "--partition", "1", "--election-timeout", "1",
                 "--zookeeper", zk]) == 1
    assert "did not take the request within 1 s" in capsys.readouterr().err
    data, _ = reg.client.get(PREFERRED_ELECTION_PATH)
    assert json.loads(data) == {"version": 1, "partitions": [{"topic": "e", "partition": 1}]}

    for argv, fragment in [
        (["--topic", "nope"], "does not exist"),
        (["--topic", "e", "--partition", "9"], "no partition 9"),
        (["--all-topic-partitions", "--partition", "0"], "--partition goes with --topic"),
    ]:
        assert main(["topics", "elect-leaders", *argv, "--zookeeper", zk]) == 2, argv
        err = capsys.readouterr().err
        assert fragment in err and err.count("\n") == 1, (argv, err)

"""Airflow's Kafka provider against a ferry broker: ``ConsumeFromTopicOperator`` (its execute(), as a worker
runs it, with a real Airflow connection from AIRFLOW_CONN_*) reads every message of a two-partition topic as a
member of a consumer group (the brokers' group coordinator), commits at the end, and a second run of the same
group finds nothing new. Issue 18's report was "Reached end of log", success and 0 of 14 messages read."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a broker and two operator runs of 10 s polls each

OUT = "FERRY_TEST_KAFKA_PROVIDER_OUT"


def record(message) -> None:
    """apply_function: one line per message (a file, so it works whether the task runs in-process or not)."""
    with open(os.environ[OUT], "a") as f:
        f.write(json.dumps([message.partition(), message.offset(), message.value().decode()]) + "\n")


def _committed(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    res = admin.list_consumer_group_offsets([req])[group].result(30)
    return sum(max(tp.offset, 0) for tp in res.topic_partitions)


def _run(topic: str, conn_id: str) -> None:
    """The operator's execute() as a worker runs it (dag.test() only runs DAGs of the DAG bundle's folder)."""
    from airflow.providers.apache.kafka.operators.consume import ConsumeFromTopicOperator

    op = ConsumeFromTopicOperator(task_id="consume", topics=[topic], kafka_config_id=conn_id,
                                  apply_function=record, max_messages=100, max_batch_size=100, poll_timeout=10,
                                  commit_cadence="end_of_operator")
    op.execute(context={})


def test_consume_from_topic_operator_reads_every_message_through_a_group(airflow_db, cluster_factory,
                                                                          tmp_path: Path):
    from ferry.client.producer import Producer
    from tests.client.conftest import create_topic

    cluster = cluster_factory(n_brokers=1)
    tag = uuid.uuid4().hex[:8]
    topic, group, conn_id = f"airflow_{tag}", f"airflow-{tag}", f"ferry_kafka_{tag}"
    create_topic(cluster.zk_connect, topic, 2)
    producer = Producer(cluster.bootstrap, None, audit=False)
    values = [f"m{i}" for i in range(14)]
    for i, v in enumerate(values):  # both partitions for sure (librdkafka's sticky partitioner may keep
        producer.send(topic, v.encode(), partition=i % 2)  # a quick burst of unkeyed messages on one)
    assert producer.close(30) == 0

    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 10000}})
    out = tmp_path / "consumed.jsonl"
    os.environ[OUT] = str(out)
    try:
        _run(topic, conn_id)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted(v for _p, _o, v in rows) == sorted(values)  # every message, once
        assert {p for p, _o, _v in rows} == {0, 1}
        assert _committed(cluster.bootstrap, group, topic) == 14

        out.unlink()
        _run(topic, conn_id)  # the group resumes after its commits
        assert not out.exists() or out.read_text() == ""
    finally:
        os.environ.pop(f"AIRFLOW_CONN_{conn_id.upper()}", None)
        os.environ.pop(OUT, None)

"""`ferry produce/consume --value-format avro` as a user runs them: JSON lines in, registry-framed Avro on the
wire, JSON out; a line that does not fit is refused by field with nothing sent."""

from __future__ import annotations

import json

import pytest

from ferry.client.simple_consumer import SimpleConsumer
from ferry.schemas.registry import SchemaRegistry
from ferry.schemas.wire import schema_id_of
from tests.client.conftest import create_topic
from tests.client.tools.test_cli import ferry

SCHEMA = {"type": "record", "name": "Click", "fields": [
    {"name": "user", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "ref", "type": ["null", "string"], "default": None}]}


def _count(bootstrap: str, topic: str) -> int:
    with SimpleConsumer(bootstrap) as c:
        return sum(1 for _ in c.read(topic, "earliest", until_end=True))


@pytest.mark.slow  # a broker and four CLI processes
def test_avro_lines_round_trip_and_a_bad_line_sends_nothing(live):
    zk = live.zk_connect
    create_topic(zk, "clicks", 1)
    with SchemaRegistry(zk) as reg:
        schema_id = reg.register("clicks-value", SCHEMA)

    good = [{"user": 1, "page": "feed", "ref": None}, {"user": 2, "page": "jobs", "ref": "x"}]
    bad = good + [{"user": "three", "page": "feed"}]
    r = ferry("produce", "--topic", "clicks", "--zookeeper", zk, "--value-format", "avro",
              "--schema-subject", "clicks-value", stdin="".join(json.dumps(x) + "\n" for x in bad))
    assert r.returncode == 2
    assert "line 3" in r.stderr and "user" in r.stderr and "nothing was sent" in r.stderr
    assert _count(live.bootstrap, "clicks") == 0

    r = ferry("produce", "--topic", "clicks", "--zookeeper", zk, "--value-format", "avro",
              "--schema-subject", "clicks-value", stdin="not json\n")
    assert r.returncode == 2 and "line 1 is not JSON" in r.stderr

    r = ferry("produce", "--topic", "clicks", "--zookeeper", zk, "--value-format", "avro",
              "--schema-subject", "clicks-value", stdin="".join(json.dumps(x) + "\n" for x in good))
    assert r.returncode == 0, r.stderr
    with SimpleConsumer(live.bootstrap) as c:
        values = [m.value for m in c.read("clicks", "earliest", until_end=True)]
    assert [schema_id_of(v) for v in values] == [schema_id, schema_id]

    r = ferry("consume", "--topic", "clicks", "--zookeeper", zk, "--from-beginning", "--timeout", "3",
              "--value-format", "avro")
    assert r.returncode == 0, r.stderr
    assert [json.loads(line) for line in r.stdout.splitlines()] == good

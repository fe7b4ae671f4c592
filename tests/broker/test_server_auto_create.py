"""--auto-create-topics: a Metadata request naming an unknown topic creates it (off by default)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import METADATA, WireClient, build_batch, metadata, produce  # noqa: E402

from ferry.wire.protocol.primitives import Writer  # noqa: E402


def _metadata_no_auto(c: WireClient, topic: str) -> int:
    body = Writer().array_len(1).string(topic).boolean(False).boolean(False).boolean(False).buf
    r = c.request(METADATA, 8, bytes(body))
    r.int32()
    for _ in range(r.int32()):
        r.int32(), r.string(), r.int32(), r.nullable_string()
    r.nullable_string(), r.int32()
    assert r.int32() == 1
    return r.int16()


def test_auto_create_on_metadata(cluster_factory):
    cluster = cluster_factory(1, extra_args=("--auto-create-topics", "--num-partitions", "2"))
    (broker,) = cluster.brokers.values()
    with WireClient(broker.bootstrap) as c:
        assert _metadata_no_auto(c, "not-asked") == 3  # allow_auto_topic_creation=false is honoured
        deadline = time.monotonic() + 10
        while True:
            err, parts = metadata(c, ["auto-topic"], version=3)["topics"]["auto-topic"]  # v3: always allowed
            if err == 0 and len(parts) == 2:
                break
            assert err in (0, 5), err  # LEADER_NOT_AVAILABLE while it is being created
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert produce(c, "auto-topic", 1, build_batch([b"hello"])).error == 0
        assert metadata(c, ["not-asked"])["topics"]["not-asked"][0] == 3  # v8 request sent allow=False


def test_auto_create_is_off_by_default(cluster_factory):
    cluster = cluster_factory(1)
    (broker,) = cluster.brokers.values()
    with WireClient(broker.bootstrap) as c:
        assert metadata(c, ["nope"], version=3)["topics"]["nope"][0] == 3
        time.sleep(0.2)
        assert metadata(c, None)["topics"] == {}  # nothing created, not even `_audit` (audit.topic.partitions 0)


def test_the_audit_topic_is_created_at_start_up_when_asked(cluster_factory):
    cluster = cluster_factory(2, extra_args=("--audit-topic-partitions", "3"))
    with WireClient(next(iter(cluster.brokers.values())).bootstrap) as c:
        err, parts = metadata(c, ["_audit"])["topics"]["_audit"]
        assert err == 0 and sorted(parts) == [0, 1, 2]

"""Topic ids (KIP-516) in the registry against a real ZooKeeper: drawn once at creation, kept by every rewrite of
the topic's znode (growth, config change), new for a re-created topic; a topic written without one gets one
derived from its name (stable across readers)."""

from __future__ import annotations

import json

from ferry.zk import ClusterRegistry
from ferry.zk.topic_config import alter_topic_config
from ferry.zk.znodes import TopicInfo, topic_path


def test_topic_id_kept_by_rewrites_and_new_on_recreate(zk_connect: str) -> None:
    r = ClusterRegistry(zk_connect, timeout=4.0).start()
    try:
        r.register_broker(1, "127.0.0.1", 9092)
        first = r.create_topic("ids", 2).topic_id
        assert len(first) == 22
        r.add_partitions("ids", 4)
        alter_topic_config(r.client, "ids", lambda c: {**c, "retention.ms": "1000"})
        stored = TopicInfo.decode("ids", r.client.get(topic_path("ids"))[0])
        assert (stored.topic_id, stored.partition_count, stored.config) == (first, 4, {"retention.ms": "1000"})
        r.delete_topic("ids")
        assert r.create_topic("ids", 1).topic_id not in ("", first)
        legacy = json.dumps({"version": 1, "partitions": {"0": [1]}, "config": {}}).encode()
        a, b = TopicInfo.decode("old", legacy), TopicInfo.decode("old", legacy)
        assert a.topic_id == "" and a.topic_uuid == b.topic_uuid and len(a.topic_uuid) == 16
        assert a.topic_uuid != TopicInfo.decode("older", legacy).topic_uuid
    finally:
        r.stop()

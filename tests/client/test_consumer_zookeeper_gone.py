"""A ConsumerConnector whose ZooKeeper has gone away still shuts down in bounded time: it does not wait for
a connection that will not come to commit or release (its nodes are ephemeral and go with the session)."""

from __future__ import annotations

import time

from ferry.client.consumer_connector import ConsumerConnector
from ferry.embedded import ZooKeeperServer
from tests.client.group_helpers import wait_until, write_topic, zk_client


def test_shutdown_without_zookeeper_is_bounded(tmp_path):
    zk = ZooKeeperServer(data_dir=tmp_path / "zk")
    zk.start()
    try:
        connect = f"{zk.connect}/gone"
        admin = zk_client(connect)
        write_topic(admin, "events", 4)
        admin.stop()
        admin.close()
        c = ConsumerConnector("g", connect, consumer_id="c0", zk_session_timeout_s=4.0, rebalance_backoff_s=0.2)
        c.create_message_streams({"events": 1})
        wait_until(lambda: len(c.owned_partitions()) == 4, what="all four partitions owned")
        zk.stop()
        time.sleep(1.0)
        t0 = time.monotonic()
        c.shutdown(timeout=5)
        took = time.monotonic() - t0
        assert took < 25, f"shutdown took {took:.1f}s"
        assert c.owned_partitions() == set()
    finally:
        zk.stop()

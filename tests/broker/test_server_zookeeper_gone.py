"""A broker whose ZooKeeper has gone away still shuts down on SIGTERM, in bounded time, with its logs
flushed: the shutdown does not wait for a connection that will not come (its registration is ephemeral and
goes with the session)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import WireClient, build_batch, create_topic, leaders, produce  # noqa: E402

from ferry.embedded import BrokerProcess, ZooKeeperServer  # noqa: E402


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_sigterm_without_zookeeper_exits_cleanly_and_keeps_the_data(tmp_path):
    zk = ZooKeeperServer(data_dir=tmp_path / "zk")
    zk.start()
    broker = BrokerProcess(1, tmp_path / "broker", f"{zk.connect}/gone", "live")
    try:
        broker.start(timeout=60)
        with WireClient(broker.bootstrap) as c:
            create_topic(c, "kept", 1)
            leaders(c, "kept", 1)
            assert produce(c, "kept", 0, build_batch([b"a", b"b", b"c"]), acks=1).error == 0
        zk.stop()
        time.sleep(1.0)
        t0 = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        rc = broker.proc.wait(timeout=40)
        took = time.monotonic() - t0
    finally:
        broker.stop()
        zk.stop()
    assert rc == 0
    assert took < 30, f"shutdown took {took:.1f}s"
    log = broker.log_file.read_text(errors="replace")
    assert "logs flushed and closed" in log
    segment = next((tmp_path / "broker").glob("kept-0/*.log"))
    assert segment.stat().st_size > 0  # the acknowledged batch is on disk

"""kill -9 the broker (transaction coordinator and partition leader) in the middle of a transaction, restart it:
the coordinator's state comes back from ZooKeeper, the partition's open transaction and its aborted
transactions from the log, the open transaction is aborted when its timeout passes, and a read_committed
consumer never sees any of its data, nor the data of the transaction aborted before the crash."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import WireClient, create_topic, leaders, start_brokers  # noqa: E402
from test_transactions import TXN_OVERRIDES, consume_all, produce_txn, txn_producer, values  # noqa: E402

from ferry.wire.protocol import list_offsets as lo  # noqa: E402

TIMEOUT_MS = 8000


def _offsets(addr: str, topic: str, read_committed: bool) -> list[int]:
    with WireClient(addr) as c:
        key, version, bufs = lo.encode_request([(topic, [(p, lo.LATEST_TIMESTAMP) for p in range(2)])],
                                               read_committed=read_committed)
        r = c.request(key, version, b"".join(bytes(b) for b in bufs))
        return [res.offset for res in lo.parse_response(r.buf[r.pos:])[topic]]


@pytest.mark.slow  # a restart and a transaction timeout: ~20 s
def test_kill_9_mid_transaction_then_restart_never_shows_partial_data(zk_server, tmp_path):
    _zk, (broker,) = start_brokers(zk_server.connect, tmp_path, 1,
                                   extra_args=(*TXN_OVERRIDES, "--zk-session-timeout-ms", "4000"))
    cluster = [broker]
    try:
        topic = "txn-crash"
        with WireClient(broker.bootstrap) as c:
            assert create_topic(c, topic, 2)[0] == 0
            leaders(c, topic, 2)
        p = txn_producer(cluster, "crash-txn", **{"transaction.timeout.ms": TIMEOUT_MS})
        committed = produce_txn(p, topic, "c", 40)
        aborted = produce_txn(p, topic, "x", 40, commit=False)
        p.begin_transaction()
        open_values = set()
        for i in range(40):
            v = f"open-{i}".encode()
            p.produce(topic, v, partition=i % 2)
            open_values.add(v)
        assert p.flush(10) == 0  # in the log, undecided
        time.sleep(0.2)  # flushed to disk by the broker's 20 ms flush interval

        broker.kill()  # SIGKILL: no producer-state snapshot, no clean shutdown
        p.purge()
        del p
        broker.start()  # recovery rebuilds the open and the aborted transactions from the log

        # right after the restart: the open transaction holds the LSO back (unless its timeout already
        # passed while the restarted broker waited for its old ZooKeeper session), the aborted one stays hidden
        open_first, end = 20 + 1 + 20 + 1, 20 + 1 + 20 + 1 + 20 + 1  # per partition: c, marker, x, marker, open
        assert _offsets(broker.bootstrap, topic, True) in ([open_first] * 2, [end] * 2)
        got = consume_all(cluster, topic, "read_committed", idle_s=1.0)
        assert values(got) == committed, "read_committed saw undecided or aborted data after the restart"
        assert _offsets(broker.bootstrap, topic, False) in ([end - 1] * 2, [end] * 2)  # the open batches are there
        # the coordinator, back from ZooKeeper, aborts the transaction once its timeout passed
        deadline = time.monotonic() + TIMEOUT_MS / 1000 + 15
        while (lso := _offsets(broker.bootstrap, topic, True)) != [end] * 2:  # LSO = HW past the abort markers
            assert time.monotonic() < deadline, f"the open transaction was never aborted: LSO {lso}"
            time.sleep(0.2)
        after = produce_txn(txn_producer(cluster, "crash-txn"), topic, "after", 20)  # the same id works again
        got = consume_all(cluster, topic, "read_committed")
        assert values(got) == committed | after
        assert not values(got) & (open_values | aborted)
        assert values(consume_all(cluster, topic, "read_uncommitted")) == committed | aborted | open_values | after
    finally:
        broker.stop()


@pytest.mark.slow  # a broker's ZooKeeper session must expire, then a transaction timeout: ~25 s
def test_coordinator_failover_aborts_the_open_transaction_on_the_survivor(zk_server, tmp_path):
    """The transaction's coordinator (broker 1) dies for good; its partitions live on broker 2. Broker 2 takes
    the transactional id over from ZooKeeper, aborts the open transaction at its timeout (markers on its own
    partitions) and serves the id's next producer."""
    from ferry.broker.server.group_coordinator import coordinator_for
    from ferry.zk.cluster_registry import ClusterRegistry

    zk, brokers = start_brokers(zk_server.connect, tmp_path, 2,
                                extra_args=(*TXN_OVERRIDES, "--zk-session-timeout-ms", "4000"))
    b1, b2 = brokers
    try:
        txn_id = next(f"failover-{i}" for i in range(100) if coordinator_for(f"failover-{i}", [1, 2]) == 1)
        topic = "txn-failover"
        with ClusterRegistry(zk) as reg:
            reg.create_topic_with_assignment(topic, {0: [2], 1: [2]})
        with WireClient(b2.bootstrap) as c:
            leaders(c, topic, 2)
        p = txn_producer([b2], txn_id, **{"transaction.timeout.ms": TIMEOUT_MS})
        committed = produce_txn(p, topic, "c", 20)
        p.begin_transaction()
        for i in range(20):
            p.produce(topic, f"open-{i}".encode(), partition=i % 2)
        assert p.flush(10) == 0
        b1.kill()  # the coordinator is gone for good
        p.purge()
        del p
        deadline = time.monotonic() + TIMEOUT_MS / 1000 + 30
        while (lso := _offsets(b2.bootstrap, topic, True)) != [10 + 1 + 10 + 1] * 2:
            assert time.monotonic() < deadline, f"the open transaction was never aborted: LSO {lso}"
            time.sleep(0.3)
        after = produce_txn(txn_producer([b2], txn_id), topic, "after", 10)
        got = consume_all([b2], topic, "read_committed")
        assert values(got) == committed | after
    finally:
        for b in brokers:
            b.stop()

"""A/B of two checkouts: ferry's message-set producer (batch 50, 200-byte messages, acks=1) and consumer
against one local broker (ZooKeeper + broker on 127.0.0.1), best of 3 rounds. Run it alternately with each
checkout's own interpreter, in one session, and compare µs/message:

    <old checkout>/.venv/bin/python bench/ab_message_sets.py old 500000   # before the ferry. namespace
    .venv/bin/python bench/ab_message_sets.py new 500000
"""
import sys
import tempfile
import time
from pathlib import Path

from ferry.embedded import BrokerProcess, ZooKeeperServer

which, n = sys.argv[1], int(sys.argv[2])

if which == "old":
    from broker.client.message_set_consumer import MessageSetConsumer
    from broker.client.message_set_producer import MessageSetProducer
    from broker.zk.cluster_registry import ClusterRegistry
else:
    from ferry.client.message_set_consumer import MessageSetConsumer
    from ferry.client.message_set_producer import MessageSetProducer
    from ferry.zk.cluster_registry import ClusterRegistry
tmp = Path(tempfile.mkdtemp())
zk = ZooKeeperServer(data_dir=tmp / "zk").start()
connect = f"{zk.connect}/ab"
b = BrokerProcess(1, tmp / "b1", connect, "live").start()
with ClusterRegistry(connect) as reg:
    reg.create_topic("t", 1)
time.sleep(1)
payload = [b"x" * 200] * 50
best_p = best_c = 0
for rnd in range(3):
    p = MessageSetProducer(b.bootstrap, acks=1)
    t0 = time.perf_counter()
    for _ in range(n // 50):
        p.send("t", 0, payload)
    p.flush()
    dt_p = time.perf_counter() - t0
    p.close()
    total = (rnd + 1) * n
    c = MessageSetConsumer(b.bootstrap, "t", 0, offset=rnd * n, max_bytes=1 << 20, check_crcs=False, stop_at_end=True)
    got = 0
    t0 = time.perf_counter()
    for ms in c.message_sets():
        got += len(ms.values())
        if got >= n:
            break
    dt_c = time.perf_counter() - t0
    c.close()
    best_p = max(best_p, n / dt_p)
    best_c = max(best_c, got / dt_c)
print(f"{which}: produce {best_p/1e6:.2f} M msg/s ({1e6/best_p:.2f} us/msg), consume {best_c/1e6:.2f} M msg/s ({1e6/best_c:.3f} us/msg)")
b.stop()
zk.stop()

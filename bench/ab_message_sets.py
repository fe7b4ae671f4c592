"""A/B of two checkouts: ferry's message-set producer (batch 50, 200-byte messages, acks=1) and consumer
against one local broker (ZooKeeper + broker on 127.0.0.1), best of 3 rounds. Run it alternately with each
checkout on PYTHONPATH (a checkout's ``ferry/`` folder needs links to its package folders: ``for d in wire
zk broker client audit schemas mirror loaders; do ln -s ../$d ferry/$d; done``), in one session, and
compare µs/message:

    PYTHONPATH=<before checkout> .venv/bin/python bench/ab_message_sets.py before 500000
    PYTHONPATH=<after checkout> .venv/bin/python bench/ab_message_sets.py after 500000

Besides wall-clock time per message it prints the client process's own CPU time per message (user + system,
the broker not included): on shared cores that moves far less with other load than wall-clock time does,
and it is where a change of the client shows. The label ``old`` imports the layout before the ferry.
namespace (``broker.client``).
"""
import shutil
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


def run(bootstrap: str) -> None:
    """Best of 3 rounds of producing n messages, then consuming them (each round its own n offsets)."""
    payload = [b"x" * 200] * 50
    best_p = best_c = 0.0
    cpu_p = cpu_c = float("inf")  # client CPU seconds per message, best round
    for rnd in range(3):
        p = MessageSetProducer(bootstrap, acks=1)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n // 50):
            p.send("t", 0, payload)
        p.flush()
        dt_p = time.perf_counter() - t0
        cpu_p = min(cpu_p, (time.process_time() - c0) / n)
        p.close()
        c = MessageSetConsumer(bootstrap, "t", 0, offset=rnd * n, max_bytes=1 << 20, check_crcs=False,
                               stop_at_end=True)
        got = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for ms in c.message_sets():
            got += len(ms.values())
            if got >= n:
                break
        dt_c = time.perf_counter() - t0
        cpu_c = min(cpu_c, (time.process_time() - c0) / got)
        c.close()
        best_p = max(best_p, n / dt_p)
        best_c = max(best_c, got / dt_c)
    print(f"{which}: produce {best_p/1e6:.2f} M msg/s ({1e6/best_p:.2f} us/msg, client CPU {cpu_p*1e6:.3f} us/msg), "
          f"consume {best_c/1e6:.2f} M msg/s ({1e6/best_c:.3f} us/msg, client CPU {cpu_c*1e6:.3f} us/msg)")


tmp = Path(tempfile.mkdtemp())  # 3 x n messages of log (~300 MB for 500,000): removed at the end
zk = ZooKeeperServer(data_dir=tmp / "zk").start()
try:
    connect = f"{zk.connect}/ab"
    b = BrokerProcess(1, tmp / "b1", connect, "live").start()
    try:
        with ClusterRegistry(connect) as reg:
            reg.create_topic("t", 1)
        time.sleep(1)
        run(b.bootstrap)
    finally:
        b.stop()
finally:
    zk.stop()
    shutil.rmtree(tmp, ignore_errors=True)

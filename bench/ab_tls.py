"""What TLS costs on the fetch and produce paths: one local broker with a PLAINTEXT and an SSL listener (a CA and
a server certificate made with openssl), the same topic read with confluent-kafka over each, best of 3 rounds
alternating. Plaintext fetches go out with sendfile; TLS fetches read the segment and encrypt
(broker/server/tls_send.py). Prints msg/s and CPU µs per message, broker and client:

    .venv/bin/python bench/ab_tls.py 1000000

``plaintext`` as second argument runs the PLAINTEXT rows only, with no SSL listener: the A/B of the plaintext
path against a checkout from before the listeners (put it first on PYTHONPATH and run from outside the worktree,
see ab_message_sets.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from ferry.embedded import BrokerProcess, ZooKeeperServer, free_port
from ferry.zk.cluster_registry import ClusterRegistry

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
PLAINTEXT_ONLY = len(sys.argv) > 2 and sys.argv[2] == "plaintext"
TICK = os.sysconf("SC_CLK_TCK")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificates(d: Path) -> tuple[Path, Path]:
    """(keystore: server cert + key, CA certificate)."""
    d.mkdir()
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=bench CA", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "s.key", "-out", "s.csr", "-subj", "/CN=broker", cwd=d)
    openssl("x509", "-req", "-in", "s.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
            "-extfile", "san.ext", "-out", "s.pem", cwd=d)
    (d / "keystore.pem").write_text((d / "s.pem").read_text() + (d / "s.key").read_text())
    return d / "keystore.pem", d / "ca.pem"


def broker_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def consume(conf: dict, pid: int) -> tuple[float, float, float]:
    """(msg/s, broker µs/msg, client µs/msg) reading the N messages from offset 0."""
    c = Consumer({**conf, "group.id": "ab", "enable.auto.commit": False, "max.partition.fetch.bytes": 1 << 20,
                  "fetch.max.bytes": 1 << 24, "queued.max.messages.kbytes": 65536})
    c.assign([TopicPartition("t", 0, 0)])
    got = 0
    t0, c0, b0 = time.perf_counter(), time.process_time(), broker_cpu(pid)
    while got < N:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
    dt, dc, db = time.perf_counter() - t0, time.process_time() - c0, broker_cpu(pid) - b0
    c.close()
    return N / dt, db / N * 1e6, dc / N * 1e6


def produce(conf: dict, pid: int, topic: str) -> tuple[float, float, float]:
    p = Producer({**conf, "linger.ms": 5, "batch.num.messages": 10_000, "acks": 1,
                  "queue.buffering.max.messages": 1_000_000})
    payload = os.urandom(200)
    t0, c0, b0 = time.perf_counter(), time.process_time(), broker_cpu(pid)
    for _ in range(N):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    dt, dc, db = time.perf_counter() - t0, time.process_time() - c0, broker_cpu(pid) - b0
    return N / dt, db / N * 1e6, dc / N * 1e6


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    keystore, ca = certificates(tmp / "certs")
    props = tmp / "ssl.properties"
    props.write_text(f"ssl.keystore.location={keystore}\nssl.truststore.location={ca}\n")
    ssl_port = free_port("127.0.0.1")
    zk = ZooKeeperServer(data_dir=tmp / "zk").start()
    try:
        connect = f"{zk.connect}/ab"
        extra = () if PLAINTEXT_ONLY else ("--config", str(props), "--listener", f"SSL://127.0.0.1:{ssl_port}")
        b = BrokerProcess(1, tmp / "b1", connect, "live", extra_args=extra).start()
        try:
            with ClusterRegistry(connect) as reg:
                for t in ("t", "p-PLAINTEXT", "p-SSL"):
                    reg.create_topic(t, 1)
            time.sleep(1)
            confs = {"PLAINTEXT": {"bootstrap.servers": b.bootstrap},
                     "SSL": {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                             "ssl.ca.location": str(ca)}}
            if PLAINTEXT_ONLY:
                del confs["SSL"]
            produce(confs["PLAINTEXT"], b.pid, "t")  # the topic every fetch round reads
            best: dict[str, tuple[float, float, float]] = {}
            for _ in range(3):
                for name, conf in confs.items():
                    for what, r in (("fetch", consume(conf, b.pid)), ("produce", produce(conf, b.pid, f"p-{name}"))):
                        key = f"{what} {name}"
                        old = best.get(key)
                        best[key] = r if old is None else (max(old[0], r[0]), min(old[1], r[1]), min(old[2], r[2]))
            print(f"{N} messages of 200 bytes, confluent-kafka, best of 3 rounds")
            print("| path | msg/s | broker CPU µs/msg | client CPU µs/msg |")
            print("| --- | ---: | ---: | ---: |")
            for key, (rate, bcpu, ccpu) in best.items():
                print(f"| {key} | {rate:,.0f} | {bcpu:.2f} | {ccpu:.2f} |")
        finally:
            b.stop()
    finally:
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

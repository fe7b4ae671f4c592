"""A consumer-group member run as its own process (so a test can kill -9 it).

Usage: python group_member.py ZK GROUP CONSUMER_ID TOPIC STREAMS OUTFILE
Appends "partition offset value" per consumed message to OUTFILE (flushed per line, so the lines survive a
SIGKILL); SIGTERM = clean shutdown (commit, release). Prints "ready" when the first rebalance is done.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading


def main() -> int:
    zk, group, consumer_id, topic, streams, outfile = sys.argv[1:7]
    from ferry.client.consumer_connector import ConsumerConnector

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    connector = ConsumerConnector(group, zk, consumer_id=consumer_id, zk_session_timeout_s=4.0,
                                  auto_commit_interval_s=0.5, rebalance_backoff_s=0.3, consumer_timeout_s=0.2)
    out = open(outfile, "a", buffering=1)  # noqa: SIM115 - lines must reach the file one by one
    lock = threading.Lock()

    def drain(stream) -> None:
        while not stop.is_set():
            for m in stream:
                with lock:
                    out.write(f"{m.partition} {m.offset} {m.value.decode()}\n")
                if stop.is_set():
                    break

    threads = [threading.Thread(target=drain, args=(s,), daemon=True)
               for s in connector.create_message_streams({topic: int(streams)})[topic]]
    for t in threads:
        t.start()
    print("ready", flush=True)
    stop.wait()
    for t in threads:
        t.join(5)
    connector.shutdown()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

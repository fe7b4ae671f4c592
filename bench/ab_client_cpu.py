"""The message-set producer's own CPU per request, against a fake broker in another process that answers
Metadata and Produce from canned bytes (no log, no fsync): what a change of the client's connection code
costs, without the broker's share and most of the noise of shared cores. Pre-built 50-message sets, acks=1,
best of 5 rounds. Run it alternately with each checkout on PYTHONPATH (see ab_message_sets.py):

    PYTHONPATH=<checkout> .venv/bin/python bench/ab_client_cpu.py before 50000
"""
import multiprocessing
import socket
import struct
import sys
import time

from ferry.wire.protocol import metadata, produce
from ferry.wire.record.message_set_builder import MessageSetBuilder


def fake_broker(listener: socket.socket) -> None:
    """Answer every request on every connection, in order, as cheaply as Python can."""
    port = listener.getsockname()[1]
    md = metadata.encode_response(8, [metadata.BrokerMetadata(1, "127.0.0.1", port)], "c", 1, [
        metadata.TopicMetadata(0, "t", [metadata.PartitionMetadata(0, 0, 1, [1], [1])])])
    ack = produce.encode_response(8, [("t", [produce.PartitionProduceResult(0, 0, 0)])])
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        while chunk := conn.recv(1 << 20):
            buf += chunk
            out, pos = [], 0
            while len(buf) - pos >= 4 and len(buf) - pos - 4 >= (size := struct.unpack_from(">i", buf, pos)[0]):
                key, _, corr = struct.unpack_from(">hhi", buf, pos + 4)
                body = md if key == 3 else ack
                out.append(struct.pack(">ii", 4 + len(body), corr) + body)
                pos += 4 + size
            del buf[:pos]
            if out:
                conn.sendall(b"".join(out))
        conn.close()


if __name__ == "__main__":
    from ferry.client.message_set_producer import MessageSetProducer

    which, n = sys.argv[1], int(sys.argv[2])
    listener = socket.create_server(("127.0.0.1", 0))
    broker = multiprocessing.get_context("fork").Process(target=fake_broker, args=(listener,), daemon=True)
    broker.start()
    records = MessageSetBuilder().build([b"x" * 200] * 50)
    best = float("inf")
    for _ in range(5):
        p = MessageSetProducer(f"127.0.0.1:{listener.getsockname()[1]}", acks=1)
        p.send_and_wait("t", 0, records)
        c0 = time.process_time()
        for _ in range(n):
            p.send("t", 0, records)
        p.flush()
        best = min(best, (time.process_time() - c0) / n)
        p.close()
    broker.terminate()
    print(f"{which}: client CPU {best * 1e6:.2f} us per 50-message request ({best * 1e6 / 50:.3f} us/msg)")

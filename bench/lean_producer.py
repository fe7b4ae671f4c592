"""The benchmark's message-set producer: ferry's `MessageSetProducer` (the paper's
`producer.send(topic, partition, messageSet)`), driven as fast as it goes.

The library class does per request only: encode the message set (`MessageSetBuilder`, equal-size fast
path), pack a precomputed Produce v8 template with the correlation id and sizes, one `sendmsg`; answers
are read in bulk and checked frame by frame. At most `in_flight` requests are unanswered.
"""

from __future__ import annotations

import time

import window
from common import MESSAGE_SIZE, payloads, rate

from ferry.client.errors import ClientError
from ferry.client.message_set_producer import MessageSetProducer
from ferry.wire.record.message_set_builder import MessageSetBuilder


def produce(bootstrap: str, topic: str, partition: int, messages: int, batch: int, time_limit_s: float,
            acks: int = 1, in_flight: int = 128) -> dict:
    """Send `messages` in sets of `batch`, at most `in_flight` requests unanswered."""
    from ferry_client import wait_high_watermark, watermarks

    start_hw = watermarks(bootstrap, topic)[1]
    builder = MessageSetBuilder(MESSAGE_SIZE)
    values = payloads()
    pool = len(values)
    doubled = values + values
    errors: list[str] = []
    sent = 0
    seconds = 0.0
    p = MessageSetProducer(bootstrap, acks=acks, max_in_flight=in_flight, client_id="bench-message-sets")
    try:
        p.connect(topic, partition)  # leader lookup and connection: not timed
        deadline = time.monotonic() + time_limit_s
        window.begin()
        t0 = time.perf_counter()
        send, build = p.send, builder.build
        while sent < messages:
            n = min(batch, messages - sent)
            i = sent % pool
            send(topic, partition, build(doubled[i:i + n]))
            sent += n
            if not sent % (64 * batch) and time.monotonic() > deadline:
                errors.append(f"time limit {time_limit_s}s reached")
                break
        p.flush()
        seconds = time.perf_counter() - t0
        window.end()
    except ClientError as e:  # ProduceError (a refused set) or BrokerUnavailableError
        errors.append(f"{type(e).__name__}: {e}")
        seconds = seconds or time.perf_counter() - t0
    finally:
        p.close()
    hw = wait_high_watermark(bootstrap, topic, start_hw + sent, timeout_s=10)
    stored = hw - start_hw
    return {"messages": stored, "sent": sent, "seconds": seconds, "msgs_per_s": rate(stored, seconds),
            "ok": stored == messages and not errors, "errors": errors,
            "client": "message sets: ferry MessageSetProducer (RecordBatch v2 built in Python by "
                      "MessageSetBuilder, pipelined Produce v8)",
            "settings": f"acks={acks}, {batch} messages per request, up to {in_flight} requests in flight"}

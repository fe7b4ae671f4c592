"""The benchmark's message-set consumer: ferry's `MessageSetConsumer` (pipelined Fetch v4 for one
partition), driven as fast as it goes.

The library class sends the next fetch *before* it hands the current set to the caller (the next offset
comes from the batch headers alone), so the broker serves fetch k+1 while the client parses answer k.
Records are parsed by aiokafka's Cython RecordBatch v2 reader; every record's value is materialised as
`bytes` (`MessageSet.values()`) and its length summed. CRCs are not verified here (as librdkafka's
`check.crcs=false` in the confluent-kafka consumer row); the library checks them by default.
"""

from __future__ import annotations

import struct
import time

import window
from common import MESSAGE_SIZE, rate

from ferry.client.errors import ClientError
from ferry.client.message_set_consumer import MessageSetConsumer

_I32 = struct.Struct(">i")
_OFFSET_BATCH_HEAD = 12


def consume(bootstrap: str, topic: str, partition: int, messages: int, time_limit_s: float,
            max_bytes: int = 204_800, check_crcs: bool = False) -> dict:
    """Read `messages` from the partition's log start; count them and their value bytes."""
    errors: list[str] = []
    got = nbytes = fetches = batches = 0
    t0 = None
    seconds = 0.0
    start = -1
    c = MessageSetConsumer(bootstrap, topic, partition, "earliest", max_bytes, check_crcs=check_crcs,
                           idle_timeout_s=time_limit_s, client_id="bench-message-sets")
    try:
        start = c.position
        deadline = time.monotonic() + time_limit_s
        for s in c.message_sets():
            if t0 is None:  # the first records mark the start: setup and metadata are not consumption
                window.begin()
                t0 = time.perf_counter()
            fetches += 1
            batches += s.batches
            values = s.values()
            got += len(values)
            nbytes += sum(map(len, values))
            if got >= messages:
                break
            if time.monotonic() > deadline:
                errors.append(f"time limit {time_limit_s}s reached at offset {c.position}")
                break
        else:
            errors.append(f"no new records for {time_limit_s}s at offset {c.position}")
        seconds = time.perf_counter() - t0 if t0 else 0.0
        window.end()
        if got != c.position - start and not errors:
            errors.append(f"parsed {got} records but the batch headers span {c.position - start} offsets")
    except (ClientError, OSError) as e:
        errors.append(f"{type(e).__name__}: {e}")
    finally:
        c.close()
    return {"messages": got, "seconds": seconds, "msgs_per_s": rate(got, seconds), "bytes": nbytes,
            "fetches": fetches, "batches": batches,
            "ok": got == messages and nbytes == messages * MESSAGE_SIZE and not errors, "errors": errors[:5],
            "client": "message sets: ferry MessageSetConsumer (pipelined Fetch v4) + aiokafka's C RecordBatch "
                      "reader",
            "settings": f"from the log start, max_bytes={max_bytes} per fetch, next fetch sent before parsing, "
                        f"CRCs {'checked' if check_crcs else 'not checked (as check.crcs=false)'}"}


def census(bootstrap: str, topic: str, partition: int, time_limit_s: float = 60.0,
           max_bytes: int = 4 << 20) -> dict:
    """How the partition's log is batched, from the batch headers only: batches, records, codecs.

    Storage overhead per message depends on records per batch (61 header bytes per batch), so the
    storage rows report what the producer really wrote, not what it was asked for.
    """
    batches = nbytes = 0
    codecs: dict[int, int] = {}
    with MessageSetConsumer(bootstrap, topic, partition, "earliest", max_bytes, max_wait_ms=0, check_crcs=False,
                            stop_at_end=True, idle_timeout_s=time_limit_s) as c:
        start = c.position
        deadline = time.monotonic() + time_limit_s
        for s in c.message_sets():
            data, pos = s.data, 0
            while pos < len(data):  # attributes (codec in the low 3 bits) at +21
                length = _I32.unpack_from(data, pos + 8)[0]
                codec = data[pos + 22] & 7
                codecs[codec] = codecs.get(codec, 0) + 1
                pos += _OFFSET_BATCH_HEAD + length
            batches += s.batches
            nbytes += len(data)
            if time.monotonic() > deadline:
                break
        offset = c.position
    names = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    records = offset - start
    return {"ok": True, "messages": records, "batches": batches, "records": records, "log_bytes": nbytes,
            "records_per_batch": round(records / batches, 1) if batches else None,
            "log_bytes_per_record": round(nbytes / records, 2) if records else None,
            "codecs": {names.get(k, str(k)): v for k, v in codecs.items()}}

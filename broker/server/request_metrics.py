"""Per-API request counters and times of one broker (Kafka's RequestsPerSec, ErrorsPerSec and RequestMetrics'
TotalTimeMs split into RequestQueue/Local/Remote/ResponseQueue/ResponseSend), and the per-topic BrokerTopicMetrics
(BytesInPerSec, BytesOutPerSec, MessagesInPerSec); counted in the connection's dispatch path and read by the
collector at scrape time.

The phases, from the moments the connection takes (connection.py): *request queue* from the read that completed
the request to its handler's start (requests of one read wait for the ones before them), *local* the handler's
own work, *remote* the wait of a delayed answer (acks=all produce for the ISR and fsync, a long-poll fetch in the
purgatory), *response queue* from the answer being ready to its first byte going out (answers leave in request
order), *response send* the writing. They add up to *total*, from the read to the last byte handed to the kernel.

The counters are plain lists indexed by the API key (keys are small integers): the produce path pays one list
increment per request for the count and one for the bytes, no locks (one event loop thread counts, the
scrape reads ints, which is safe under the GIL), no labels resolved on the hot path. Names follow Prometheus'
conventions: `_total` on counters (prometheus_client appends it), units in the name (`_bytes`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from ferry.wire.bucket_histogram import LATENCY_BUCKETS, BucketHistogram, add_histogram
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode

PRODUCE, FETCH = 0, 1  # the API keys whose handlers count their answers' error codes themselves
FETCH_FOLLOWER = 126  # a slot of the request times for followers' fetches (Kafka's request="FetchFollower")
SLOTS = 128  # API keys served are < 70; a frame with a larger key is closed before it is counted twice
BOUNDS = LATENCY_BUCKETS  # of every request time histogram
FIRST = BOUNDS[0]  # a time up to it needs no bisect


class RequestMetrics:
    """requests, bytes in, bytes out, failed requests and the six request times per API key; error codes
    answered per API and code; produce/fetch record bytes and produced records per topic."""

    __slots__ = ("requests", "bytes_in", "bytes_out", "errors", "produce_bytes", "fetch_bytes", "produce_messages",
                 "error_codes", "times")

    def __init__(self) -> None:
        self.requests = [0] * SLOTS
        self.bytes_in = [0] * SLOTS
        self.bytes_out = [0] * SLOTS
        self.errors = [0] * SLOTS  # requests whose handler failed or that closed the connection
        self.produce_bytes: dict[str, int] = {}  # record bytes appended by produce requests, per topic
        self.fetch_bytes: dict[str, int] = {}  # record bytes answered to fetches (consumers and followers)
        self.produce_messages: dict[str, int] = {}  # records appended by produce requests, per topic
        self.error_codes: dict[tuple[int, int], int] = {}  # (api key, error code) -> times answered (every API)
        self.times: list[RequestTimes | None] = [None] * SLOTS  # made at a key's first answered request

    def record(self, key: int, received: float, started: float, handled: float, completed: float,
               sending: float, sent: float) -> None:
        """One answered request's moments (loop.time()): read, handler start and end, delayed answer complete
        (= handled when it did not wait), first and last byte written."""
        t = self.times[key]
        if t is None:
            t = self.times[key] = request_times()
        # BucketHistogram.observe inlined, and no bisect for what falls in the first bucket (most phases of most
        # requests): a call and a bisect per phase were half of the metrics' cost per request
        for h, v in zip(t, (sent - received, started - received, handled - started, completed - handled,
                            sending - completed, sent - sending), strict=False):  # both six long
            h.counts[bisect_left(BOUNDS, v) if v > FIRST else 0] += 1
            h.sum += v

    def collect(self, broker: str) -> Iterator[Any]:
        """The metric families, labelled with the broker id and the API's Kafka name."""
        labels = ["broker", "api"]
        fams = (
            ("ferry_broker_requests", "requests received, per API", self.requests),
            ("ferry_broker_request_bytes", "request bytes received (size prefix excluded), per API", self.bytes_in),
            ("ferry_broker_response_bytes", "response bytes queued for sending (record data sent with sendfile "
             "included), per API", self.bytes_out),
            ("ferry_broker_request_errors", "requests that failed in the broker (malformed, unsupported, a "
             "handler error: the connection is closed), per API", self.errors),
        )
        for name, doc, values in fams:
            fam = CounterMetricFamily(name, doc, labels=labels)
            for key, value in enumerate(values):
                if value:
                    fam.add_metric([broker, api_name(key)], value)
            yield fam
        fam = CounterMetricFamily("ferry_broker_response_errors", "error codes answered, per API and code "
                                  "(Kafka's ErrorsPerSec; per partition, group, topic, ... as the answer carries them)",
                                  labels=["broker", "api", "error"])
        for (key, code), value in list(self.error_codes.items()):
            fam.add_metric([broker, api_name(key), error_name(code)], value)
        yield fam
        for i, (name, doc) in enumerate(PHASES):
            fam = HistogramMetricFamily(name, doc, labels=labels)
            for key, times in enumerate(self.times):
                if times is not None:
                    add_histogram(fam, [broker, api_name(key)], times[i])
            yield fam
        for name, doc, per_topic in (
            ("ferry_broker_topic_bytes_in", "record batch bytes appended by produce requests, per topic (Kafka's "
             "BytesInPerSec)", self.produce_bytes),
            ("ferry_broker_topic_bytes_out", "record bytes answered to fetch requests (consumers and followers), "
             "per topic (BytesOutPerSec)", self.fetch_bytes),
            ("ferry_broker_topic_messages_in", "records appended by produce requests, per topic (MessagesInPerSec)",
             self.produce_messages),
        ):
            fam = CounterMetricFamily(name, doc, labels=["broker", "topic"])
            for topic, value in list(per_topic.items()):
                fam.add_metric([broker, topic], value)
            yield fam


PHASES = (  # (name, doc) of each histogram, in the order RequestMetrics.record computes the phases
    ("ferry_request_total_time_seconds", "time from reading a request to its answer's last byte written, per API (TotalTimeMs)"),
    ("ferry_request_queue_time_seconds", "time a read request waited for its handler, per API (RequestQueueTimeMs)"),
    ("ferry_request_local_time_seconds", "time in the request's handler, per API (LocalTimeMs)"),
    ("ferry_request_remote_time_seconds", "time a delayed answer waited: acks=all produce for the ISR, long-poll fetch (RemoteTimeMs)"),
    ("ferry_response_queue_time_seconds", "time a ready answer waited for the ones before it, per API (ResponseQueueTimeMs)"),
    ("ferry_response_send_time_seconds", "time writing the answer to the socket, per API (ResponseSendTimeMs)"),
)

RequestTimes = tuple[BucketHistogram, ...]  # one API's histograms, one per phase in PHASES' order


def request_times() -> RequestTimes:
    return tuple(BucketHistogram(BOUNDS) for _ in PHASES)


def count_error(counts: dict[tuple[int, int], int], api: int, code: int) -> None:
    """One partition of an ``api`` answer carries error ``code`` (called on errors only: the path without
    errors pays nothing)."""
    k = (api, code)
    counts[k] = counts.get(k, 0) + 1


def error_name(code: int) -> str:
    """Kafka's name of an error code (NOT_LEADER_OR_FOLLOWER, ...), or the number for one ferry does not know."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def follower_or(key: int, frame: bytes | bytearray) -> int:
    """FETCH_FOLLOWER for a Fetch (v4-11: not flexible) whose replica_id names a broker, else ``key``: Kafka times
    FetchFollower apart from FetchConsumer (a follower's long polls would bury the consumers' times)."""
    if len(frame) >= 10:
        n = frame[8] << 8 | frame[9]  # the client id's length; 0xffff: null
        pos = 10 + (n if n < 0x8000 else 0)
        if len(frame) >= pos + 4 and frame[pos] < 0x80:  # replica_id >= 0
            return FETCH_FOLLOWER
    return key


def api_name(key: int) -> str:
    """Kafka's name of an API key (Produce, Fetch, ...), or the number for one ferry does not know."""
    if key == FETCH_FOLLOWER:
        return "FetchFollower"
    try:
        name = ApiKey(key).name
    except ValueError:
        return str(key)
    return "".join(part.capitalize() for part in name.split("_"))

"""Per-API request counters of one broker (Kafka's RequestsPerSec, BytesIn/OutPerSec, ErrorsPerSec per
request type), counted in the connection's dispatch path and read by the collector at scrape time.

The counters are plain lists indexed by the API key (keys are small integers): the produce path pays one list
increment per request for the count and one for the bytes, no locks (one event loop thread counts, the
scrape reads ints, which is safe under the GIL), no labels resolved on the hot path. Names follow Prometheus'
conventions: `_total` on counters (prometheus_client appends it), units in the name (`_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily

from ferry.wire.protocol.api_keys import ApiKey

SLOTS = 128  # API keys served are < 70; a frame with a larger key is closed before it is counted twice


class RequestMetrics:
    """requests, bytes in, bytes out and failed requests per API key; produce/fetch record bytes per topic."""

    __slots__ = ("requests", "bytes_in", "bytes_out", "errors", "produce_bytes", "fetch_bytes")

    def __init__(self) -> None:
        self.requests = [0] * SLOTS
        self.bytes_in = [0] * SLOTS
        self.bytes_out = [0] * SLOTS
        self.errors = [0] * SLOTS  # requests whose handler failed or that closed the connection
        self.produce_bytes: dict[str, int] = {}  # record bytes appended by produce requests, per topic
        self.fetch_bytes: dict[str, int] = {}  # record bytes answered to fetches (consumers and followers)

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
        for name, doc, per_topic in (
            ("ferry_broker_produce_bytes", "record batch bytes appended by produce requests, per topic",
             self.produce_bytes),
            ("ferry_broker_fetch_bytes", "record bytes answered to fetch requests, per topic", self.fetch_bytes),
        ):
            fam = CounterMetricFamily(name, doc, labels=["broker", "topic"])
            for topic, value in list(per_topic.items()):
                fam.add_metric([broker, topic], value)
            yield fam


def api_name(key: int) -> str:
    """Kafka's name of an API key (Produce, Fetch, ...), or the number for one ferry does not know."""
    try:
        name = ApiKey(key).name
    except ValueError:
        return str(key)
    return "".join(part.capitalize() for part in name.split("_"))

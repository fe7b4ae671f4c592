"""A latency histogram cheap enough for the request path: fixed bucket bounds, one bisect and two additions per
observation, no lock (one event loop thread observes; a scrape from another thread reads ints and a float, which
the GIL keeps whole; a scrape may see a count one ahead of its sum, as Prometheus tolerates).

prometheus_client's Histogram takes a lock and walks its buckets per observation, several microseconds: at six
phases per request (RequestMetrics) that would be a visible share of a small produce. The exposition is still
prometheus_client's (HistogramMetricFamily), with its conventions: cumulative ``le`` buckets, ``_sum``, ``_count``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from prometheus_client.core import HistogramMetricFamily

# seconds: Kafka's request times run from tens of microseconds (a local append) to the long-poll wait (500 ms
# by default) and request timeouts (30 s)
LATENCY_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BucketHistogram:
    """Counts per bucket (not cumulative: cumulated at scrape time) and the sum of what was observed."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: a value equal to a bound belongs to it
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, +Inf last, as the exposition wants them."""
        out, total = [], 0
        counts = list(self.counts)  # one copy: the buckets of one scrape agree with each other
        for bound, n in zip(self.bounds, counts, strict=False):
            total += n
            out.append((_le(bound), total))
        out.append(("+Inf", total + counts[-1]))
        return out


def add_histogram(family: HistogramMetricFamily, labels: list[str], hist: BucketHistogram) -> None:
    """Add one labelled histogram to a family (the buckets copied first, then the sum: an observation made in
    between shows in the sum only, until the next scrape)."""
    buckets = hist.cumulative()
    family.add_metric(labels, buckets, hist.sum)


def _le(bound: float) -> str:
    return repr(float(bound))

"""ClusterView: one cluster's metadata as a mirror stream sees it (the live or the offline side)."""

from __future__ import annotations

from ferry.client.errors import ClientError
from ferry.client.wire_client import WireClient
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import METADATA_MIN_INTERVAL_S, log
from ferry.mirror.partition_mirror import backoff


class ClusterView:
    """Whether the stream's leaders of one cluster are to be looked up again, and when it may ask.

    Whoever meets a moved leader or a lost connection marks the view ``stale``; the stream refreshes it
    between rounds, at most every METADATA_MIN_INTERVAL_S and backing off while the cluster does not answer
    (a link cut of minutes costs no CPU).
    """

    def __init__(self, client: WireClient, which: str, stream_index: int, metrics: MirrorMetrics) -> None:
        self.client = client
        self.which = which  # "live" or "offline": names the metric and the log line
        self.stream_index = stream_index
        self.metrics = metrics
        self.stale = True
        self.refresh_at = 0.0  # earliest next refresh (monotonic)
        self.failures = 0  # consecutive failed refreshes

    def due(self, now: float) -> bool:
        return self.stale and now >= self.refresh_at

    def refresh_if_due(self, topics: list[str], now: float) -> None:
        if not self.due(now):
            return
        try:
            self.client.refresh_metadata(topics)
        except ClientError as e:
            self.failures += 1
            self.refresh_at = now + max(METADATA_MIN_INTERVAL_S, backoff(self.failures))
            self.metrics.error(f"{self.which}_metadata")
            if self.failures in (1, 10) or self.failures % 100 == 0:
                log.warning("mirror stream %d: %s metadata unavailable (%d times in a row; retrying): %s",
                            self.stream_index, self.which, self.failures, e)
            return
        self.stale, self.refresh_at, self.failures = False, now + METADATA_MIN_INTERVAL_S, 0

"""The mirror's idempotent producer-id session and its view of both clusters' metadata."""

from __future__ import annotations

import time

from ferry.client.errors import ClientError
from ferry.client.wire_client import WireClient
from ferry.mirror.batch_rewrite import next_sequence, restamp
from ferry.mirror.mirror_limits import (
    METADATA_MIN_INTERVAL_S,
    log,
)
from ferry.mirror.partition_mirror import (
    backoff,
)


class MirrorSession:
    """The mirror's idempotent producer-id session and its view of both clusters' metadata (a part of MirrorStream)."""

    # ------------------------------------------------------------------ producer id
    def _ensure_producer_id(self, now: float) -> bool:
        if self.producer_id is not None:
            return True
        if now < self._pid_retry_at:
            return False
        try:
            self.producer_id, self.producer_epoch = self.target.init_producer_id()
        except ClientError as e:
            self._pid_failures += 1
            self._pid_retry_at = now + backoff(self._pid_failures)
            self.metrics.error("init_producer_id")
            log.warning("mirror stream %d: no producer id from the offline cluster yet (%s)", self.index, e)
            return False
        self._pid_failures = 0
        log.info("mirror stream %d: producer id %d epoch %d", self.index, self.producer_id, self.producer_epoch)
        return True

    def _reset_producer_id(self) -> None:
        """The offline cluster refused our sequence: take a new producer id and re-stamp unacked batches.

        Batches sent before may then be written twice (duplicates), never lost.
        """
        old = self.producer_id
        try:
            pid, epoch = self.target.init_producer_id()
        except ClientError as e:
            log.warning("mirror stream %d: cannot get a new producer id yet (%s)", self.index, e)
            self.metrics.error("init_producer_id")
            self._pid_failures += 1
            self._pid_retry_at = time.monotonic() + backoff(self._pid_failures)
            return  # keep _needs_new_pid; produces wait for it (see _plan_produces)
        self._pid_failures = 0
        self._needs_new_pid = False
        self.producer_id, self.producer_epoch = pid, epoch
        self.sequences.clear()
        self._rewind.clear()
        for tp, pm in self.partitions.items():
            seq = 0
            for b in pm.pending:
                if b.acked:
                    continue
                restamp(b.buf, b.start, b.size, pid, epoch, seq)
                b.sequence = seq
                b.uncertain = False  # a new producer id: nothing to deduplicate against
                seq = next_sequence(seq, b.header)
            self.sequences[tp] = seq
        self.metrics.producer_resets.inc()
        log.warning("mirror stream %d: producer id %s -> %d after a refused sequence; unacknowledged batches "
                    "re-stamped (they may be duplicated, never lost)", self.index, old, pid)

    # ------------------------------------------------------------------ metadata
    def _refresh_metadata(self, now: float) -> None:
        topics = sorted({tp[0] for tp in self.partitions})
        if self._source_stale and now >= self._source_refreshed:
            self._source_stale, self._source_refreshed, self._source_md_failures = self._refresh(
                self.source, "live", topics, now, self._source_md_failures)
        if self._target_stale and now >= self._target_refreshed:
            self._target_stale, self._target_refreshed, self._target_md_failures = self._refresh(
                self.target, "offline", topics, now, self._target_md_failures)

    def _refresh(self, client: WireClient, which: str, topics: list[str], now: float,
                 failures: int) -> tuple[bool, float, int]:
        """Returns (still stale, earliest next refresh, consecutive failures)."""
        try:
            client.refresh_metadata(topics)
            return False, now + METADATA_MIN_INTERVAL_S, 0
        except ClientError as e:
            failures += 1
            self.metrics.error(f"{which}_metadata")
            if failures in (1, 10) or failures % 100 == 0:
                log.warning("mirror stream %d: %s metadata unavailable (%d times in a row; retrying): %s",
                            self.index, which, failures, e)
            return True, now + max(METADATA_MIN_INTERVAL_S, backoff(failures)), failures

"""RoleChangeLog: the partitions' leader/follower changes as log lines, one per partition when a few change
and one per topic when many change at once (a broker starting with 10,000 partitions wrote 10,000 lines).

Lines noted within BURST_S of the first are written together: a burst of state changes (a start, a controller
moving a dead broker's partitions away) comes out as a summary per topic, a lone change as its own line.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("ferry.broker.server.partition")

SUMMARY_OVER = 20  # more role changes than this for one topic in one burst: one summary line
BURST_S = 0.5


class RoleChangeLog:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop
        self._pending: dict[str, list[tuple[int, str, str]]] = {}
        self._scheduled = False

    def note(self, topic: str, partition: int, role: str, line: str) -> None:
        """``role``: "leader" or "follower"; ``line``: the per-partition message (without the partition)."""
        if self.loop is None:
            log.info("%s-%d: %s", topic, partition, line)
            return
        self._pending.setdefault(topic, []).append((partition, role, line))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(BURST_S, self.flush)

    def flush(self) -> None:
        pending, self._pending, self._scheduled = self._pending, {}, False
        for topic, changes in pending.items():
            if len(changes) <= SUMMARY_OVER:
                for partition, _, line in changes:
                    log.info("%s-%d: %s", topic, partition, line)
                continue
            leaders = [p for p, role, _ in changes if role == "leader"]
            followers = [p for p, role, _ in changes if role != "leader"]
            first_p, _, first_line = changes[0]
            log.info("%s: leader of %d partition(s) %s, follower of %d %s (first: %s-%d: %s)", topic, len(leaders),
                     _ranges(leaders), len(followers), _ranges(followers), topic, first_p, first_line)


def _ranges(partitions: list[int]) -> str:
    """[0-99, 120]: partitions as compact ranges."""
    out: list[tuple[int, int]] = []
    for p in sorted(set(partitions)):
        if out and out[-1][1] == p - 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return "[" + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out) + "]"

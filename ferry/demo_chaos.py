"""`ferry demo --chaos N`: what copies live to offline is killed with -9 N times while the demo's events are
published and copied: the offline broker that runs the mirror link (the default), or the standalone mirror.

The events go out in N + 1 slices; shortly after each of the first N (while the copy is running, and before its
audit counts caught up) the process is SIGKILLed and started again. The books at the end must still be complete
with 0 duplicates and the mirror tier equal to the producers': the copy resumes where the offline log says it
ends (docs/mirror.md, "Exactly once").
"""

from __future__ import annotations

import time
from collections import Counter

from ferry.demo_mirror import DemoMirror

# how long after a slice is published the copier dies: the live brokers expose it after their 200 ms flush, the
# copy follows within a few ms and its audit and checkpoints every second or more, so the kills land before,
# during and after the copy with the books behind it
KILL_AFTER_S = (0.3, 0.6, 0.9)


def publish_under_chaos(mirror: DemoMirror, kills: int, n_events: int, start_ms: int, end_ms: int, hosts: list[str],
                        seed: int) -> dict[str, int]:
    """Publish ``n_events`` (as DemoCluster.publish does) in ``kills + 1`` slices, killing the mirror's copier (-9)
    and starting it again after each of the first ``kills``; returns the events produced per topic."""
    cluster = mirror.cluster
    produced: Counter[str] = Counter()
    slices = kills + 1
    for i in range(slices):
        n = n_events // slices + (1 if i < n_events % slices else 0)
        if n:
            produced.update(cluster.publish(n, start_ms, end_ms, hosts, seed + i))
        if i < kills:
            time.sleep(KILL_AFTER_S[i % len(KILL_AFTER_S)])
            cluster.progress.say(mirror.crash(i + 1, kills))
    return dict(produced)


def chaos_summary(mirror: DemoMirror) -> str:
    """How the restarted copiers resumed from the offline log (from their own logs)."""
    return mirror.chaos_summary()

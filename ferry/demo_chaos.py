"""`ferry demo --chaos N`: the mirror is killed with -9 N times while the demo's events are published and copied.

The events go out in N + 1 slices; shortly after each of the first N (while the mirror is copying it, and
before its checkpoint and audit counts caught up) the mirror process is SIGKILLed and started again. The
books at the end must still be complete with 0 duplicates and the mirror tier equal to the producers':
the restarted mirror resumes where the offline log ends (docs/mirror.md, "Exactly once").
"""

from __future__ import annotations

import re
import time
from collections import Counter

from ferry.demo_steps import DemoCluster

# how long after a slice is published the mirror dies: the live brokers expose it after their 200 ms flush,
# the mirror copies it within a few ms and writes checkpoints every second, so the kills land before, during
# and after the copy with the checkpoint behind it
KILL_AFTER_S = (0.3, 0.6, 0.9)
SYNC_LINE = re.compile(r"(\d+) offsets copied after the checkpoint")


def publish_under_chaos(cluster: DemoCluster, kills: int, n_events: int, start_ms: int, end_ms: int, hosts: list[str],
                        seed: int) -> dict[str, int]:
    """Publish ``n_events`` (as DemoCluster.publish does) in ``kills + 1`` slices, killing the mirror (-9) and
    starting it again after each of the first ``kills``; returns the events produced per topic."""
    produced: Counter[str] = Counter()
    slices = kills + 1
    for i in range(slices):
        n = n_events // slices + (1 if i < n_events % slices else 0)
        if n:
            produced.update(cluster.publish(n, start_ms, end_ms, hosts, seed + i))
        if i < kills:
            time.sleep(KILL_AFTER_S[i % len(KILL_AFTER_S)])
            assert cluster.mirror is not None
            cluster.mirror.kill()
            cluster.progress.say(f"chaos: mirror killed with -9 ({i + 1}/{kills}) while copying; starting it again")
            cluster.start_mirror()
    return dict(produced)


def chaos_summary(cluster: DemoCluster) -> str:
    """What the restarted mirrors found in the offline log past their checkpoints (from the mirror's log)."""
    text = (cluster.root / "mirror.out").read_text(errors="replace") if (cluster.root / "mirror.out").exists() else ""
    found = [int(n) for n in SYNC_LINE.findall(text)]
    beyond = [n for n in found if n]
    return (f"chaos: the restarted mirrors synced {len(found)} partitions from the offline log; {len(beyond)} had "
            f"{sum(beyond)} offsets copied past their checkpoint, resumed after them (nothing copied twice)")

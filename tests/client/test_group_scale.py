"""Consumer groups at scale, bounded: bench/bench_groups.py (issue 20 goal 5) with 180 partitions and 12
real ConsumerConnector members in worker processes against the session's ZooKeeper — joins one by one,
graceful leaves, a SIGKILLed member (its session expires) and churn — failing on any double ownership
(checked all through the run, not only at the end) or a rebalance that does not settle within budget.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SESSION_S = 4.0  # the shortest the session's ZooKeeper allows (2 ticks of 2 s)
# issue 20 asks for under 10 s at 1,000 partitions and 50 members on a quiet machine (bench/RESULTS.md);
# this smaller group settles in 1-5 s, but the test shares two cores with the rest of CI: the budget is
# twice the target, which still fails a group that never settles or waits out fixed backoffs in a herd
BUDGET_S = 20.0


@pytest.mark.slow  # 30-100 s on a busy 2-core machine: worker processes, 17 rebalances and a session expiry
@pytest.mark.timeout(240)
def test_twelve_members_over_180_partitions_never_own_a_partition_twice(zk_server, tmp_path):
    out = tmp_path / "groups.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_groups.py"), "--zookeeper", zk_server.connect,
         "--partitions", "180", "--members", "12", "--workers", "2", "--victims", "1", "--leaves", "2",
         "--churn", "2", "--session-timeout", str(SESSION_S), "--settle-timeout", "60", "--json", str(out)],
        capture_output=True, text=True, timeout=220, cwd=ROOT)
    assert out.exists(), f"no results (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    res = json.loads(out.read_text())
    checks, scenarios = res["checks"], res["scenarios"]
    assert res["failure"] is None, f"{res['failure']}\n{run.stderr[-3000:]}"
    assert checks["double_ownership"] == 0, checks["violations"][:10]
    assert checks["member_checks"] > 100 and checks["owner_sweeps"] > 20  # the checks ran all along
    assert checks["orphan_owner_sweeps"] == 0
    assert set(scenarios) == {"join", "leave", "kill", "churn"}
    assert scenarios["join"]["rebalances"] == 12 and scenarios["leave"]["rebalances"] == 2
    for name in ("join", "leave", "churn"):
        assert scenarios[name]["settle"]["max_s"] < BUDGET_S, (name, scenarios[name])
    # a killed member is noticed when its session expires; the rebalance after that is what is budgeted
    assert scenarios["kill"]["settle_after_expiry"]["max_s"] < BUDGET_S, scenarios["kill"]
    assert scenarios["kill"]["settle"]["max_s"] < SESSION_S + BUDGET_S, scenarios["kill"]
    # settled means Algorithm 1's split: 180 over 9 members is 20 each
    assert scenarios["kill"]["final_partitions_per_member"] == [20, 20]
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_simulation_s_ledger_sees_a_partition_owned_twice():
    """The check the scale run relies on: overlapping ownership intervals of one partition are reported,
    hand-overs (one ends before the next begins) are not, and an open interval lasts until the end."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_groups", ROOT / "bench" / "bench_groups.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ledger = bench.Ledger()
    ledger.add("w0", [("born", 0, "a", 7, 1.0), ("died", 0, 2.0), ("born", 1, "a", 8, 1.0)])
    ledger.add("w1", [("born", 0, "b", 7, 2.5), ("born", 1, "b", 9, 3.0), ("died", 1, 4.0)])
    assert ledger.overlaps() == []
    assert ledger.open_owners() == {7: [("b", 2.5)], 8: [("a", 1.0)]}
    ledger.add("w1", [("born", 2, "b", 8, 5.0), ("died", 2, 5.5)])  # a's interval on 8 is still open
    ledger.add("w2", [("born", 0, "c", 7, 1.5), ("died", 0, 1.9)])
    assert len(ledger.overlaps()) == 2 and all(" while " in o for o in ledger.overlaps())
    ledger.end_all("w0", 4.5)  # w0 killed at 4.5: a's ownership of 8 ends there, before b's at 5.0
    assert [o.split(":")[0] for o in ledger.overlaps()] == ["partition 7"]

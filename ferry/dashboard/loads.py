"""The loads page's view of the ledger (:class:`ferry.loaders.ledger.Ledger`): committed and failed runs,
runs that began and never ended, data skipped as lost. A torn or foreign ledger is shown, not fatal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ferry.dashboard.reasons import why
from ferry.loaders.ledger import Ledger


def loads_view(state_dir: str | Path | None) -> dict[str, Any]:
    """The ledger's runs, newest first: committed ones and failed ones (with their error); runs that
    began and neither committed nor noted a failure (running, or killed); data skipped as lost."""
    empty = {"runs": [], "failed": [], "unfinished": [], "lost": [], "failed_total": 0, "pending": 0,
             "published": {}}
    if not state_dir:
        return {"state_dir": None, "error": "no --state-dir given: the loads' ledger is not shown", **empty}
    try:
        state = Ledger(state_dir).read()
    except Exception as e:  # noqa: BLE001 - a torn or foreign ledger is shown, not fatal
        return {"state_dir": state_dir, "error": why(e), **empty}
    committed = [{"run_id": r.get("run_id"), "started": r.get("started"), "ended": r.get("committed_at"),
                  "committed_at": r.get("committed_at"), "rows": r.get("rows"), "ranges": r.get("ranges"),
                  "partitions": r.get("partitions"), "hours": r.get("hours", {}),
                  "hours_touched": _hours_touched(r.get("hours")), "result": "committed", "error": None}
                 for r in state.get("history", [])]
    failed = [{"run_id": f.get("run_id"), "started": f.get("started"), "ended": f.get("ended"),
               "committed_at": None, "rows": 0, "ranges": None, "partitions": None, "hours": f.get("hours", {}),
               "hours_touched": _hours_touched(f.get("hours")), "result": "failed", "error": f.get("error"),
               "stage": f.get("stage"), "topics": f.get("topics", []), "messages": f.get("messages"),
               "committed": bool(f.get("committed"))}
              for f in state.get("failed", [])]
    runs = sorted(committed + failed, key=lambda r: r.get("ended") or r.get("started") or 0, reverse=True)
    noted = {f["run_id"] for f in failed}
    # began, never committed, no failure noted: still running, or killed before it could say why
    unfinished = [{"run_id": k, "started": v.get("started"), "roots": v.get("roots", []),
                   "result": "running, or killed (never committed, no error noted)"}
                  for k, v in sorted(state.get("in_flight", {}).items()) if k not in noted]
    return {"state_dir": state_dir, "error": None, "runs": runs,
            "failed": [r for r in runs if r["result"] == "failed"], "unfinished": unfinished,
            "failed_total": int(state.get("failed_total", len(failed))), "lost": state.get("lost", []),
            "pending": len(state.get("pending", [])), "published": state.get("published", {})}


def _hours_touched(hours: object) -> list[str]:
    """``{table: [[dt, hr], ...]}`` of a ledger run as "table YYYY-MM-DD HH:00" (other shapes as they are)."""
    if not isinstance(hours, dict):
        return []
    out = []
    for table, got in sorted(hours.items()):
        items = got if isinstance(got, list) else list(got) if isinstance(got, dict) else [got]
        for h in items:
            out.append(f"{table} {h[0]} {h[1]}:00" if isinstance(h, list | tuple) and len(h) == 2 else f"{table} {h}")
    return out

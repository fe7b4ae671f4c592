"""The demo's closing books: per topic and hour the live producers' counts against the offline tiers, the
mirror's lag, and what an analyst would ask the warehouse (Spark SQL over the loaded tables)."""

from __future__ import annotations

import time
from pathlib import Path

from ferry.audit.live import read_live_counts
from ferry.audit.reader import read_audit_events
from ferry.audit.reconciler import reconcile
from ferry.demo_mirror import DemoMirror
from ferry.demo_steps import DemoCluster
from ferry.loaders.session import build_session


def print_report(cluster: DemoCluster, mirror: DemoMirror, topics: tuple[str, ...], hours: list[int]) -> dict:
    """Print the books per topic and hour, the mirror's lag, and what an analyst would ask the warehouse;
    returns them (``complete``: every hour of every topic complete, every live cluster read)."""
    offline_monitor, live_monitor = cluster.client("offline", "monitor"), cluster.client("live", "monitor")
    audit_log = read_audit_events(cluster.offline_zk, client_config=offline_monitor)
    # the producers' counts as the live datacenter knows them
    live = read_live_counts([cluster.live_zk], client_config=live_monitor)
    books = reconcile(audit_log.events + live.events, since_ms=hours[0], until_ms=hours[-1] + 3_600_000)
    rows = [h for h in books.hours if h.topic in topics]
    print()
    print("== The books (live producers' counts + offline _audit, per topic and hour of event time) ==")
    print(_table(("topic", "hour (UTC)", "produced", "mirrored", "loaded", "missing", "dupes", "complete"),
                 [(h.topic, hour_label(h.hour_start), h.produced, h.mirrored, h.loaded, h.missing, h.duplicates,
                   "yes" if h.complete else "NO") for h in rows]))
    view = mirror.view()
    print()
    print(f"== {view.title} ==")
    print(_table(view.columns, [(t, *v) for t, v in sorted(view.per_topic.items())]))
    print()
    print("== Analyst: top pages per hour (SELECT ... FROM ferry.page_view) ==")
    top = analyst_query(cluster.root)
    print(_table(("dt", "hr", "page", "views", "members"), top))
    complete = (bool(rows) and all(h.complete for h in rows) and len(rows) == len(topics) * len(hours)
                and not live.unreachable)
    print()
    print("every hour complete: " + ("yes" if complete else "NO (see the books above)"))
    return {"complete": complete, "books": [h.to_dict() for h in rows], "mirror": {"kind": mirror.kind, **view.doc},
            "top_pages": top}

def analyst_query(root: Path) -> list[tuple]:
    """The top pages per hour, from the warehouse the demo loaded (Spark SQL)."""
    spark = build_session(root / "warehouse-state")
    df = spark.sql("""
        SELECT dt, hr, page, views, members FROM (
          SELECT dt, hr, page, count(*) AS views, count(DISTINCT member_id) AS members,
                 row_number() OVER (PARTITION BY dt, hr ORDER BY count(*) DESC) AS rank
          FROM ferry.page_view GROUP BY dt, hr, page) WHERE rank <= 3 ORDER BY dt, hr, views DESC""")
    return [tuple(r) for r in df.collect()]


def hour_label(ms: int) -> str:
    """An hour start as people read it: YYYY-MM-DD HH:00 (UTC)."""
    return time.strftime("%Y-%m-%d %H:00", time.gmtime(ms / 1000))


def _table(headers: tuple, rows: list[tuple]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if isinstance(v, str) else c.rjust(w)
                       for c, w, v in zip(r, widths, (headers if k == 0 else rows[k - 1]), strict=True))
             for k, r in enumerate(cells)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) if rows else "\n".join(lines) + "\n(none)"

"""`ferry audit report`: the books per topic and hour, read from a cluster's `_audit` topic.

Point it at the offline cluster: producer events arrive there through the mirror, and the mirror and
the warehouse loads publish there directly, so it is where all tiers meet.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from ferry.audit.completeness import COMPLETE, status_of
from ferry.audit.live import read_live_counts
from ferry.audit.reader import read_audit_events
from ferry.audit.reconciler import reconcile
from ferry.client.audit.bucket import HOUR_MS, hour_start
from ferry.zk import cli_args as cli
from ferry.zk.cli_args import UsageError

DESCRIPTION = (
    "Audit: every tier (producer, mirror, warehouse) counts messages per topic and 10-minute "
    "bucket of event time and publishes the counts to the `_audit` topic; the report balances the books.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    report = cli.add_actions(parser).add_parser(
        "report", help="per topic and hour: produced, mirrored, loaded, missing, duplicates, complete",
        description="Read `_audit` from the beginning, count each event once (by guid), and show per topic and "
        "UTC hour of event time what the producers sent, the mirror copied and the warehouse loaded. "
        "missing = produced - loaded, duplicates = loaded - produced (per 10-minute bucket, when positive). "
        "An hour is complete when every bucket of it has loaded == produced and something was produced "
        "(or some tier published an explicit zero count for it). Use the offline cluster: all tiers meet there.")
    cli.add_cluster_arguments(report, "ZooKeeper of the cluster whose `_audit` to read")
    cli.add_live_zookeeper_argument(report, "also read the `_audit` of a live cluster. Producer counts that never "
                                    "reached the offline cluster (a mirror that is down, a cut link) then show as "
                                    "missing instead of as an hour with no events; events seen in both clusters "
                                    "count once (by guid)")
    cli.add_switches(report, {
        "--offline-only": "judge from the counts that reached this cluster alone (no live cluster named): a stopped "
                          "mirror then makes a partial hour look complete, so the report says so",
        "--fail-incomplete": "exit 1 if any hour shown is not complete (for scripts)",
    })
    cli.add_client_config_argument(report, "the cluster's brokers")
    cli.add_client_config_argument(report, "the live clusters' brokers (default: --command-config's)",
                                   flag="--live-command-config", dest="live_command_config")
    report.add_argument("--topic", metavar="T", help="only this topic")
    report.add_argument("--hours", type=int, default=24, metavar="N",
                        help="only the last N hours of event time, the current one included (default 24; 0 = all)")
    report.add_argument("--json", dest="format", action="store_const", const="json", default="table",
                        help="print JSON (with the per-bucket detail) instead of a table")
    report.add_argument("--format", choices=("table", "json"), help=argparse.SUPPRESS)  # the older spelling
    cli.add_timeout_argument(report, "give up reading `_audit` after SECONDS without progress", default=10.0)


def run(args: argparse.Namespace) -> int:
    return {"report": run_report}[args.action](args)


def _hour_label(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:00")


def run_report(args: argparse.Namespace) -> int:
    cli.quiet_zookeeper_logs()
    cli.require_cluster(args)
    if args.hours < 0:
        raise UsageError("--hours must be >= 0")
    if not args.live_zookeeper and not args.offline_only:
        raise UsageError("no --live-zookeeper: completeness is judged from the live producers' counts; name every "
                         "live cluster, or pass --offline-only")
    if args.live_zookeeper and args.offline_only:
        raise UsageError("--offline-only with --live-zookeeper")
    config = cli.client_config(args)
    live_config = cli.client_config(args, "live_command_config") if args.live_command_config else config
    audit_log = read_audit_events(args.zookeeper if not args.bootstrap else None, args.bootstrap,
                                  timeout_s=args.timeout_s, client_config=config)
    # the producers' counts as the live clusters know them decide; an unreachable one makes every hour unknown
    live = read_live_counts(args.live_zookeeper, args.timeout_s, live_config)
    for zk in live.unreachable:
        print(f"ferry audit report: warning: the producer counts of live cluster {zk} are unreachable; "
              "every hour shows as unknown", file=sys.stderr)
    audit_log.events.extend(live.events)
    audit_log.invalid += live.invalid
    since = None
    if args.hours:
        since = hour_start(int(time.time() * 1000)) - (args.hours - 1) * HOUR_MS
    report = reconcile(audit_log.events, topic=args.topic, since_ms=since)
    statuses = [status_of(h, live.unreachable) for h in report.hours]
    if args.format == "json":
        doc = report.to_dict()
        doc["invalid_events"] = audit_log.invalid
        doc["unreachable"] = live.unreachable
        doc["completeness"] = "offline-only" if args.offline_only else "live"
        for h, status in zip(doc["hours"], statuses, strict=True):
            h["hour"] = _hour_label(h["hour_start"])
            h["status"] = status
            h["complete"] = status == COMPLETE
            h["completeness"] = doc["completeness"]  # what this hour was judged from
        print(json.dumps(doc, indent=2))
    else:
        _print_table(report, statuses, audit_log.invalid)
        if args.offline_only:
            print("completeness: offline-only (judged from the counts that reached this cluster, not the live ones)")
    if args.fail_incomplete and any(s != COMPLETE for s in statuses):
        return 1
    return 0


def _print_table(report, statuses: list[str], invalid: int) -> None:
    headers = ("topic", "hour (UTC)", "produced", "mirrored", "loaded", "missing", "duplicates", "complete")
    shown = {"complete": "yes", "incomplete": "no", "unknown": "unknown"}
    rows = [(h.topic, _hour_label(h.hour_start), str(h.produced), str(h.mirrored), str(h.loaded), str(h.missing),
             str(h.duplicates), shown.get(s, s)) for h, s in zip(report.hours, statuses, strict=True)]
    if not rows:
        print("no audit events in the selected range")
    else:
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        for r in [headers, *rows]:
            print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    extra = f"; {invalid} unreadable message(s) on _audit" if invalid else ""
    print(f"({report.events} events, {report.duplicate_events} duplicate copies ignored{extra})", file=sys.stderr)

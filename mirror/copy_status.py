"""One row per copied partition, the same for both mirror kinds: `ferry mirror status` prints the standalone
mirror group's partitions and each embedded link's partitions through this one table (mirror/status.py,
mirror/link_cmd.py), and its JSON carries the same fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ferry.mirror.copy_lag import lag_messages


@dataclass
class CopyRow:
    topic: str
    partition: int
    live_end: int | None  # the live end (last stable offset) as last seen
    copied_to: int | None  # the live offset the copy reached (the standalone group's committed offset)
    lag: int | None  # messages
    lag_seconds: float | None  # copy_lag.lag_seconds
    state: str  # copying, paused, waiting for the live leader / an owner, failed
    messages_per_s: float | None
    owner: str | None  # the group member (standalone) or the offline leader's broker id (embedded)
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_report(cls, report: dict) -> CopyRow:
        """A row from an embedded leader's report (link_progress.read_progress)."""
        lag = report.get("lag")
        if lag is None:
            lag = lag_messages(report.get("live_end"), report.get("copied_to"))
        return cls(report["topic"], report["partition"], _known(report.get("live_end")),
                   _known(report.get("copied_to")), lag, report.get("lag_seconds"), report["state"],
                   report.get("messages_per_s"), str(report["broker"]), report.get("error"))


def _known(offset: int | None) -> int | None:
    return None if offset is None or offset < 0 else offset


def format_table(rows: list[CopyRow], owner_header: str = "OWNER", indent: str = "") -> list[str]:
    """The rows as aligned columns ("-" for what is not known), one line each after a header."""
    def show(v: object) -> str:
        return "-" if v is None else str(v)

    header = ("TOPIC", "PARTITION", "LIVE-END", "COPIED-TO", "LAG", "LAG-S", "MSG/S", owner_header, "STATE")
    cells = [header] + [(r.topic, str(r.partition), show(r.live_end), show(r.copied_to), show(r.lag),
                         show(r.lag_seconds), show(r.messages_per_s), show(r.owner),
                         r.state + (f" ({r.error})" if r.error else "")) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells]

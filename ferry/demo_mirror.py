"""The demo's mirror, of either kind (docs/mirror.md): a mirror link on the offline cluster (the default: the
offline broker's partition leaders pull from the live cluster, the paper's embedded consumers) or the standalone
`ferry mirror` process (`ferry demo --mirror standalone`).

Each kind knows how to start, how far behind it is, what `--chaos` kills (the standalone process, or the offline
broker that runs the link's copy) and how it shows itself in the books; demo.py, demo_chaos.py and demo_report.py
use it through that face only.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ferry.demo_steps import DemoCluster
from ferry.embedded import BrokerProcess
from ferry.mirror.link_status import links_status
from ferry.mirror.status import mirror_status
from ferry.zk import connect as zk_connect
from ferry.zk.cli_args import UsageError
from ferry.zk.mirror_links import LinkExistsError, MirrorLink, MirrorLinkStore
from ferry.zk.topic_name import AUDIT_TOPIC

LINK = "link"
STANDALONE = "standalone"
KINDS = (LINK, STANDALONE)
LINK_NAME = "live"  # one link per live datacenter; the demo has one
INCLUDE = ".*"
# the link names `_audit` to copy the live producers' counts too, as the standalone mirror does (mirrored_include)
LINK_INCLUDE = f"{INCLUDE}|{AUDIT_TOPIC}"
GROUP = "ferry-mirror"


@dataclass
class MirrorView:
    """What the books show of the mirror: a title, per topic (partitions, live end, copied/offline end, lag)."""
    title: str
    columns: tuple[str, ...]
    per_topic: dict[str, list[int]]
    doc: dict


class DemoMirror(Protocol):
    kind: str
    cluster: DemoCluster

    def start(self) -> None: ...

    def lag(self) -> tuple[int, set[str]]:
        """(messages not copied yet, topics the mirror reports on)."""
        ...

    def crash(self, i: int, kills: int) -> str:
        """Kill what copies with -9 and start it again; returns what the demo prints."""
        ...

    def chaos_summary(self) -> str: ...

    def view(self) -> MirrorView: ...


class StandaloneDemoMirror:
    """The `ferry mirror` process (group ferry-mirror): what it copied is its committed offsets in the live ZooKeeper."""
    kind = STANDALONE
    SYNC_LINE = re.compile(r"(\d+) offsets copied after the checkpoint")

    def __init__(self, cluster: DemoCluster) -> None:
        self.cluster = cluster

    def start(self) -> None:
        self.cluster.start_mirror()

    def _status(self):  # noqa: ANN202 - mirror.status.MirrorStatus
        c = self.cluster
        return mirror_status(c.live_zk, c.offline_zk, GROUP, include=INCLUDE, source_client=c.client("live", "monitor"),
                             target_client=c.client("offline", "monitor"))

    def lag(self) -> tuple[int, set[str]]:
        status = self._status()
        return status.total_lag, {r.topic for r in status.partitions}

    def crash(self, i: int, kills: int) -> str:
        assert self.cluster.mirror is not None
        self.cluster.mirror.kill()
        self.cluster.start_mirror()
        return f"chaos: mirror killed with -9 ({i}/{kills}) while copying; started again"

    def chaos_summary(self) -> str:
        """What the restarted mirrors found in the offline log past their checkpoints (from the mirror's log)."""
        out = self.cluster.root / "mirror.out"
        found = [int(n) for n in self.SYNC_LINE.findall(out.read_text(errors="replace") if out.exists() else "")]
        beyond = [n for n in found if n]
        return (f"chaos: the restarted mirrors synced {len(found)} partitions from the offline log; {len(beyond)} had "
                f"{sum(beyond)} offsets copied past their checkpoint, resumed after them (nothing copied twice)")

    def view(self) -> MirrorView:
        status = self._status()
        per_topic: dict[str, list[int]] = {}
        for r in status.partitions:
            agg = per_topic.setdefault(r.topic, [0, 0, 0, 0])
            agg[0] += 1
            agg[1] += r.live_end or 0
            agg[2] += r.offline_end or 0
            agg[3] += r.lag or 0
        return MirrorView(f"Mirror (group {GROUP}, members {', '.join(status.members) or '-'})",
                          ("topic", "partitions", "live end", "offline end", "lag"), per_topic, status.to_dict())


class LinkDemoMirror:
    """A mirror link stored in the offline ZooKeeper: the offline broker's leaders copy; what they copied is
    their progress reports (live offsets), compared with the live log ends read afresh."""
    kind = LINK
    RESUME_LINE = re.compile(r"mirror link \S+: \S+: leader \(epoch \d+\) copies from live offset (\d+)")

    def __init__(self, cluster: DemoCluster) -> None:
        self.cluster = cluster

    def link(self) -> MirrorLink:
        c = self.cluster
        source_config = str(c.security.client_file("live", "mirror")) if c.security is not None else None
        zk_tls = str(c.security.zookeeper_tls_file) if c.security is not None else None
        return MirrorLink(LINK_NAME, c.live_zk, LINK_INCLUDE, None, source_config,
                          source_zookeeper_config=zk_tls).validate()

    def start(self) -> None:
        """Create the link (or bring a previous run's up to date: same name, the copy goes on where it ended)."""
        c, link = self.cluster, self.link()
        client = zk_connect(c.offline_zk, create_chroot=False)
        try:
            store = MirrorLinkStore(client)
            try:
                store.create(link)
                verb = "created"
            except LinkExistsError:
                store.update(link.name, source_zookeeper=link.source_zookeeper, include=link.include,
                             exclude=link.exclude, source_config=link.source_config,
                             source_zookeeper_config=link.source_zookeeper_config, state=link.state)
                verb = "kept"
        finally:
            client.stop()
            client.close()
        c.progress.say(f"mirror link {link.name} {verb} on the offline cluster (ferry mirror link create {link.name} "
                       f"--zookeeper {c.offline_zk} --source-zookeeper {c.live_zk} --include '{LINK_INCLUDE}'"
                       + (" --source-config FILE" if link.source_config else "")
                       + "): the offline broker's partition leaders pull from the live brokers")

    def _links(self) -> dict:
        docs = [d for d in links_status(self.cluster.offline_zk) if d["name"] == LINK_NAME]
        return docs[0] if docs else {"name": LINK_NAME, "state": "missing", "partitions": []}

    def _rows(self) -> tuple[dict, list[tuple[str, int, int, int]]]:
        """The link's doc and per partition (topic, partition, live end now, copied to)."""
        c = self.cluster
        doc = self._links()
        copied = {(p["topic"], p["partition"]): p["copied_to"] for p in doc["partitions"]}
        # the live ends afresh (ListOffsets as the monitor user): a report is up to 2 s old
        live = mirror_status(c.live_zk, None, GROUP, include=INCLUDE, source_client=c.client("live", "monitor"))
        rows = [(r.topic, r.partition, r.live_end if r.live_end is not None else -1, copied.get((r.topic, r.partition), -1))
                for r in live.partitions]
        return doc, rows

    def lag(self) -> tuple[int, set[str]]:
        _, rows = self._rows()
        lag = sum(max(end - max(to, 0), 0) for _, _, end, to in rows)
        return lag, {t for t, _, end, to in rows if to >= 0 or end == 0}

    def _offline_brokers(self) -> list[BrokerProcess]:
        return [b for b in self.cluster.brokers if b.datacenter == "offline"]

    def crash(self, i: int, kills: int) -> str:
        """The link's copy runs in the offline broker: kill it (-9) and start it again; its leaders resume where
        the offline log says the copy ends."""
        victim = self._offline_brokers()[(i - 1) % len(self._offline_brokers())]
        victim.kill()
        victim.start(timeout=60)  # waits out the killed process's ZooKeeper session
        return (f"chaos: offline broker {victim.broker_id} (copying for mirror link {LINK_NAME}) killed with -9 "
                f"({i}/{kills}) while copying; started again")

    def chaos_summary(self) -> str:
        """How the restarted broker's leaders resumed (their log lines: the live offset the offline log ends at)."""
        resumed = []
        for b in self._offline_brokers():
            text = b.log_file.read_text(errors="replace") if b.log_file.exists() else ""
            resumed += [int(n) for n in self.RESUME_LINE.findall(text)]
        beyond = [n for n in resumed if n]
        return (f"chaos: the restarted offline broker's leaders resumed {len(resumed)} partition copies from the "
                f"offline log, {len(beyond)} of them past live offset 0 (where its log said the copy ended: "
                "nothing copied twice)")

    def view(self) -> MirrorView:
        doc, rows = self._rows()
        per_topic: dict[str, list[int]] = {}
        for topic, _, end, to in rows:
            agg = per_topic.setdefault(topic, [0, 0, 0, 0])
            agg[0] += 1
            agg[1] += max(end, 0)
            agg[2] += max(to, 0)
            agg[3] += max(end - max(to, 0), 0)
        brokers = ", ".join(str(b.broker_id) for b in self._offline_brokers())
        return MirrorView(f"Mirror (link {LINK_NAME} on offline broker(s) {brokers}: {doc['state']})",
                          ("topic", "partitions", "live end", "copied to", "lag"), per_topic, doc)


def demo_mirror(kind: str, cluster: DemoCluster) -> DemoMirror:
    return LinkDemoMirror(cluster) if kind == LINK else StandaloneDemoMirror(cluster)


def keep_kind(root: Path, kind: str) -> None:
    """A demo directory keeps the mirror kind it was first run with: the two kinds keep their positions apart
    (the group's offsets, the link's producer id in the offline log), so a switch would copy everything once
    more. Checked before anything starts (UsageError: one line, exit 2)."""
    marker = root / "mirror-kind"
    before = marker.read_text().strip() if marker.exists() else None
    if before is not None and before != kind:
        raise UsageError(f"{root} was run with --mirror {before}: use --mirror {before}, or --clean to start "
                         f"over with --mirror {kind}")
    marker.write_text(kind + "\n")


def wait_mirrored(mirror: DemoMirror, produced: dict[str, int], timeout_s: float = 120.0) -> None:
    """Wait until the mirror copied every live message of the produced topics (lag 0)."""
    progress = mirror.cluster.progress
    deadline = time.monotonic() + timeout_s
    lag = -1
    while time.monotonic() < deadline:
        lag, topics = mirror.lag()
        if lag == 0 and topics >= set(produced):
            progress.say("mirror caught up: lag 0 on every partition")
            return
        progress.say(f"mirror lag {lag} messages")
        time.sleep(1.0)
    where = "mirror.out" if mirror.kind == STANDALONE else "offline/broker-*.out"
    raise RuntimeError(f"mirror still {lag} messages behind after {timeout_s:.0f}s (see {where} under the demo's dir)")


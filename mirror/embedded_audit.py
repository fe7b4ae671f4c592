"""LinkAuditor: the mirror tier's audit counts of one link's copies, exact per bucket, published once per range.

The standalone mirror's rule (checkpoint_keeper.py), kept with the offline log as the source: per offline
partition a small znode (``/mirror/link_audit/<link>/<topic>-<partition>``, offline ZooKeeper) says up to which
offline offset the link's batches are counted and published, and which range is being published. The leader
declares a range up to the partition's high watermark (committed and flushed: no leader change or restart
takes it back), counts the
link's batches in it from its own log (audit_tally.count_batch, the standalone mirror's counting), sends the
events under guids derived from the range, and only then moves the mark past it. A leader that finds a
declared range (its own after a failed send, or its predecessor's after a kill -9) counts the same range again
from its log, which holds the same batches below the high watermark, and sends the same guids: the reconciler
counts them once. `_audit` itself is not counted.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.broker.log.log import Log
from ferry.broker.server.partition import Partition
from ferry.mirror.audit_sender import AuditEventSender
from ferry.mirror.audit_tally import count_batch
from ferry.mirror.checkpoint_keeper import range_event
from ferry.mirror.embedded_copier import link_batches
from ferry.mirror.sync_loop import SyncLoop
from ferry.zk.topic_name import AUDIT_TOPIC

log = logging.getLogger("ferry.mirror.embedded")

AUDIT_PATH = "/mirror/link_audit"
AUDIT_INTERVAL_S = 5.0
APPLICATION = "ferry-mirror"
TopicPartition = tuple[str, int]


def audit_path(link: str, topic: str, partition: int) -> str:
    return f"{AUDIT_PATH}/{link}/{topic}-{partition}"


def count_range(lg: Log, producer_id: int, start: int, end: int) -> Counter:
    """Records per bucket start of the link's batches in [start, end) of ``lg``."""
    counts: Counter = Counter()
    for h, batch in link_batches(lg, producer_id, start, end):
        count_batch(counts, batch, h)
    return counts


class LinkAuditor:
    def __init__(self, link: str, producer_id: int, client: Callable[[], KazooClient], sender: AuditEventSender,
                 datacenter: str, interval_s: float = AUDIT_INTERVAL_S) -> None:
        self.link = link
        self.producer_id = producer_id
        self.client = client
        self.sender = sender
        self.fields = {"host": socket.gethostname(), "datacenter": datacenter, "application": APPLICATION}
        self.partitions: dict[TopicPartition, Partition] = {}  # led here and copied (set by the LinkRunner)
        # where a partition's first count may start when it has no mark yet: the offline log end when its copier
        # began with nothing of the link's in the log (PartitionCopier.fresh_from); else the log start
        self.starts: dict[TopicPartition, int] = {}
        self.loop = SyncLoop(f"mirror-link-{link}-audit", interval_s, self.run_pass, self._failed)

    def start(self) -> LinkAuditor:
        self.loop.start()
        return self

    def stop(self) -> None:
        self.loop.stop()
        self.sender.close()

    def _failed(self, exc: Exception) -> None:
        log.warning("mirror link %s: audit pass failed (%s); retrying", self.link,
                    " ".join((str(exc) or type(exc).__name__).split()))

    def run_pass(self) -> bool:
        ok = True
        for tp, part in list(self.partitions.items()):
            if tp[0] != AUDIT_TOPIC and part.is_leader and not part.log.offline:
                ok = self.audit(tp, part) and ok
        return ok

    def audit(self, tp: TopicPartition, part: Partition) -> bool:
        """Publish what is committed and not yet counted; True when nothing is left pending."""
        mark, version = self._read(tp, max(self.starts.get(tp, 0), part.log.log_start_offset))
        if mark["publishing"] is None:
            end = min(part.replication_hw, part.log.high_watermark)  # replicated and flushed: never taken back
            if end <= mark["audited"]:
                return True
            counts = count_range(part.log, self.producer_id, mark["audited"], end)
            if not counts:
                return self._write(tp, {"audited": end, "publishing": None}, version) is not None
            mark = {"audited": mark["audited"], "publishing": [mark["audited"], end]}
            version = self._write(tp, mark, version)
            if version is None:
                return False
        else:
            counts = count_range(part.log, self.producer_id, *mark["publishing"])
        a, b = mark["publishing"]
        now = int(time.time() * 1000)
        events = [range_event(f"embedded/{self.link}/{tp[0]}/{tp[1]}/{a}-{b}/{bucket}", tp[0], bucket, n, now,
                              self.fields) for bucket, n in sorted(counts.items()) if n > 0]
        if events and not self.sender.send(events):
            log.warning("mirror link %s: %s-%d: audit counts of [%d, %d) not acknowledged; sending them again later",
                        self.link, tp[0], tp[1], a, b)
            return False
        return self._write(tp, {"audited": b, "publishing": None}, version) is not None

    def _read(self, tp: TopicPartition, log_start: int) -> tuple[dict, int]:
        client = self.client()
        path = audit_path(self.link, *tp)
        try:
            data, stat = client.get(path)
            return json.loads(data.decode()), stat.version
        except NoNodeError:
            client.ensure_path(f"{AUDIT_PATH}/{self.link}")
            mark = {"audited": log_start, "publishing": None}
            try:
                client.create(path, json.dumps(mark).encode())
            except NodeExistsError:
                return self._read(tp, log_start)
            return mark, 0

    def _write(self, tp: TopicPartition, mark: dict, version: int) -> int | None:
        """The new version, or None: another leader wrote meanwhile (the next pass reads its mark)."""
        try:
            return self.client().set(audit_path(self.link, *tp), json.dumps(mark).encode(), version=version).version
        except (BadVersionError, NoNodeError):
            return None

"""`ferry mirror status` of the standalone mirror: per partition live end, committed offset, lag, lag in seconds,
messages per second, offline end, owner.

Everything is read from the outside (the live ZooKeeper's group nodes, ListOffsets and a Fetch on the live
cluster, ListOffsets on the offline one), so it works whether or not a mirror process runs, and from any machine.
Lag in seconds and the rate mean what they mean for a link (copy_lag.py, copy_timestamps.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ferry.client.bootstrap import broker_addresses
from ferry.client.group_store import read_members, read_offsets, read_owners
from ferry.client.topic_selection import TopicFilter
from ferry.client.wire_client import WireClient
from ferry.mirror.copy_lag import lag_seconds as age_of_last_copied
from ferry.mirror.copy_status import CopyRow, format_table
from ferry.mirror.copy_timestamps import commit_rates, last_copied_timestamps
from ferry.mirror.link_progress import COPYING
from ferry.mirror.mirror_maker import mirrored_include
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol.list_offsets import LATEST_TIMESTAMP
from ferry.wire.sasl_login import AuthenticationError
from ferry.zk.cluster_registry import ClusterRegistry

WAITING_FOR_OWNER = "waiting for an owner"
OWNER_UNKNOWN = "owner not known (--source-zookeeper shows it)"


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    live_end: int | None
    committed: int | None
    lag: int | None
    offline_end: int | None
    owner: str | None
    lag_seconds: float | None = None  # the age of the last copied message while messages wait, 0 caught up
    messages_per_s: float | None = None  # committed offsets' movement between two readings (None: not measured)
    owners_known: bool = True  # False over --bootstrap-server: the owners are in the live ZooKeeper only

    @property
    def state(self) -> str:
        """copying while a member owns the partition; else waiting for one (no mirror process runs it)."""
        if not self.owners_known:
            return OWNER_UNKNOWN
        return COPYING if self.owner else WAITING_FOR_OWNER

    def row(self) -> CopyRow:
        """This partition in the table both mirror kinds share."""
        return CopyRow(self.topic, self.partition, self.live_end, self.committed, self.lag, self.lag_seconds,
                       self.state, self.messages_per_s, self.owner)


@dataclass
class MirrorStatus:
    group: str
    members: list[str] | None  # None: not known (read over --bootstrap-server)
    partitions: list[PartitionStatus]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None)

    def to_dict(self) -> dict:
        return {"group": self.group, "members": self.members, "total_lag": self.total_lag,
                "partitions": [{**asdict(p), **p.row().to_dict()} for p in self.partitions]}


def _end_offsets(registry: ClusterRegistry, wanted: list[tuple[str, int]], config: ClientConfig,
                 copied_to: dict[tuple[str, int], int] | None = None
                 ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Log ends (ListOffsets latest) as ``config`` reaches the brokers, and with ``copied_to`` the timestamps of
    the last copied records (copy_timestamps.py); {} when they cannot tell, but a refused login is raised (an
    unknown lag is not what a wrong password should look like)."""
    brokers = registry.brokers()
    if not brokers or not wanted:
        return {}, {}
    client = WireClient(lambda: broker_addresses(brokers, config.security_protocol), "ferry-mirror-status", timeout_s=10,
                        security=config.security())
    try:
        res = client.list_offsets({tp: LATEST_TIMESTAMP for tp in wanted})
        ends = {tp: r.offset for tp, r in res.items() if r.error_code == 0 and r.offset >= 0}
        behind = {tp: c for tp, c in (copied_to or {}).items() if ends.get(tp, 0) > c}
        try:
            return ends, last_copied_timestamps(client, behind) if behind else {}
        except Exception:  # noqa: BLE001 - the lag in seconds unknown, the ends still shown
            return ends, {}
    except AuthenticationError:
        raise
    except Exception:
        return {}, {}
    finally:
        client.close()


def mirror_status(source_zookeeper: str, target_zookeeper: str | None, group: str,
                  include: str | None = None, exclude: str | None = None, *,
                  source_client: ClientConfig | None = None, target_client: ClientConfig | None = None,
                  rate_interval_s: float = 0.0) -> MirrorStatus:
    """The group's committed and owned partitions, less the topics ``exclude`` takes out; with ``include``,
    also the partitions the mirror would copy (its own filter) that nobody committed yet. ``rate_interval_s``
    > 0: the committed offsets are read again after that long for the rate (else messages/s is unknown)."""
    mirrored = TopicFilter(mirrored_include(include if include is not None else ""), exclude)
    source = ClusterRegistry(source_zookeeper).start()
    target = ClusterRegistry(target_zookeeper).start() if target_zookeeper else None
    try:
        zk = source.client
        offsets = read_offsets(zk, group)
        owners = read_owners(zk, group)
        members = sorted(read_members(zk, group))
        keys = {tp for tp in set(offsets) | set(owners) if not mirrored.excludes(tp[0])}
        if include is not None:
            for name, info in source.topics().items():
                if mirrored.matches(name):
                    keys.update((name, p) for p in info.partitions)
        wanted = sorted(keys)
        rates: dict[tuple[str, int], float] = {}
        if rate_interval_s > 0:  # the rows then show the second reading
            rates, latest = commit_rates(zk, group, wanted, rate_interval_s)
            offsets.update(latest)
            owners = read_owners(zk, group)
        live_end, copied_ts = _end_offsets(source, wanted, source_client or ClientConfig.plaintext(), offsets)
        offline_end = _end_offsets(target, wanted, target_client or ClientConfig.plaintext())[0] \
            if target is not None else {}
        rows = []
        for tp in wanted:
            end, committed = live_end.get(tp), offsets.get(tp)
            lag = None
            if end is not None:
                lag = max(end - (committed if committed is not None else 0), 0)
            rows.append(PartitionStatus(tp[0], tp[1], end, committed, lag, offline_end.get(tp), owners.get(tp),
                                        age_of_last_copied(lag, copied_ts.get(tp)), rates.get(tp)))
        return MirrorStatus(group, members, rows)
    finally:
        source.stop()
        if target is not None:
            target.stop()


def format_status(status: MirrorStatus) -> str:
    members = "members not known over --bootstrap-server (--source-zookeeper lists them)" \
        if status.members is None else f"{len(status.members)} member(s)" + \
        (": " + ", ".join(status.members) if status.members else "")
    lines = [f"group {status.group}: {members}", f"total lag: {status.total_lag} message(s)"]
    if not status.partitions:
        lines.append("no partitions committed or owned by this group (yet)")
        return "\n".join(lines)
    return "\n".join(lines + format_table([p.row() for p in status.partitions]))

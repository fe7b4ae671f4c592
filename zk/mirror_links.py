"""Mirror links: what the offline brokers' embedded mirror pulls, stored in the offline cluster's ZooKeeper.

One znode per link, ``/mirror/links/<name>`` (JSON), written by `ferry mirror link ...` and watched by every
offline broker (the embedded mirror host): a link names one live cluster (its ZooKeeper), the topics to pull
(include/exclude, whole-name regular expressions), an optional librdkafka properties file for the connection
to the live brokers, whether it runs or is paused, and the producer id its copied batches carry offline
(allocated once by the first broker that runs the link, so every leader of every partition of the link, now
and later, stamps the same id: the offline log then says where the copy of each live partition ends).

The producer id outlives the link: ``/mirror/link_ids/<name>`` keeps it (with the live ZooKeeper it pulled from)
once the link is deleted, and a link created again from that live cluster takes it back (under the same name,
or under a new one when no other link uses it). Its leaders then find their copy's end in the offline log as
before and resume there: deleting and re-creating a link never copies anything a second time.

One link per live cluster: a second link whose --source-zookeeper names the same ZooKeeper (a host in common,
the same chroot) is refused at create and alter, since two links would copy the same records twice into one
offline partition (each has its own producer id, so its own position). A live cluster reached under two
addresses is caught when the links run (mirror/link_overlap.py), by the identity the first broker running a
link stores in it (``source_cluster``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.zk.errors import RegistryError
from ferry.zk.zk_connect import ZkConnect

LINKS_PATH = "/mirror/links"
IDS_PATH = "/mirror/link_ids"
RUNNING = "running"
PAUSED = "paused"
STATES = (RUNNING, PAUSED)
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


class UnknownLinkError(RegistryError, KeyError):
    """A link name that is not stored (describe/pause/resume/delete of a missing link)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown link"


class LinkExistsError(RegistryError):
    """create of a name that is taken."""


class InvalidLinkError(RegistryError, ValueError):
    """A link definition that cannot work (a bad name, regex or ZooKeeper connect string)."""


class OverlappingLinkError(InvalidLinkError):
    """A second link from a live cluster that a stored link already copies (it would copy everything twice)."""


def same_zookeeper(a: str, b: str) -> bool:
    """Whether two connect strings reach one cluster: the same chroot on a ZooKeeper host they share."""
    x, y = ZkConnect.parse(a), ZkConnect.parse(b)
    return x.chroot.rstrip("/") == y.chroot.rstrip("/") and bool(set(x.hosts.split(",")) & set(y.hosts.split(",")))


def link_path(name: str) -> str:
    return f"{LINKS_PATH}/{name}"


def id_path(name: str) -> str:
    return f"{IDS_PATH}/{name}"


@dataclass(frozen=True)
class MirrorLink:
    name: str
    source_zookeeper: str
    include: str
    exclude: str | None = None
    source_config: str | None = None  # a librdkafka properties file (path on the offline brokers)
    # the live ZooKeeper's client TLS settings (a --zk-tls-config-file: zookeeper.ssl.*, on the offline brokers)
    source_zookeeper_config: str | None = None
    state: str = RUNNING
    producer_id: int = -1  # -1: not allocated yet (the first broker running the link allocates it)
    # the live cluster's identity as a broker running the link read it (link_overlap.live_cluster_identity)
    source_cluster: str | None = None

    def validate(self) -> MirrorLink:
        if not _NAME.fullmatch(self.name):
            raise InvalidLinkError(f"link name {self.name!r} must be 1-100 of A-Z a-z 0-9 . _ -")
        for flag, regex in (("--include", self.include), ("--exclude", self.exclude)):
            if regex is None:
                continue
            try:
                re.compile(regex)
            except re.error as e:
                raise InvalidLinkError(f"{flag} {regex!r} is not a regular expression: {e}") from None
        if not self.include:
            raise InvalidLinkError("--include REGEX is required")
        ZkConnect.parse(self.source_zookeeper)  # InvalidZkConnectError (a RegistryError) names the problem
        if self.state not in STATES:
            raise InvalidLinkError(f"state {self.state!r} is not one of {', '.join(STATES)}")
        return self

    def encode(self) -> bytes:
        return json.dumps({"version": 1, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def decode(cls, name: str, data: bytes) -> MirrorLink:
        try:
            doc = json.loads(data.decode())
            return cls(name=name, source_zookeeper=doc["source_zookeeper"], include=doc["include"],
                       exclude=doc.get("exclude"), source_config=doc.get("source_config"),
                       source_zookeeper_config=doc.get("source_zookeeper_config"),
                       state=doc.get("state", RUNNING), producer_id=int(doc.get("producer_id", -1)),
                       source_cluster=doc.get("source_cluster"))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise InvalidLinkError(f"mirror link {name}: unreadable znode ({e})") from None


class MirrorLinkStore:
    """Typed access to the links of one (offline) cluster, through the cluster's kazoo client."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    def create(self, link: MirrorLink) -> MirrorLink:
        """Store ``link``; a link of that name deleted before, from the same live cluster, gets its producer id
        back (its copy resumes where the offline log says it ended)."""
        link.validate()
        self.refuse_overlap(link.name, link.source_zookeeper)
        if link.producer_id < 0:
            kept = self.kept_producer_id(link.name, link.source_zookeeper)
            if kept is not None:
                link = replace(link, producer_id=kept)
        self.client.ensure_path(LINKS_PATH)
        try:
            self.client.create(link_path(link.name), link.encode())
        except NodeExistsError:
            raise LinkExistsError(f"mirror link {link.name!r} already exists") from None
        return link

    def refuse_overlap(self, name: str, source_zookeeper: str) -> None:
        """OverlappingLinkError if another stored link pulls from the same live ZooKeeper (one link per cluster)."""
        for other in self.all():
            if other.name != name and same_zookeeper(other.source_zookeeper, source_zookeeper):
                raise OverlappingLinkError(
                    f"mirror link {other.name!r} already copies from {other.source_zookeeper}: a second link from "
                    f"that live cluster would copy its records twice (widen {other.name!r}'s --include instead)")

    def creation_order(self, names: list[str]) -> dict[str, int]:
        """{name: the link znode's creation zxid}: which of two links came first (the older keeps a topic both
        would copy from one live cluster, link_overlap.py)."""
        out = {}
        for name, request in [(n, self.client.exists_async(link_path(n))) for n in names]:
            stat = request.get()
            if stat is not None:
                out[name] = stat.czxid
        return out

    def get(self, name: str, watch: Callable | None = None) -> tuple[MirrorLink, int]:
        """(link, znode version); UnknownLinkError if there is none. ``watch``: kazoo's one-shot data watch."""
        try:
            data, stat = self.client.get(link_path(name), watch=watch)
        except NoNodeError:
            raise UnknownLinkError(f"no mirror link {name!r}") from None
        return MirrorLink.decode(name, data), stat.version

    def names(self, watch: Callable | None = None) -> list[str]:
        try:
            return sorted(self.client.get_children(LINKS_PATH, watch=watch))
        except NoNodeError:
            if watch is not None:  # no link yet: told when /mirror/links appears
                self.client.exists(LINKS_PATH, watch=watch)
            return []

    def all(self, watch: Callable | None = None) -> list[MirrorLink]:
        """Every stored link; ``watch`` (one-shot, kazoo's thread) fires on the next create, change or delete."""
        out = []
        for name in self.names(watch):
            try:
                out.append(self.get(name, watch)[0])
            except (UnknownLinkError, InvalidLinkError):
                continue  # deleted meanwhile, or written by hand wrongly (the brokers log it)
        return out

    def update(self, name: str, **changes: object) -> MirrorLink:
        """Change fields of a stored link (read, then write conditionally on the version; retried on a race); a new
        --source-zookeeper that another link pulls from is refused (OverlappingLinkError)."""
        source = changes.get("source_zookeeper")
        if isinstance(source, str):
            self.refuse_overlap(name, source)
        for _ in range(10):
            link, version = self.get(name)
            new = replace(link, **changes)
            try:
                self.client.set(link_path(name), new.encode(), version=version)
                return new
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownLinkError(f"no mirror link {name!r}") from None
        raise RuntimeError(f"mirror link {name!r} kept changing under the update; try again")

    def set_producer_id_if_unset(self, name: str, producer_id: int) -> MirrorLink:
        """The link's producer id: ``producer_id`` if none was stored yet, else the stored one (first wins).
        Kept under /mirror/link_ids in the same transaction (it outlives the link)."""
        for _ in range(10):
            link, version = self.get(name)
            if link.producer_id >= 0:
                return link
            new = replace(link, producer_id=producer_id)
            tx = self.client.transaction()
            tx.set_data(link_path(name), new.encode(), version=version)
            self._keep_id(tx, new)
            if _committed(tx.commit(), name):
                return new
        raise RuntimeError(f"mirror link {name!r} kept changing while its producer id was set")

    def kept_producer_id(self, name: str, source_zookeeper: str) -> int | None:
        """The producer id a deleted link copied from ``source_zookeeper`` with: the one named ``name`` first, else
        one under another name (a link re-created under a new name) that no stored link uses now; None if none."""
        kept = {}
        try:
            names = self.client.get_children(IDS_PATH)
        except NoNodeError:
            return None
        for n in names:
            try:
                data, _ = self.client.get(id_path(n))
                doc = json.loads(data.decode())
                if doc.get("source_zookeeper") == source_zookeeper:  # another live cluster: another copy
                    kept[n] = int(doc["producer_id"])
            except (NoNodeError, ValueError, KeyError, TypeError, UnicodeDecodeError):
                continue
        in_use = {lk.producer_id for lk in self.all()}  # two links never share an id (two copies of a partition)
        if name in kept and kept[name] not in in_use:
            return kept[name]
        return next((pid for _, pid in sorted(kept.items()) if pid not in in_use), None)

    def delete(self, name: str) -> None:
        """Remove the link (its brokers stop it within a second: they watch /mirror/links), keeping its producer
        id under /mirror/link_ids in the same transaction."""
        for _ in range(10):
            link, version = self.get(name)
            tx = self.client.transaction()
            tx.delete(link_path(name), version=version)
            if link.producer_id >= 0:
                self._keep_id(tx, link)
            if _committed(tx.commit(), name):
                return
        raise RuntimeError(f"mirror link {name!r} kept changing while it was deleted; try again")

    def _keep_id(self, tx: TransactionRequest, link: MirrorLink) -> None:
        doc = json.dumps({"producer_id": link.producer_id, "source_zookeeper": link.source_zookeeper},
                         sort_keys=True).encode()
        self.client.ensure_path(IDS_PATH)
        if self.client.exists(id_path(link.name)) is None:
            tx.create(id_path(link.name), doc)
        else:
            tx.set_data(id_path(link.name), doc)


def _committed(results: list, name: str) -> bool:
    """Whether a transaction committed; False when a conditional step lost a race (the caller reads again)."""
    if not any(isinstance(r, Exception) for r in results):
        return True
    if any(isinstance(r, NoNodeError) for r in results):
        raise UnknownLinkError(f"no mirror link {name!r}") from None
    if any(isinstance(r, BadVersionError | NodeExistsError) for r in results):
        return False
    raise next(r for r in results if isinstance(r, Exception))

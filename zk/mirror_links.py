"""Mirror links: what the offline brokers' embedded mirror pulls, stored in the offline cluster's ZooKeeper.

One znode per link, ``/mirror/links/<name>`` (JSON), written by `ferry mirror link ...` and watched by every
offline broker (the embedded mirror host): a link names one live cluster (its ZooKeeper), the topics to pull
(include/exclude, whole-name regular expressions), an optional librdkafka properties file for the connection
to the live brokers, whether it runs or is paused, and the producer id its copied batches carry offline
(allocated once by the first broker that runs the link, so every leader of every partition of the link, now
and later, stamps the same id: the offline log then says where the copy of each live partition ends).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.zk.errors import RegistryError
from ferry.zk.zk_connect import ZkConnect

LINKS_PATH = "/mirror/links"
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


def link_path(name: str) -> str:
    return f"{LINKS_PATH}/{name}"


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
                       state=doc.get("state", RUNNING), producer_id=int(doc.get("producer_id", -1)))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise InvalidLinkError(f"mirror link {name}: unreadable znode ({e})") from None


class MirrorLinkStore:
    """Typed access to the links of one (offline) cluster, through the cluster's kazoo client."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    def create(self, link: MirrorLink) -> MirrorLink:
        link.validate()
        self.client.ensure_path(LINKS_PATH)
        try:
            self.client.create(link_path(link.name), link.encode())
        except NodeExistsError:
            raise LinkExistsError(f"mirror link {link.name!r} already exists") from None
        return link

    def get(self, name: str) -> tuple[MirrorLink, int]:
        """(link, znode version); UnknownLinkError if there is none."""
        try:
            data, stat = self.client.get(link_path(name))
        except NoNodeError:
            raise UnknownLinkError(f"no mirror link {name!r}") from None
        return MirrorLink.decode(name, data), stat.version

    def names(self) -> list[str]:
        try:
            return sorted(self.client.get_children(LINKS_PATH))
        except NoNodeError:
            return []

    def all(self) -> list[MirrorLink]:
        out = []
        for name in self.names():
            try:
                out.append(self.get(name)[0])
            except (UnknownLinkError, InvalidLinkError):
                continue  # deleted meanwhile, or written by hand wrongly (the brokers log it)
        return out

    def update(self, name: str, **changes: object) -> MirrorLink:
        """Change fields of a stored link (read, then write conditionally on the version; retried on a race)."""
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
        """The link's producer id: ``producer_id`` if none was stored yet, else the stored one (first wins)."""
        for _ in range(10):
            link, version = self.get(name)
            if link.producer_id >= 0:
                return link
            try:
                new = replace(link, producer_id=producer_id)
                self.client.set(link_path(name), new.encode(), version=version)
                return new
            except BadVersionError:
                continue
        raise RuntimeError(f"mirror link {name!r} kept changing while its producer id was set")

    def delete(self, name: str) -> None:
        try:
            self.client.delete(link_path(name))
        except NoNodeError:
            raise UnknownLinkError(f"no mirror link {name!r}") from None

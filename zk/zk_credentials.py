"""ZooKeeper credentials and the ACLs ferry puts on its znodes (Kafka's ``zookeeper.set.acl``).

Without credentials every znode is open (ZooKeeper's default, as before). With them, every ferry process
authenticates with ZooKeeper's built-in ``digest`` scheme and creates its znodes readable by everyone but
writable only by that identity, as Kafka's secure mode does; the znodes holding secrets (SCRAM credentials
under ``/config/users``) are not even readable by others. All of a cluster's processes and tools share the
one identity: the controller rewrites what a broker created, an operator's `ferry topics` what the
controller created.

The credentials come from a file named by ``$FERRY_ZOOKEEPER_CREDENTIALS`` (``username=`` and ``password=``
lines), so that every ferry command and service finds them the same way and the password never appears
on a command line (Kafka passes its JAAS file the same way, through the environment).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.security import ACL, READ_ACL_UNSAFE, make_digest_acl

from ferry.zk.errors import RegistryError

ENV_CREDENTIALS = "FERRY_ZOOKEEPER_CREDENTIALS"
# Subtrees whose data is secret: readable only with the credentials (Kafka: ZkData.sensitivePath).
SENSITIVE_PATHS = ("/config/users",)


class ZkCredentialsError(RegistryError):
    """The credentials file is missing, unreadable or not ``username=``/``password=``."""


@dataclass(frozen=True)
class ZkCredentials:
    """A digest identity: the user name and password ZooKeeper hashes into the ACL."""

    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"ZkCredentials(username={self.username!r})"

    @classmethod
    def from_file(cls, path: str) -> ZkCredentials:
        """Read ``username=`` and ``password=`` lines (``#`` comments allowed); raises ZkCredentialsError."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ZkCredentialsError(f"cannot read the ZooKeeper credentials file {path}: "
                                     f"{e.strerror or e}") from None
        values: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ZkCredentialsError(f"{path} line {number}: expected key=value")
            values[key.strip()] = value.strip()
        username, password = values.get("username", ""), values.get("password", "")
        if not username or not password:
            raise ZkCredentialsError(f"{path}: needs a username= and a password= line")
        if ":" in username:
            raise ZkCredentialsError(f"{path}: a digest user name cannot contain ':'")
        return cls(username, password)

    @classmethod
    def from_environment(cls) -> ZkCredentials | None:
        """The credentials named by $FERRY_ZOOKEEPER_CREDENTIALS, or None when it is unset or empty."""
        path = os.environ.get(ENV_CREDENTIALS, "").strip()
        return cls.from_file(path) if path else None

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """What KazooClient(auth_data=...) sends when a session starts."""
        return [("digest", f"{self.username}:{self.password}")]

    def owner_acl(self) -> ACL:
        return make_digest_acl(self.username, self.password, all=True)

    def default_acl(self) -> list[ACL]:
        """Everyone reads, only this identity writes (Kafka's secure ACL for non-sensitive znodes)."""
        return [self.owner_acl(), *READ_ACL_UNSAFE]

    def private_acl(self) -> list[ACL]:
        """Only this identity reads or writes."""
        return [self.owner_acl()]

    def acl_for(self, path: str) -> list[ACL]:
        """The ACL a znode at ``path`` (relative to the cluster's chroot) should carry."""
        return self.private_acl() if is_sensitive(path) else self.default_acl()


def private_acl_of(client: KazooClient) -> list[ACL] | None:
    """The ACL for a secret znode made through ``client``: its secure default without the world's read (None when
    the client is not secured: the znode stays open like the rest)."""
    own = [acl for acl in (client.default_acl or ()) if acl.id.scheme != "world"]
    return own or None


def is_sensitive(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in SENSITIVE_PATHS)


def loose_file_mode(path: str) -> bool:
    """True when others than the owner may read the credentials file (worth a warning)."""
    try:
        return bool(os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False

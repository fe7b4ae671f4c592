"""ZooKeeper connect strings: ``host:port[,host:port...][/chroot]``.

Every cluster lives under its own chroot (``/ferry/live``, ``/ferry/offline``) so that two clusters can
share one ZooKeeper ensemble. The string is validated here, once, so that a typo fails with a message
that says what is wrong instead of a kazoo traceback or, worse, a silently different chroot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ferry.zk.errors import InvalidZkConnectError

_HOST_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)$")
# ZooKeeper forbids these in path elements (PathUtils.validatePath): NUL, control and some unicode ranges.
_BAD_PATH_CHARS = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


@dataclass(frozen=True)
class ZkConnect:
    """A parsed connect string. ``chroot`` is "" when the cluster lives at the ZooKeeper root."""

    hosts: str
    chroot: str = ""

    @classmethod
    def parse(cls, text: str, default_port: int = 2181) -> ZkConnect:
        """Parse and validate ``host:port[,host:port]/chroot``; raises InvalidZkConnectError."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidZkConnectError("empty ZooKeeper connect string (expected host:port[,host:port]/chroot)")
        text = text.strip()
        hosts_part, slash, chroot_part = text.partition("/")
        chroot = _validate_chroot("/" + chroot_part, text) if slash else ""
        if not hosts_part:
            raise InvalidZkConnectError(f"ZooKeeper connect string {text!r} has no host (expected host:port/chroot)")
        hosts = []
        for item in hosts_part.split(","):
            hosts.append(_validate_host_port(item.strip(), text, default_port))
        return cls(hosts=",".join(hosts), chroot=chroot)

    @property
    def host_list(self) -> list[tuple[str, int]]:
        out = []
        for item in self.hosts.split(","):
            host, _, port = item.rpartition(":")
            out.append((host.strip("[]"), int(port)))
        return out

    @property
    def kazoo_hosts(self) -> str:
        """The string to hand to ``KazooClient(hosts=...)`` (kazoo understands the chroot suffix)."""
        return self.hosts + self.chroot

    def child(self, path: str) -> ZkConnect:
        """The same ensemble with ``path`` appended to the chroot (e.g. a per-test namespace)."""
        return ZkConnect.parse(self.hosts + self.chroot + "/" + path.strip("/"))

    def __str__(self) -> str:
        return self.kazoo_hosts


def _validate_host_port(item: str, text: str, default_port: int) -> str:
    if not item:
        raise InvalidZkConnectError(f"ZooKeeper connect string {text!r} has an empty host entry")
    if item.startswith("["):  # [ipv6]:port
        host, _, rest = item.partition("]")
        host += "]"
        port_text = rest[1:] if rest.startswith(":") else None
        if rest and not rest.startswith(":"):
            raise InvalidZkConnectError(f"bad host {item!r} in ZooKeeper connect string {text!r}")
    elif item.count(":") > 1:
        raise InvalidZkConnectError(
            f"bad host {item!r} in ZooKeeper connect string {text!r} (write IPv6 addresses as [addr]:port)"
        )
    else:
        host, sep, port_text = item.partition(":")
        if not sep:
            port_text = None
    if not _HOST_RE.match(host):
        raise InvalidZkConnectError(f"bad host name {host!r} in ZooKeeper connect string {text!r}")
    if port_text is None or port_text == "":
        if port_text == "":
            raise InvalidZkConnectError(f"missing port after {host}: in ZooKeeper connect string {text!r}")
        port = default_port
    else:
        if not port_text.isdigit():
            raise InvalidZkConnectError(f"port {port_text!r} is not a number in ZooKeeper connect string {text!r}")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise InvalidZkConnectError(f"port {port} out of range 1-65535 in ZooKeeper connect string {text!r}")
    return f"{host}:{port}"


def _validate_chroot(chroot: str, text: str) -> str:
    if chroot == "/":
        return ""
    if chroot.endswith("/"):
        raise InvalidZkConnectError(f"chroot {chroot!r} must not end with '/' (in {text!r})")
    for part in chroot.split("/")[1:]:
        if part == "":
            raise InvalidZkConnectError(f"chroot {chroot!r} has an empty path element (in {text!r})")
        if part in (".", ".."):
            raise InvalidZkConnectError(f"chroot {chroot!r} may not contain '.' or '..' (in {text!r})")
        if "," in part or _looks_like_host(part):
            raise InvalidZkConnectError(
                f"chroot {chroot!r} looks like it contains a host; the chroot goes after ALL hosts "
                f"(host1:port,host2:port/chroot), in {text!r}"
            )
        if _BAD_PATH_CHARS.search(part):
            raise InvalidZkConnectError(f"chroot {chroot!r} contains a character ZooKeeper refuses (in {text!r})")
    return chroot


def _looks_like_host(part: str) -> bool:
    return bool(re.search(r":\d+$", part))

"""Securing an existing tree (Kafka's zookeeper-security-migration): when credentials are introduced into a
running deployment, the znodes created before are still open to everyone; this walks a cluster's tree and
gives every znode the ACL ferry would have created it with. ``unsecure`` undoes it (before the credentials
are taken away). Ephemeral znodes are included: they are re-created with the new ACL anyway on the next
session, but until then they must not stay writable by everyone."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE

from ferry.zk.zk_credentials import ZkCredentials


def _walk(client: KazooClient, path: str) -> list[str]:
    """Every znode at and below ``path``, parents first (a node deleted meanwhile is skipped)."""
    out, stack = [], [path]
    while stack:
        node = stack.pop()
        try:
            children = client.get_children(node)
        except NoNodeError:
            continue
        out.append(node)
        prefix = "" if node == "/" else node
        stack.extend(f"{prefix}/{child}" for child in sorted(children, reverse=True))
    return out


def secure_tree(client: KazooClient, credentials: ZkCredentials, path: str = "/") -> int:
    """Set the secure ACL on ``path`` and everything below (relative to the client's chroot); the count.
    The client must be authenticated with ``credentials`` (or the nodes open), else NoAuthError."""
    count = 0
    for node in _walk(client, path):
        if node == "/zookeeper" or node.startswith("/zookeeper/"):
            continue  # ZooKeeper's own quota/config nodes
        try:
            client.set_acls(node, credentials.acl_for(node))
        except NoNodeError:
            continue
        count += 1
    return count


def unsecure_tree(client: KazooClient, path: str = "/") -> int:
    """Open ``path`` and everything below to everyone again; the count."""
    count = 0
    for node in _walk(client, path):
        if node == "/zookeeper" or node.startswith("/zookeeper/"):
            continue
        try:
            client.set_acls(node, OPEN_ACL_UNSAFE)
        except NoNodeError:
            continue
        count += 1
    return count

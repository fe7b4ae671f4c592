"""A started, chrooted KazooClient for a ZkConnect, creating the chroot when it is missing.

kazoo cannot create its own chroot (every path it sends is prefixed with it), so a short-lived
unchrooted session makes the path first. Connecting is retried (short back-off) until ``timeout``:
a server that is still starting refuses sessions for a moment. Reconnection is retried forever: a
broker must outlive a ZooKeeper restart.

With ZooKeeper credentials (zk_credentials.py: $FERRY_ZOOKEEPER_CREDENTIALS) the session authenticates
with them and every znode it creates carries the secure ACL.
"""

from __future__ import annotations

import logging
import os

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from ferry.zk.errors import RegistryError, ZooKeeperUnavailableError
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.zk_credentials import ENV_CREDENTIALS, ZkCredentials, loose_file_mode

# errors after which a ZooKeeper operation may be retried once the session is back
TRANSIENT_ERRORS = (ConnectionLoss, SessionExpiredError)
log = logging.getLogger(__name__)
_warned_loose: set[str] = set()


def _retry_policy(max_tries: int) -> KazooRetry:
    return KazooRetry(max_tries=max_tries, delay=0.1, backoff=2, max_delay=1.0, ignore_expire=False)


def _start(client: KazooClient, zk: ZkConnect, timeout: float) -> None:
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailableError(f"cannot connect to ZooKeeper at {zk.hosts} within {timeout:g} s") from None


def _secured(credentials: ZkCredentials | None) -> dict:
    """KazooClient arguments for ``credentials`` (none: open znodes, ZooKeeper's default)."""
    if credentials is None:
        return {}
    return {"auth_data": credentials.auth_data, "default_acl": credentials.default_acl()}


def credentials_from_environment() -> ZkCredentials | None:
    """$FERRY_ZOOKEEPER_CREDENTIALS read now (a warning, once, when others may read the file)."""
    credentials = ZkCredentials.from_environment()
    path = os.environ.get(ENV_CREDENTIALS, "")
    if credentials is not None and path not in _warned_loose and loose_file_mode(path):
        _warned_loose.add(path)
        log.warning("the ZooKeeper credentials file %s is readable by others than its owner (chmod 600 it)", path)
    return credentials


def connect(
    zk: ZkConnect | str, timeout: float = 10.0, session_timeout: float | None = None, create_chroot: bool = True,
    credentials: ZkCredentials | None = None,
) -> KazooClient:
    """Return a connected KazooClient rooted at ``zk.chroot`` (created if missing, unless ``create_chroot``
    is false: then a missing chroot raises RegistryError, so that a read-only tool never leaves znodes behind).
    ``credentials``: the ZooKeeper identity; by default those of $FERRY_ZOOKEEPER_CREDENTIALS, if set.
    """
    zk = ZkConnect.parse(zk) if isinstance(zk, str) else zk
    session_timeout = timeout if session_timeout is None else session_timeout
    secured = _secured(credentials if credentials is not None else credentials_from_environment())
    if zk.chroot:
        root = KazooClient(hosts=zk.hosts, timeout=session_timeout, connection_retry=_retry_policy(-1), **secured)
        _start(root, zk, timeout)
        try:
            if create_chroot:
                # The chroot's ancestors stay open like ZooKeeper's root: clusters with other credentials
                # (live and offline under /ferry) can still make their chroots beside this one.
                parent = zk.chroot.rsplit("/", 1)[0]
                if parent:
                    root.ensure_path(parent, acl=OPEN_ACL_UNSAFE)
                root.ensure_path(zk.chroot)
            elif root.exists(zk.chroot) is None:
                raise RegistryError(f"ZooKeeper at {zk.hosts} has no {zk.chroot}: nothing was ever registered "
                                    "under that chroot (is the --zookeeper chroot right?)")
        finally:
            root.stop()
            root.close()
    client = KazooClient(
        hosts=zk.kazoo_hosts,
        timeout=session_timeout,
        connection_retry=_retry_policy(-1),
        command_retry=_retry_policy(5),
        **secured,
    )
    _start(client, zk, timeout)
    return client

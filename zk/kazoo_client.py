"""A started, chrooted KazooClient for a ZkConnect, creating the chroot when it is missing.

kazoo cannot create its own chroot (every path it sends is prefixed with it), so a short-lived
unchrooted session makes the path first. Connecting is retried (short back-off) until ``timeout``:
a server that is still starting refuses sessions for a moment. Reconnection is retried forever: a
broker must outlive a ZooKeeper restart.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from ferry.zk.errors import RegistryError, ZooKeeperUnavailableError
from ferry.zk.zk_connect import ZkConnect

# errors after which a ZooKeeper operation may be retried once the session is back
TRANSIENT_ERRORS = (ConnectionLoss, SessionExpiredError)


def _retry_policy(max_tries: int) -> KazooRetry:
    return KazooRetry(max_tries=max_tries, delay=0.1, backoff=2, max_delay=1.0, ignore_expire=False)


def _start(client: KazooClient, zk: ZkConnect, timeout: float) -> None:
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailableError(f"cannot connect to ZooKeeper at {zk.hosts} within {timeout:g} s") from None


def connect(
    zk: ZkConnect | str, timeout: float = 10.0, session_timeout: float | None = None, create_chroot: bool = True
) -> KazooClient:
    """Return a connected KazooClient rooted at ``zk.chroot`` (created if missing, unless ``create_chroot``
    is false: then a missing chroot raises RegistryError, so that a read-only tool never leaves znodes behind).
    """
    zk = ZkConnect.parse(zk) if isinstance(zk, str) else zk
    session_timeout = timeout if session_timeout is None else session_timeout
    if zk.chroot:
        root = KazooClient(hosts=zk.hosts, timeout=session_timeout, connection_retry=_retry_policy(-1))
        _start(root, zk, timeout)
        try:
            if create_chroot:
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
    )
    _start(client, zk, timeout)
    return client

"""A started, chrooted KazooClient for a ZkConnect, creating the chroot when it is missing.

kazoo cannot create its own chroot (every path it sends is prefixed with it), so a short-lived
unchrooted session makes the path first. Connecting is retried (short back-off) until ``timeout``:
a server that is still starting refuses sessions for a moment. Reconnection is retried forever: a
broker must outlive a ZooKeeper restart.

With ZooKeeper credentials (zk_credentials.py: $FERRY_ZOOKEEPER_CREDENTIALS) the session authenticates
with them and every znode it creates carries the secure ACL.

TLS is decided here, once, for every ferry ZooKeeper client (brokers, tools, the mirror link, the registry,
loaders, DAGs, dashboard): the settings passed in, else the process's (``use_tls``: a broker's
``zookeeper.ssl.*`` properties), else $FERRY_ZOOKEEPER_TLS_CONFIG (zk_tls.py; `--zk-tls-config-file` sets it).
A session that does not start within a second is diagnosed: a failed handshake or a plaintext client on a TLS
port is refused then, in one line, instead of waiting out the timeout.
"""

from __future__ import annotations

import logging
import os
import time

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from ferry.zk.errors import RegistryError, ZooKeeperUnavailableError
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.zk_credentials import ENV_CREDENTIALS, ZkCredentials, loose_file_mode
from ferry.zk.zk_tls import ZkTlsConfig, ZooKeeperTlsError, diagnose

# errors after which a ZooKeeper operation may be retried once the session is back
TRANSIENT_ERRORS = (ConnectionLoss, SessionExpiredError)
log = logging.getLogger(__name__)
_warned_loose: set[str] = set()
_process_tls: list[ZkTlsConfig | None] = []  # set by use_tls(): this process's settings, over the environment
DIAGNOSE_AFTER_S = 1.0  # a healthy session starts in milliseconds; after this long, ask whether TLS is the reason


def _retry_policy(max_tries: int) -> KazooRetry:
    return KazooRetry(max_tries=max_tries, delay=0.1, backoff=2, max_delay=1.0, ignore_expire=False)


def _start(client: KazooClient, zk: ZkConnect, timeout: float, tls: ZkTlsConfig | None) -> None:
    event = client.start_async()
    deadline = time.monotonic() + timeout
    diagnosed = False
    while not event.wait(min(0.25, max(0.0, deadline - time.monotonic()))):
        now = time.monotonic()
        if not diagnosed and now >= deadline - timeout + DIAGNOSE_AFTER_S:
            diagnosed = True
            problem = diagnose(zk.host_list, tls)
            if problem is not None:
                _abandon(client)
                raise ZooKeeperTlsError(problem)
        if now >= deadline:
            break
    if not client.connected:
        _abandon(client)
        raise ZooKeeperUnavailableError(f"cannot connect to ZooKeeper at {zk.hosts} within {timeout:g} s")


def _abandon(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def use_tls(tls: ZkTlsConfig | None) -> None:
    """Make ``tls`` this process's ZooKeeper TLS settings (a broker's ``zookeeper.ssl.*``), over the environment."""
    _process_tls[:] = [tls]


def tls_settings() -> ZkTlsConfig | None:
    """The TLS settings a client made now gets: use_tls()'s, else $FERRY_ZOOKEEPER_TLS_CONFIG's."""
    return _process_tls[0] if _process_tls else ZkTlsConfig.from_environment()


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
    credentials: ZkCredentials | None = None, tls: ZkTlsConfig | None = None,
) -> KazooClient:
    """Return a connected KazooClient rooted at ``zk.chroot`` (created if missing, unless ``create_chroot``
    is false: then a missing chroot raises RegistryError, so that a read-only tool never leaves znodes behind).
    ``credentials``: the ZooKeeper identity; by default those of $FERRY_ZOOKEEPER_CREDENTIALS, if set.
    ``tls``: the TLS settings; by default tls_settings().
    """
    zk = ZkConnect.parse(zk) if isinstance(zk, str) else zk
    session_timeout = timeout if session_timeout is None else session_timeout
    secured = _secured(credentials if credentials is not None else credentials_from_environment())
    tls = tls if tls is not None else tls_settings()
    if tls is not None:
        secured.update(tls.kazoo_arguments())
    if zk.chroot:
        root = KazooClient(hosts=zk.hosts, timeout=session_timeout, connection_retry=_retry_policy(-1), **secured)
        _start(root, zk, timeout, tls)
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
    _start(client, zk, timeout, tls)
    return client

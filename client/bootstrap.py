"""Finding a cluster's brokers from its ZooKeeper chroot (``/brokers/ids``)."""

from __future__ import annotations

from ferry.client.errors import NoBrokersAvailableError
from ferry.zk import BrokerInfo, ZkConnect
from ferry.zk import connect as zk_connect
from ferry.zk.znodes import BROKER_IDS_PATH


def read_brokers(client) -> dict[int, BrokerInfo]:
    """Live brokers registered under a started kazoo client's chroot (unreadable nodes are skipped)."""
    from kazoo.exceptions import NoNodeError

    out: dict[int, BrokerInfo] = {}
    try:
        children = client.get_children(BROKER_IDS_PATH)
    except NoNodeError:
        return out
    for child in children:
        if not child.isdigit():
            continue
        try:
            data, _ = client.get(f"{BROKER_IDS_PATH}/{child}")
            out[int(child)] = BrokerInfo.decode(int(child), data)
        except (NoNodeError, ValueError):
            continue
    return out


def bootstrap_string(brokers: dict[int, BrokerInfo]) -> str:
    return ",".join(b.address for _, b in sorted(brokers.items()))


def discover(zookeeper: str, timeout: float = 10.0) -> tuple[str, dict[int, BrokerInfo]]:
    """``(bootstrap.servers, brokers)`` of the cluster at ``host:port/chroot``; raises if none is live."""
    zk = ZkConnect.parse(zookeeper)
    client = zk_connect(zk, timeout=timeout)
    try:
        brokers = read_brokers(client)
    finally:
        client.stop()
        client.close()
    if not brokers:
        raise NoBrokersAvailableError(f"no broker is registered in ZooKeeper at {zk} (under /brokers/ids)")
    return bootstrap_string(brokers), brokers

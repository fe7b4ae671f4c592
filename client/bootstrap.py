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


def broker_addresses(brokers: dict[int, BrokerInfo], security_protocol: str = "PLAINTEXT") -> list[tuple[str, int]]:
    """(host, port) of each broker's listener for ``security_protocol`` (brokers without one are left out)."""
    found = (b.address_for(security_protocol) for _, b in sorted(brokers.items()))
    return [a for a in found if a is not None]


def bootstrap_string(brokers: dict[int, BrokerInfo], security_protocol: str = "PLAINTEXT") -> str:
    return ",".join(f"{h}:{p}" for h, p in broker_addresses(brokers, security_protocol))


def discover(zookeeper: str, timeout: float = 10.0, security_protocol: str = "PLAINTEXT"
             ) -> tuple[str, dict[int, BrokerInfo]]:
    """``(bootstrap.servers, brokers)`` of the cluster at ``host:port/chroot``, the addresses of the listeners
    that speak ``security_protocol``; raises if none is live (or none has such a listener)."""
    zk = ZkConnect.parse(zookeeper)
    client = zk_connect(zk, timeout=timeout)
    try:
        brokers = read_brokers(client)
    finally:
        client.stop()
        client.close()
    if not brokers:
        raise NoBrokersAvailableError(f"no broker is registered in ZooKeeper at {zk} (under /brokers/ids)")
    bootstrap = bootstrap_string(brokers, security_protocol)
    if not bootstrap:
        raise NoBrokersAvailableError(f"no broker registered in ZooKeeper at {zk} has a {security_protocol} listener")
    return bootstrap, brokers

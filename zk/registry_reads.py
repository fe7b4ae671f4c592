"""Reading the registry's brokers and topics as whole maps, optionally arming one-shot watches on what is read."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from ferry.zk.znodes import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    BrokerInfo,
    TopicInfo,
    broker_path,
    topic_path,
)

log = logging.getLogger("ferry.zk.cluster_registry")  # one logger for the registry's parts
Watch = Callable[[WatchedEvent], None]


def read_children(client: KazooClient, path: str, watch: Watch | None) -> list[str]:
    """Children of ``path``; a missing path (a read-only registry of an empty cluster) has none.

    With a watch, a missing path gets an exists-watch so that its creation is noticed too.
    """
    try:
        return client.get_children(path, watch=watch)
    except NoNodeError:
        if watch is not None and client.exists(path, watch=watch) is not None:
            return client.get_children(path, watch=watch)
        return []


def read_topics(client: KazooClient, watch: Watch | None) -> dict[str, TopicInfo]:
    """Every topic by name; a malformed topic znode is logged and skipped."""
    out: dict[str, TopicInfo] = {}
    for name in sorted(read_children(client, BROKER_TOPICS_PATH, watch)):
        try:
            data, _ = client.get(topic_path(name), watch=watch)
        except NoNodeError:
            continue
        try:
            out[name] = TopicInfo.decode(name, data)
        except ValueError as exc:
            log.warning("ignoring malformed topic znode: %s", exc)
    return out


def read_brokers(client: KazooClient, watch: Watch | None) -> dict[int, BrokerInfo]:
    """Every live broker by id; a malformed registration is logged and skipped."""
    out: dict[int, BrokerInfo] = {}
    for child in read_children(client, BROKER_IDS_PATH, watch):
        if not child.isdigit():
            continue
        try:
            data, _ = client.get(broker_path(int(child)), watch=watch)
        except NoNodeError:
            continue
        try:
            out[int(child)] = BrokerInfo.decode(int(child), data)
        except ValueError as exc:
            log.warning("ignoring malformed broker znode: %s", exc)
    return dict(sorted(out.items()))


def live_brokers(client: KazooClient) -> dict[int, BrokerInfo]:
    """The live brokers, by id (retried over a connection loss)."""
    return client.retry(read_brokers, client, None)

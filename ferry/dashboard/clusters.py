"""The clusters page's view of one cluster: brokers (with the ferry version each runs), topics (as `ferry topics describe` describes them) and
consumer groups with their lag (as `ferry groups describe` does), read through the same public functions
of client/tools that the commands use. A cluster that cannot be read is shown with its error."""

from __future__ import annotations

from typing import Any

from ferry.client.tools.broker_description import describe_brokers, version_mismatch
from ferry.client.tools.consumer_group_service import ConsumerGroupService
from ferry.client.tools.topic_description import describe_topics
from ferry.dashboard.reasons import why
from ferry.zk import ClusterRegistry


def cluster_view(role: str, zk_connect: str, timeout_s: float) -> dict[str, Any]:
    """Brokers, topics with their partitions' health, and groups of the cluster at ``zk_connect``."""
    doc: dict[str, Any] = {"role": role, "zookeeper": zk_connect, "error": None, "brokers": [], "topics": [],
                           "groups": [], "version_mismatch": None}
    try:
        reg = ClusterRegistry(zk_connect, timeout=timeout_s, create=False).start()
    except Exception as e:  # noqa: BLE001 - shown on the page
        doc["error"] = f"ZooKeeper unreachable: {why(e)}"
        return doc
    try:
        brokers = reg.brokers()
        doc["brokers"] = describe_brokers(brokers)  # each with the ferry version and native parts it runs
        doc["version_mismatch"] = version_mismatch(brokers)  # None, or the line saying which broker runs what
        doc["topics"] = describe_topics(reg, brokers=brokers)
        doc["under_replicated"] = sum(p["under_replicated"] for t in doc["topics"] for p in t["partitions"])
        doc["offline_partitions"] = sum(not p["alive"] for t in doc["topics"] for p in t["partitions"])
        doc["groups"] = group_views(ConsumerGroupService(reg.client, zk_connect))
    except Exception as e:  # noqa: BLE001 - shown on the page
        doc["error"] = why(e)
    finally:
        reg.stop()
    return doc


def group_views(service: ConsumerGroupService) -> list[dict[str, Any]]:
    """Every group of both kinds with its total lag; a group that cannot be described carries its error."""
    wanted: list[tuple[str, str]] = [(g, "zookeeper") for g in service.zookeeper_groups()]
    try:  # the brokers' (Kafka-protocol) groups, as `ferry groups describe --type kafka` shows them
        wanted += [(g, "kafka") for g in service.kafka.list()]
    except Exception as e:  # noqa: BLE001 - the ZooKeeper groups are still worth showing
        wanted.append(("(Kafka-protocol groups)", f"unreadable: {why(e)}"))
    out = []
    for g, kind in sorted(wanted):
        try:
            if kind.startswith("unreadable"):
                raise RuntimeError(kind)
            d = service.describe(g, kind)
        except Exception as e:  # noqa: BLE001 - shown on the page
            out.append({"group": g, "type": kind, "error": why(e), "members": [], "partitions": [],
                        "total_lag": None})
            continue
        d["type"] = kind
        d["total_lag"] = sum(r["lag"] for r in d["partitions"] if r["lag"] is not None)
        d["error"] = None
        out.append(d)
    return out

"""A topic's partitions as `ferry topics describe` prints them and the dashboard's clusters page shows them.

One description of a partition (leader, epoch, replicas, ISR, the leader's address and whether it is
registered) read from the cluster registry, so the console and the page never disagree on what
"under-replicated" or "offline" means.
"""

from __future__ import annotations

import json
from typing import Any

from ferry.zk import ClusterRegistry, UnknownTopicError
from ferry.zk.znodes import NO_LEADER, BrokerInfo, PartitionState, TopicInfo


def describe_topic(info: TopicInfo, states: dict[int, PartitionState], brokers: dict[int, BrokerInfo]
                   ) -> dict[str, Any]:
    """``{"topic", "replication_factor", "partitions": [...], "config"}`` of one topic."""
    parts = []
    for p, replicas in sorted(info.replicas.items()):
        state = states.get(p)
        leader = state.leader if state is not None and state.leader != NO_LEADER else None
        isr = list(state.isr) if state is not None else []
        broker = brokers.get(leader) if leader is not None else None
        parts.append({
            "partition": p,
            "leader": leader,
            "leader_epoch": state.leader_epoch if state is not None else -1,
            "replicas": list(replicas),
            "isr": isr,
            "under_replicated": len(isr) < len(replicas),
            "offline_replicas": [b for b in replicas if b not in brokers],
            "broker": broker.address if broker else None,
            "datacenter": broker.datacenter if broker else None,
            "alive": broker is not None,
        })
    return {"topic": info.name, "replication_factor": len(info.replicas[0]), "partitions": parts,
            "config": info.config}


def describe_topics(registry: ClusterRegistry, topics: dict[str, TopicInfo] | None = None,
                    brokers: dict[int, BrokerInfo] | None = None) -> list[dict[str, Any]]:
    """``topics`` (default: every topic of the cluster) by name; a topic deleted since it was listed is left
    out (it is not part of the answer)."""
    topics = registry.topics() if topics is None else topics
    brokers = registry.brokers() if brokers is None else brokers
    docs = []
    for name, info in sorted(topics.items()):
        try:
            docs.append(describe_topic(info, registry.partition_states(name), brokers))
        except UnknownTopicError:
            continue
    return docs


def filter_partitions(docs: list[dict[str, Any]], under_replicated: bool, unavailable: bool) -> bool:
    """kafka-topics' --under-replicated-partitions / --unavailable-partitions: keep only those partitions in
    ``docs``; True when a filter applies."""
    if not (under_replicated or unavailable):
        return False
    for doc in docs:
        doc["partitions"] = [p for p in doc["partitions"] if (under_replicated and p["under_replicated"])
                             or (unavailable and not p["alive"])]
    return True


def print_topics(docs: list[dict[str, Any]], *, filtered: bool, as_json: bool, one: bool) -> None:
    """`ferry topics describe`'s listing, the same whether the cluster was read from ZooKeeper or its brokers:
    kafka-topics' topic line (left out by the filtered listings) and partition lines, or JSON (one topic: its
    document)."""
    if as_json:
        print(json.dumps(docs[0] if one else docs, indent=2))
        return
    for doc in docs:
        if not filtered:
            config = ",".join(f"{k}={v}" for k, v in sorted(doc["config"].items())) or "-"
            print(f"Topic: {doc['topic']}\tPartitionCount: {len(doc['partitions'])}\t"
                  f"ReplicationFactor: {doc['replication_factor']}\tConfig: {config}")
        for part in doc["partitions"]:
            print(partition_line(doc["topic"], part))


def partition_line(topic: str, part: dict[str, Any]) -> str:
    """kafka-topics' partition line, then the leader's address and liveness."""
    leader = "none" if part["leader"] is None else part["leader"]
    replicas = ",".join(map(str, part["replicas"]))
    isr = ",".join(map(str, part["isr"]))
    if part["leader"] is None:
        where, alive = "none", "NO (no leader)"
    else:
        where = part["broker"] or "unknown"
        alive = "yes" if part["alive"] else "NO (broker not registered)"
    return (f"\tTopic: {topic}\tPartition: {part['partition']}\tLeader: {leader}\tReplicas: {replicas}\tIsr: {isr}"
            f"\tBroker: {where}\tAlive: {alive}")

"""A topic's partitions as `ferry topics describe` prints them and the dashboard's clusters page shows them.

One description of a partition (leader, epoch, replicas, ISR, the leader's address and whether it is
registered) read from the cluster registry, so the console and the page never disagree on what
"under-replicated" or "offline" means.
"""

from __future__ import annotations

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

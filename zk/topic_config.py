"""Changing a topic's config in the registry (AlterConfigs / IncrementalAlterConfigs).

A topic's config is part of its znode ``/brokers/topics/<t>`` (``{"version":1,"partitions":..,"config":..}``):
the new config is written conditionally on the version read, so a concurrent change (partitions added, a
reassignment, another config change) is re-read and the change applied again, never lost. Brokers pick it up
through their topic watch and apply it to their logs; clients see it in DescribeConfigs.
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from ferry.zk.errors import InvalidConfigError, UnknownTopicError
from ferry.zk.znodes import TopicInfo, topic_path

_ATTEMPTS = 20


def alter_topic_config(client: KazooClient, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                       write: bool = True) -> dict[str, str]:
    """Apply ``change`` (current config -> new config; it may raise ValueError to refuse) and write the result
    unless ``write`` is false (validate only); returns the new config. UnknownTopicError when the topic does
    not exist; InvalidConfigError when it kept changing under us."""
    for _ in range(_ATTEMPTS):
        try:
            data, stat = client.get(topic_path(name))
        except NoNodeError:
            raise UnknownTopicError(f"topic {name!r} does not exist") from None
        info = TopicInfo.decode(name, data)
        new = {str(k): str(v) for k, v in change(dict(info.config)).items()}
        if not write or new == info.config:
            return new
        updated = TopicInfo.from_assignment(name, info.replicas, new, info.topic_id)
        try:
            client.set(topic_path(name), updated.encode(), version=stat.version)
            return new
        except BadVersionError:
            continue
        except NoNodeError:
            raise UnknownTopicError(f"topic {name!r} was deleted meanwhile") from None
    raise InvalidConfigError(f"topic {name!r} kept changing while its config was altered; try again")

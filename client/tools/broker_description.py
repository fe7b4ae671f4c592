"""A cluster's brokers with what each runs, as `ferry topics describe` prints them and the dashboard shows them.

Each broker writes its ferry release and native parts into its registration (``/brokers/ids/<id>``); brokers of
one cluster running different releases (a rolling upgrade half done, a host the playbook missed) are worth one
line of warning wherever the cluster is described, and the console and the page say it the same way.
"""

from __future__ import annotations

from typing import Any

from ferry.zk.znodes import BrokerInfo

NOT_SAID = "unknown"  # a registration without ferry's fields (an older ferry, or another tool wrote it)


def describe_brokers(brokers: dict[int, BrokerInfo]) -> list[dict[str, Any]]:
    """``[{"id", "address", "datacenter", "ferry_version", "native"}]`` by broker id."""
    return [{"id": b.id, "address": b.address, "datacenter": b.datacenter,
             "ferry_version": b.ferry_version or NOT_SAID, "native": b.native or NOT_SAID}
            for b in sorted(brokers.values(), key=lambda b: b.id)]


def version_mismatch(brokers: dict[int, BrokerInfo]) -> str | None:
    """One line naming the versions and their brokers when the live brokers do not all run one release."""
    by_version: dict[str, list[int]] = {}
    for b in sorted(brokers.values(), key=lambda b: b.id):
        by_version.setdefault(b.ferry_version or NOT_SAID, []).append(b.id)
    if len(by_version) < 2:
        return None
    parts = [f"{version} on broker{'s' if len(ids) > 1 else ''} {','.join(map(str, ids))}"
             for version, ids in by_version.items()]  # in the order of their first broker
    return f"brokers run different ferry versions: {'; '.join(parts)}"

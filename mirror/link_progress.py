"""Where each embedded-mirror leader reports its copy: ephemeral znodes in the offline cluster's ZooKeeper.

``/mirror/link_progress/<link>/<topic>-<partition>`` holds the leader's last report (live end, the live
offset the copy reached, the offline end, the state and the last error); it vanishes with the broker's
session, and the next leader writes its own. `ferry mirror link describe` and `ferry mirror status` read it.
"""

from __future__ import annotations

import json

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

PROGRESS_PATH = "/mirror/link_progress"
COPYING = "copying"
PAUSED = "paused"
WAITING = "waiting for the live leader"
FAILED = "failed"


def progress_path(link: str, topic: str, partition: int) -> str:
    return f"{PROGRESS_PATH}/{link}/{topic}-{partition}"


def write_progress(client: KazooClient, link: str, report: dict) -> None:
    """Create or overwrite this leader's report (ephemeral: it goes with the broker's session)."""
    path = progress_path(link, report["topic"], report["partition"])
    data = json.dumps(report, sort_keys=True).encode()
    try:
        client.set(path, data)
    except NoNodeError:
        client.ensure_path(f"{PROGRESS_PATH}/{link}")
        try:
            client.create(path, data, ephemeral=True)
        except NodeExistsError:
            client.set(path, data)


def remove_progress(client: KazooClient, link: str, topic: str, partition: int) -> None:
    try:
        client.delete(progress_path(link, topic, partition))
    except NoNodeError:
        pass


def read_progress(client: KazooClient, link: str) -> list[dict]:
    """Every partition's last report of ``link``, by topic and partition."""
    try:
        children = client.get_children(f"{PROGRESS_PATH}/{link}")
    except NoNodeError:
        return []
    out = []
    for child in children:
        try:
            data, _ = client.get(f"{PROGRESS_PATH}/{link}/{child}")
            out.append(json.loads(data.decode()))
        except (NoNodeError, ValueError):
            continue
    return sorted(out, key=lambda r: (r["topic"], r["partition"]))

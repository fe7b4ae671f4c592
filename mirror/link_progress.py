"""Where each embedded-mirror leader reports its copy: ephemeral znodes in the offline cluster's ZooKeeper.

``/mirror/link_progress/<link>/<topic>-<partition>`` holds the leader's last report (live end, the live
offset the copy reached, the offline end, the state and the last error); it vanishes with the broker's
session, and the next leader writes its own. `ferry mirror link describe` and `ferry mirror status` read it.

``/mirror/link_failures/<link>/<broker id>`` says that a broker cannot run the link at all (its --source-config
missing or bad there, the live cluster refusing its login or its reads): the link's state then reads
"failed: <reason>". Ephemeral as well; the broker removes it once the link runs.
"""

from __future__ import annotations

import json
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

PROGRESS_PATH = "/mirror/link_progress"
FAILURES_PATH = "/mirror/link_failures"
COPYING = "copying"
PAUSED = "paused"
WAITING = "waiting for the live leader"
FAILED = "failed"


def progress_path(link: str, topic: str, partition: int) -> str:
    return f"{PROGRESS_PATH}/{link}/{topic}-{partition}"


def write_progress(client: KazooClient, link: str, report: dict) -> None:
    """Create or overwrite this leader's report (ephemeral: it goes with the broker's session)."""
    _write_ephemeral(client, progress_path(link, report["topic"], report["partition"]), report)


def write_failure(client: KazooClient, link: str, broker_id: int, reason: str) -> None:
    """This broker cannot run ``link``: ``reason`` (one line, never a secret)."""
    _write_ephemeral(client, f"{FAILURES_PATH}/{link}/{broker_id}", {"broker": broker_id, "error": reason,
                                                                    "updated_ms": int(time.time() * 1000)})


def clear_failure(client: KazooClient, link: str, broker_id: int) -> None:
    try:
        client.delete(f"{FAILURES_PATH}/{link}/{broker_id}")
    except NoNodeError:
        pass


def read_failures(client: KazooClient, link: str) -> list[dict]:
    """The brokers that cannot run ``link`` and why, by broker id."""
    return sorted(_read_children(client, f"{FAILURES_PATH}/{link}"), key=lambda r: r["broker"])


def link_state(state: str, failures: list[dict]) -> str:
    """What `describe` and `status` show: the stored state, or "failed: <reason>" while a broker reports one."""
    return f"{FAILED}: {failures[0]['error']}" if failures else state


def _write_ephemeral(client: KazooClient, path: str, doc: dict) -> None:
    data = json.dumps(doc, sort_keys=True).encode()
    try:
        client.set(path, data)
    except NoNodeError:
        client.ensure_path(path.rpartition("/")[0])
        try:
            client.create(path, data, ephemeral=True)
        except NodeExistsError:
            client.set(path, data)


def _read_children(client: KazooClient, parent: str) -> list[dict]:
    try:
        children = client.get_children(parent)
    except NoNodeError:
        return []
    out = []
    for child in children:
        try:
            data, _ = client.get(f"{parent}/{child}")
            out.append(json.loads(data.decode()))
        except (NoNodeError, ValueError):
            continue
    return out


def remove_progress(client: KazooClient, link: str, topic: str, partition: int) -> None:
    try:
        client.delete(progress_path(link, topic, partition))
    except NoNodeError:
        pass


def read_progress(client: KazooClient, link: str) -> list[dict]:
    """Every partition's last report of ``link``, by topic and partition."""
    return sorted(_read_children(client, f"{PROGRESS_PATH}/{link}"), key=lambda r: (r["topic"], r["partition"]))

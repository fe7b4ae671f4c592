"""KIP-848 consumer groups' state, kept in the data of the group's offsets znode ``/consumer_offsets/<group>``
(group_offsets.py) beside its committed offsets::

    /consumer_offsets/<group>   {"version":1,"protocol_type":"consumer","consumer_group":{...}}

``consumer_group`` holds what Kafka writes to ``__consumer_offsets`` for a consumer group: the group epoch, the
target assignment and each member's metadata and current assignment (ferry.broker.server.consumer_group_state).
Deleting the group (DeleteGroups, offset expiry of an empty group) removes it with the offsets.

Writes are conditional on the znode version the writer last saw, so a coordinator that lost the group to another
never overwrites the newer state (StaleGroupState).
"""

from __future__ import annotations

import json

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.zk.errors import RegistryError
from ferry.zk.group_offsets import CONSUMER_OFFSETS_PATH, group_path

STATE_KEY = "consumer_group"


class StaleGroupState(RegistryError):
    """The group's znode changed since this coordinator read or wrote it (another coordinator wrote)."""


def _decode(data: bytes) -> dict:
    try:
        doc = json.loads((data or b"{}").decode() or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def read_group_state(client: KazooClient, group: str) -> tuple[dict | None, int]:
    """(the stored consumer-group state or None, the znode's version; -1 when the group has no znode)."""
    try:
        data, stat = client.get(group_path(group))
    except NoNodeError:
        return None, -1
    state = _decode(data).get(STATE_KEY)
    return (state if isinstance(state, dict) else None), stat.version


def write_group_state(client: KazooClient, group: str, state: dict, version: int) -> int:
    """Store ``state`` if the znode is still at ``version`` (-1: it did not exist); its new version."""
    path = group_path(group)
    if version >= 0:
        try:
            data, stat = client.get(path)
        except NoNodeError:
            version = -1  # deleted meanwhile (an empty group's offsets expired): start it again
        else:
            if stat.version != version and isinstance(_decode(data).get(STATE_KEY), dict):
                raise StaleGroupState(f"group {group!r}: its state was written by another coordinator")
            doc = {**_decode(data), STATE_KEY: state}
            try:
                return client.set(path, json.dumps(doc, sort_keys=True).encode(), version=stat.version).version
            except (BadVersionError, NoNodeError):
                raise StaleGroupState(f"group {group!r}: its znode changed while writing") from None
    doc = {"version": 1, "protocol_type": "consumer", STATE_KEY: state}
    if client.exists(CONSUMER_OFFSETS_PATH) is None:
        try:
            client.ensure_path(CONSUMER_OFFSETS_PATH)
        except NodeExistsError:
            pass
    try:
        client.create(path, json.dumps(doc, sort_keys=True).encode())
        return 0
    except NodeExistsError:
        data, stat = client.get(path)  # a first commit created it: no state of anyone's there yet
        if isinstance(_decode(data).get(STATE_KEY), dict):
            raise StaleGroupState(f"group {group!r}: its state was written by another coordinator") from None
        try:
            return client.set(path, json.dumps({**_decode(data), STATE_KEY: state}, sort_keys=True).encode(),
                              version=stat.version).version
        except (BadVersionError, NoNodeError):
            raise StaleGroupState(f"group {group!r}: its znode changed while writing") from None

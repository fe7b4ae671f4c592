"""Kafka's config-change notifications and entity config znodes, shared by the ACL store and the client quotas.

A change is announced by a sequential znode under a changes path; every broker watches it and re-reads. The
notifications are kept CHANGE_EXPIRATION_S and then deleted by whoever writes after that, as Kafka does, so the
path does not grow without end. An entity's znode holds ``{"version": 1, "config": {...}}`` (SCRAM credentials
and quotas share a user's znode)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

CHANGE_EXPIRATION_S = 15 * 60


def purge_old_changes(client: KazooClient, roots: Iterable[str], now_s: float | None = None) -> int:
    """Delete the notifications under ``roots`` older than CHANGE_EXPIRATION_S; the number deleted."""
    now_ms = (time.time() if now_s is None else now_s) * 1000
    deleted = 0
    for root in roots:
        try:
            children = client.get_children(root)
        except NoNodeError:
            continue
        for child in sorted(children):
            stat = client.exists(f"{root}/{child}")
            if stat is None or now_ms - stat.ctime < CHANGE_EXPIRATION_S * 1000:
                continue
            try:
                client.delete(f"{root}/{child}")
                deleted += 1
            except (NoNodeError, NotEmptyError):
                pass
    return deleted


def entity_config(data: bytes | None) -> dict[str, str]:
    """The ``config`` map of an entity znode's data ({} when there is none or it does not parse)."""
    try:
        doc = json.loads(data or b"{}")
    except ValueError:
        return {}
    cfg = doc.get("config") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in cfg.items()} if isinstance(cfg, dict) else {}

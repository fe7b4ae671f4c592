"""AppendInfo: where an append landed (shared by the leader's and the follower's append paths)."""

from __future__ import annotations

from typing import NamedTuple


class AppendInfo(NamedTuple):
    """Where an append landed (a tuple: one is made per produce request)."""

    first_offset: int
    last_offset: int
    duplicate: bool = False
    log_append_time: int = -1  # -1: CreateTime; else the time the broker stamped (LogAppendTime)

"""The paper's Algorithm 1 partition split: sort the partitions and the consumers, consumer j takes the
j-th contiguous range; N/C each, the first N mod C consumers one more. Deterministic, so every member
computes the same answer from the same view of ZooKeeper without talking to the others."""

from __future__ import annotations


def range_for(partitions: list[int], consumers: list[str], me: str) -> list[int]:
    """The partitions ``me`` should own ([] if ``me`` is not among ``consumers``)."""
    parts = sorted(partitions)
    members = sorted(consumers)
    if me not in members or not parts:
        return []
    j = members.index(me)
    per, extra = divmod(len(parts), len(members))
    start = j * per + min(j, extra)
    return parts[start:start + per + (1 if j < extra else 0)]


def assign_all(partitions: list[int], consumers: list[str]) -> dict[str, list[int]]:
    """Everyone's share (for tools and tests): a partition of ``partitions``."""
    return {c: range_for(partitions, consumers, c) for c in consumers}

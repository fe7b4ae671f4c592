"""Where a mirrored partition stands: a checkpoint next to the group's committed offset in the live ZooKeeper.

The offline partition is written only by the mirror (one producer id for the whole group, its sequences per
partition), so the offline log itself says how far the copy got; a checkpoint ties one point of that log to
the live log: "the mirror's batches before offline offset ``offline`` hold exactly the live records before
``live``, and the next batch carries sequence ``seq``". From it and the offline log's tail a new owner finds
the exact live offset to resume at (tail_sync.py), whatever happened after the checkpoint was written.

The checkpoint also carries the audit's progress (``audit``: the offline offset from which the mirror
tier's counts are not published yet; ``publishing``: an offline range whose counts are being published
under guids derived from it, so whoever publishes it again publishes the same events).

Layout (relative to the live cluster's chroot, beside Kafka 0.8's group nodes)::

    /consumers/<group>/mirror/producer                           {"producer_id": P, "epoch": E}
    /consumers/<group>/mirror/checkpoints/<topic>/<partition>    Checkpoint.encode()

A checkpoint and the group's committed offset (``/consumers/<group>/offsets/<topic>/<partition>``, what
``ferry groups`` and ``ferry mirror status`` show) are written in one ZooKeeper transaction, conditional on
the checkpoint's version: two writers cannot both advance it, and the committed offset differs from the
checkpoint's ``live`` only if someone moved it on purpose (``ferry groups reset``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.client import group_dirs

TopicPartition = tuple[str, int]
ABSENT = -1  # the version of a checkpoint that does not exist yet


@dataclass(frozen=True, slots=True)
class Checkpoint:
    live: int  # next live offset the mirror had not copied
    offline: int  # offline offset after the mirror's last batch holding records before ``live``
    seq: int  # the mirror producer's next sequence in this partition
    epoch: int  # the producer epoch the mirror uses in this partition
    audit: int  # offline offset from which the mirror tier's counts are not published yet
    publishing: tuple[int, int] | None = None  # offline range whose counts are being published

    def encode(self) -> bytes:
        doc = {"version": 1, "live": self.live, "offline": self.offline, "seq": self.seq, "epoch": self.epoch,
               "audit": self.audit, "publishing": list(self.publishing) if self.publishing else None}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        """Raises ValueError on anything but a checkpoint this code wrote."""
        try:
            doc = json.loads(data.decode("utf-8"))
            pub = doc.get("publishing")
            ck = cls(int(doc["live"]), int(doc["offline"]), int(doc["seq"]), int(doc["epoch"]), int(doc["audit"]),
                     (int(pub[0]), int(pub[1])) if pub else None)
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as e:
            raise ValueError(f"unreadable mirror checkpoint {data[:200]!r}: {e}") from None
        return ck

    def moved(self, live: int, offline: int, seq: int) -> Checkpoint:
        """The same checkpoint at a later point of the copy (audit fields unchanged)."""
        return replace(self, live=live, offline=offline, seq=seq)


@dataclass(frozen=True, slots=True)
class Stored:
    """What a store holds for a partition: the checkpoint, its version, and the group's committed offset."""

    checkpoint: Checkpoint | None
    version: int = ABSENT
    committed: int | None = None


class CheckpointConflict(Exception):
    """Another writer changed the checkpoint since it was read: the caller's view of the partition is stale."""


class CheckpointStore(Protocol):
    def read(self, tp: TopicPartition) -> Stored: ...

    def write_many(self, items: dict[TopicPartition, tuple[Checkpoint, int]]) -> dict[TopicPartition, int | Exception]:
        """Write each checkpoint if its version is still the given one; new versions or the exception."""
        ...

    def producer(self, init: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        """The group's producer id and epoch (``init`` asks the offline cluster for one the first time)."""
        ...


def write_one(store: CheckpointStore, tp: TopicPartition, ck: Checkpoint, version: int) -> int:
    """Write one checkpoint; CheckpointConflict if its version moved, other errors as they come."""
    result = store.write_many({tp: (ck, version)})[tp]
    if isinstance(result, Exception):
        raise result
    return result


class MemoryCheckpoints:
    """Checkpoints in this process only: a MirrorStream used on its own (tests, tools)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[TopicPartition, tuple[Checkpoint, int]] = {}
        self._producer: tuple[int, int] | None = None

    def read(self, tp: TopicPartition) -> Stored:
        with self._lock:
            got = self._data.get(tp)
        return Stored(*got) if got else Stored(None)

    def write_many(self, items: dict[TopicPartition, tuple[Checkpoint, int]]) -> dict[TopicPartition, int | Exception]:
        out: dict[TopicPartition, int | Exception] = {}
        with self._lock:
            for tp, (ck, version) in items.items():
                have = self._data.get(tp)
                if (have[1] if have else ABSENT) != version:
                    out[tp] = CheckpointConflict(f"{tp[0]}-{tp[1]}: checkpoint version moved")
                    continue
                self._data[tp] = (ck, version + 1)
                out[tp] = version + 1
        return out

    def producer(self, init: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        with self._lock:
            if self._producer is None:
                self._producer = init()
            return self._producer


class ZkCheckpoints:
    """Checkpoints in the live ZooKeeper (``zk``: a started kazoo client rooted at the live chroot)."""

    def __init__(self, zk, group: str, timeout_s: float = 10.0) -> None:
        self.zk = zk
        self.group = group_dirs.validate_group(group)
        self.timeout_s = timeout_s
        self.root = f"{group_dirs.group_dir(group)}/mirror"
        self._known: set[str] = set()  # znodes known to exist

    def path(self, tp: TopicPartition) -> str:
        return f"{self.root}/checkpoints/{tp[0]}/{tp[1]}"

    def read(self, tp: TopicPartition) -> Stored:
        """The checkpoint and the committed offset, read so that no write fell between the two reads."""
        for _attempt in range(5):
            ck, version = self._get_checkpoint(tp)
            committed = self._get_committed(tp)
            if self._get_checkpoint(tp)[1] == version:
                return Stored(ck, version, committed)
        raise CheckpointConflict(f"{tp[0]}-{tp[1]}: checkpoint keeps changing while read")

    def _get_checkpoint(self, tp: TopicPartition) -> tuple[Checkpoint | None, int]:
        try:
            data, stat = self.zk.get_async(self.path(tp)).get(timeout=self.timeout_s)
        except NoNodeError:
            return None, ABSENT
        return Checkpoint.decode(data), stat.version

    def _get_committed(self, tp: TopicPartition) -> int | None:
        try:
            data, _ = self.zk.get_async(group_dirs.offset_path(self.group, *tp)).get(timeout=self.timeout_s)
        except NoNodeError:
            return None
        try:
            return int(data.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            return None

    def write_many(self, items: dict[TopicPartition, tuple[Checkpoint, int]]) -> dict[TopicPartition, int | Exception]:
        """One transaction per partition (checkpoint + committed offset), all sent before any is awaited."""
        pending = {}
        for tp, (ck, version) in items.items():
            offset_path = group_dirs.offset_path(self.group, *tp)
            try:
                if version == ABSENT:
                    self._ensure(self.path(tp).rsplit("/", 1)[0], parent_only=True)
                self._ensure(offset_path)
            except Exception as e:  # ZooKeeper unreachable: nothing was written
                pending[tp] = (e, version)
                continue
            t = self.zk.transaction()
            if version == ABSENT:
                t.create(self.path(tp), ck.encode())
            else:
                t.set_data(self.path(tp), ck.encode(), version)
            t.set_data(offset_path, str(ck.live).encode("ascii"))
            pending[tp] = (t.commit_async(), version)
        out: dict[TopicPartition, int | Exception] = {}
        for tp, (async_result, version) in pending.items():
            if isinstance(async_result, Exception):
                out[tp] = async_result
                continue
            try:
                results = async_result.get(timeout=self.timeout_s)
            except Exception as e:  # connection loss, timeout: the outcome is unknown, the next write tells
                out[tp] = e
                continue
            first = results[0]
            if isinstance(first, BadVersionError | NodeExistsError | NoNodeError):
                out[tp] = CheckpointConflict(f"{tp[0]}-{tp[1]}: checkpoint changed by another writer ({first!r})")
            elif isinstance(results[-1], Exception):
                self._known.discard(group_dirs.offset_path(self.group, *tp))  # deleted meanwhile?
                out[tp] = results[-1]
            elif isinstance(first, Exception):
                out[tp] = first
            else:
                out[tp] = 0 if version == ABSENT else first.version
        return out

    def _ensure(self, path: str, parent_only: bool = False) -> None:
        """Create ``path`` (an empty node, or only the path to it) once; bounded by the store's timeout."""
        if path in self._known:
            return
        if self.zk.exists_async(path).get(timeout=self.timeout_s) is None:
            try:
                if parent_only:
                    self.zk.ensure_path_async(path).get(timeout=self.timeout_s)
                else:
                    self.zk.create_async(path, b"", makepath=True).get(timeout=self.timeout_s)
            except NodeExistsError:
                pass
        self._known.add(path)

    def producer(self, init: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        """The group's producer id: every member and every partition uses it (sequences are per partition), so
        a new owner continues the sequence of the old one and the offline broker's sequence check sees one
        producer whichever process sends."""
        path = f"{self.root}/producer"
        try:
            data, _ = self.zk.get_async(path).get(timeout=self.timeout_s)
        except NoNodeError:
            pid, epoch = init()
            try:
                doc = json.dumps({"producer_id": pid, "epoch": epoch}).encode()
                self.zk.create_async(path, doc, makepath=True).get(timeout=self.timeout_s)
                return pid, epoch
            except NodeExistsError:  # another member was first: use its id
                data, _ = self.zk.get_async(path).get(timeout=self.timeout_s)
        doc = json.loads(data.decode("utf-8"))
        return int(doc["producer_id"]), int(doc["epoch"])

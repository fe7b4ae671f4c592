"""What the offline cluster holds: topics and partitions (ZooKeeper), log start/end offsets and offsets by
time — through the raw client's one ListOffsets path (``WireClient.list_offsets``), as the split reader and
the mirror use it."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.client.bootstrap import discover
from ferry.client.errors import ClientError
from ferry.client.topic_selection import TopicSelectionError, select_topics
from ferry.client.wire_client import WireClient
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ferry.zk import ClusterRegistry


class ClusterOffsetsError(RuntimeError):
    """The cluster could not answer (no brokers, unknown topic, ListOffsets failed)."""


@dataclass(frozen=True)
class Watermarks:
    low: int  # log start offset: the first offset still retained
    high: int  # last stable offset: what a read_committed fetch may read up to (the high watermark, unless a
    # transaction is open: its records are loaded once it ends, aborted ones never)


class ClusterOffsets:
    """A short-lived view of one cluster (context manager)."""

    def __init__(self, zookeeper: str | None = None, bootstrap: str | None = None, timeout_s: float = 15.0,
                 client_config: ClientConfig | None = None) -> None:
        """``client_config``: TLS/SASL towards the brokers (their listeners of its security.protocol)."""
        if zookeeper is None and bootstrap is None:
            raise ValueError("need the cluster's ZooKeeper connect string or bootstrap servers")
        client_config = client_config or ClientConfig.plaintext()
        self.zookeeper = zookeeper
        self.timeout_s = timeout_s
        self.bootstrap = bootstrap or discover(zookeeper, timeout=timeout_s,
                                               security_protocol=client_config.security_protocol)[0]
        self._client = WireClient(self.bootstrap, client_id="ferry-load-offsets", timeout_s=timeout_s,
                                  connect_timeout_s=min(timeout_s, 10.0), security=client_config.security())

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ClusterOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topics(self) -> dict[str, int]:
        """``{topic: partition count}`` from ZooKeeper (the registry is the truth) or broker metadata."""
        if self.zookeeper:
            with ClusterRegistry(self.zookeeper, timeout=self.timeout_s, create=False) as reg:
                return {name: info.partition_count for name, info in reg.topics().items()}
        try:
            md = self._client.refresh_metadata(None)
        except ClientError as e:
            raise ClusterOffsetsError(f"metadata from {self.bootstrap} failed: {e}") from None
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error_code == ErrorCode.NONE}

    def select_topics(self, spec: str | list[str], include_internal: bool = False) -> dict[str, int]:
        """Topics (name -> partition count) that ``spec`` selects (``ferry.client.topic_selection``); named
        topics must exist."""
        available = self.topics()
        try:
            names = select_topics(spec, available, include_internal=include_internal)
        except TopicSelectionError as e:
            raise ClusterOffsetsError(f"{e} in cluster at {self.zookeeper or self.bootstrap}") from None
        return {n: available[n] for n in names}

    def _list(self, wanted: dict[tuple[str, int], int], what: str,
              read_committed: bool = False) -> dict[tuple[str, int], int]:
        try:
            return self._client.offsets(wanted, read_committed)
        except ClientError as e:
            raise ClusterOffsetsError(f"{what} failed: {e}") from None

    def watermarks(self, topic: str, partition: int) -> Watermarks:
        key = (topic, partition)
        low = self._list({key: EARLIEST_TIMESTAMP}, "ListOffsets")[key]
        high = self._list({key: LATEST_TIMESTAMP}, "ListOffsets", read_committed=True)[key]
        return Watermarks(int(low), int(high))

    def offsets_for_time(self, topic: str, partitions: list[int], ts_ms: int) -> dict[int, int | None]:
        """First offset whose timestamp is >= ts_ms per partition; None when no such message exists yet."""
        got = self._list({(topic, p): ts_ms for p in partitions}, f"ListOffsets by time for {topic}")
        return {p: (off if off >= 0 else None) for (_, p), off in got.items()}

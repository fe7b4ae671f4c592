"""KafkaStream: a blocking iterator of MessageAndMetadata fed by the fetcher through a bounded queue.

The fetcher enqueues chunks ``(PartitionTopicInfo, [confluent Message, ...])``; one partition always
goes to the same stream, so messages of a partition come out in offset order. Taking a message from the
iterator marks it consumed (its offset + 1 is what the next commit stores): at-least-once delivery.
"""

from __future__ import annotations

import queue

from ferry.client.message import MessageAndMetadata

_SHUTDOWN = object()


class KafkaStream:
    def __init__(self, queue_chunks: int = 16, consumer_timeout_s: float | None = None) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=queue_chunks)
        self._timeout = consumer_timeout_s
        self._chunk: list | None = None
        self._info = None
        self._pos = 0
        self._shutdown = False

    def __iter__(self) -> KafkaStream:
        return self

    def __next__(self) -> MessageAndMetadata:
        """The next message; StopIteration after shutdown, or after `consumer_timeout_s` without one
        (iterating again later is allowed: the stream is not finished until shutdown)."""
        while True:
            chunk = self._chunk
            if chunk is not None:
                info = self._info
                i = self._pos
                if i < len(chunk) and info.valid:
                    m = chunk[i]
                    self._pos = i + 1
                    offset = m.offset()
                    info.consumed_offset = offset + 1
                    return MessageAndMetadata(m.topic(), m.partition(), offset, m.key(), m.value(),
                                              m.timestamp()[1], m.headers())
                self._chunk = self._info = None
            if self._shutdown:
                raise StopIteration
            try:
                item = self._queue.get(timeout=self._timeout)
            except queue.Empty:
                raise StopIteration from None
            if item is _SHUTDOWN:
                self._shutdown = True
                raise StopIteration
            self._info, self._chunk = item
            self._pos = 0

    # -- used by the fetcher and the connector ----------------------------------------------------------
    def put(self, info, messages: list, timeout: float) -> bool:
        """Enqueue a chunk; False if the queue stayed full for `timeout` (the caller retries or drops)."""
        try:
            self._queue.put((info, messages), timeout=timeout)
            return True
        except queue.Full:
            return False

    def clear(self) -> None:
        """Drop queued chunks (at a rebalance: their partitions' infos are already invalid)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is _SHUTDOWN:  # never lose the end marker
                self._queue.put_nowait(item)
                return

    def shut_down(self) -> None:
        """End iteration for the application (after what is already queued is dropped)."""
        self.clear()
        try:
            self._queue.put_nowait(_SHUTDOWN)
        except queue.Full:
            self.clear()
            self._queue.put_nowait(_SHUTDOWN)

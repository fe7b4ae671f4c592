"""FetchPurgatory: fetches parked until data arrives (Kafka's DelayedFetch), without polling.

A parked fetch holds one future registered under each partition it reads. Whoever makes new data
readable (an append when consumers see unflushed data, a flush otherwise) calls `notify`, which completes
every future waiting on that partition; the fetch re-reads and either answers or parks again until its
deadline. Runs on the event loop; `notify_threadsafe` is for the storage layer's flusher thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class FetchPurgatory:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[Hashable, set[asyncio.Future]] = {}

    def watch(self, keys: Iterable[Hashable]) -> asyncio.Future:
        fut = self._loop.create_future()
        for k in keys:
            self._waiters.setdefault(k, set()).add(fut)
        return fut

    def unwatch(self, keys: Iterable[Hashable], fut: asyncio.Future) -> None:
        for k in keys:
            s = self._waiters.get(k)
            if s is not None:
                s.discard(fut)
                if not s:
                    del self._waiters[k]

    def notify(self, key: Hashable) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def notify_threadsafe(self, key: Hashable) -> None:
        if key in self._waiters:  # a racy peek is fine: a missed wake-up only costs the fetch's max_wait
            self._loop.call_soon_threadsafe(self.notify, key)

    def __len__(self) -> int:
        return len(self._waiters)

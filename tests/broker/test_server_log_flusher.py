"""LogFlusher (acks=-1 group commit) against a real Log: every waiter returns only once its offsets are
fsynced, however appends and flushes interleave."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import build_batch  # noqa: E402

from ferry.broker.log.log import Log  # noqa: E402
from ferry.broker.server.log_flusher import LogFlusher  # noqa: E402


def test_concurrent_waiters_all_end_flushed(tmp_path):
    async def main() -> tuple[list, list[bool], int]:
        lg = Log(tmp_path / "t-0")
        executor = ThreadPoolExecutor(4)
        flusher = LogFlusher(asyncio.get_running_loop(), executor)
        checks: list[bool] = []

        async def wait(end: int) -> None:
            await flusher.flushed_to(lg, end)
            checks.append(lg.flushed_offset >= end)

        tasks = []
        for i in range(200):
            info = lg.append(build_batch([b"m%d" % i] * 5))
            tasks.append(asyncio.ensure_future(wait(info.last_offset + 1)))
            if i % 7 == 0:
                await asyncio.sleep(0)
            if i % 31 == 0:
                await asyncio.sleep(0.002)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        executor.shutdown()
        end = lg.flushed_offset
        lg.close()
        return results, checks, end

    results, checks, end = asyncio.run(main())
    assert [r for r in results if r is not None] == []
    assert len(checks) == 200 and all(checks)
    assert end == 1000

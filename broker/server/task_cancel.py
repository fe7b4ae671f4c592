"""Stopping background tasks at shutdown: cancel them, then wait until each has really finished (whatever
it ended with: cancelled, done, or an error already logged where it happened), so that nothing it owns is
closed under it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


async def cancel_and_wait(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel every task given (None: none started) and wait for all of them to end."""
    started = [t for t in tasks if t is not None]
    for t in started:
        t.cancel()
    for t in started:
        try:
            await t
        except (asyncio.CancelledError, Exception):
            pass

"""Background: one loop that runs beside the rest of a process until it is stopped.

Stopping is a flag the loop checks (``running``, ``pause``), and only then, bounded, a
cancellation: client libraries (nats-py, redis-py) turn a cancellation that lands inside
one of their calls into an error of their own, which a loop that retries on errors would
swallow, and an unbounded wait for it would hang the stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Background:
    """A stoppable background loop."""

    def __init__(self) -> None:
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None

    @property
    def running(self) -> bool:
        """False once ``stop`` was called: the loop should end."""
        return not self._stopping.is_set()

    def start(self, loop: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``loop`` in the background."""
        self._task = asyncio.create_task(loop, name=name)

    async def pause(self, seconds: float) -> bool:
        """Sleep, unless stopped first; False once stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self.running

    def cancel(self) -> None:
        """End the loop at once, mid-step (no grace)."""
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()

    async def stop(self, grace: float = 5.0) -> None:
        """Ask the loop to end; cancel it after ``grace`` seconds; never wait longer."""
        self._stopping.set()
        task = self._task
        if task is None:
            return
        await asyncio.wait([task], timeout=grace)
        task.cancel()
        await asyncio.wait([task], timeout=grace)


def repeating(step: Callable[[], Awaitable[Any]], every: float, name: str) -> Background:
    """``step`` run every ``every`` seconds in the background until stopped (the first run
    after the first interval); a step that fails is logged and tried at the next one."""
    loop = Background()

    async def run() -> None:
        while await loop.pause(every):
            try:
                await step()
            except Exception as exc:
                log.warning("%s failed: %s: %s", name, type(exc).__name__, exc)

    loop.start(run(), name=name)
    return loop

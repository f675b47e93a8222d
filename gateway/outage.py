"""What a task does when the store goes away under it: it waits for the store and goes on
from its last saved step, so its user is never told "try again" for a message that will
still be answered, and never sees its answer twice.

- A task that loses the store (StoreUnavailableError out of the loop, which saves nothing
  then) waits up to HERMES_STORE_OUTAGE_WAIT seconds for it to answer again, then continues
  where its last save left it (the lifecycle's Recover), here, if this worker still holds
  the conversation's lease.
- Past that wait its user is told once that the answer is delayed, and the item stays
  queued: whichever worker claims the conversation once the store is back continues it.
- Bookkeeping after a delivery (the item's removal) waits the same way, so an answer that
  went out is not served again; and a task this process already delivered is not delivered
  a second time if its item is served again all the same.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agent_core import StoreUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

DELAYED = ("⏳ I can't reach my memory store for the moment; your answer will come as soon "
           "as it is back. No need to send your message again.")


class StoreOutage:
    """Waits for the store; remembers what this process delivered and whom it told."""

    def __init__(self, ping: Callable[[], Awaitable[object]], *, wait: float,
                 poll: float = 0.25, remember: int = 10_000) -> None:
        self._ping = ping
        self.wait = wait
        self.poll = poll
        self._remember = remember
        self._delivered: OrderedDict[str, None] = OrderedDict()
        self._told: OrderedDict[str, None] = OrderedDict()

    async def back(self) -> bool:
        """Whether the store answers again within ``wait`` seconds."""
        deadline = time.monotonic() + self.wait
        while True:
            try:
                await self._ping()
                return True
            except StoreUnavailableError:
                if time.monotonic() >= deadline:
                    return False
            await asyncio.sleep(self.poll)

    async def retrying(self, step: Callable[[], Awaitable[T]], what: str) -> T:
        """``step()``, tried again once the store is back (within ``wait``); the last
        StoreUnavailableError when it is not."""
        while True:
            try:
                return await step()
            except StoreUnavailableError as exc:
                log.warning("%s waits for the store: %s", what, exc)
                if not await self.back():
                    raise

    def delivered(self, task_id: str) -> None:
        """The reply of ``task_id`` went out from this process."""
        _remember(self._delivered, task_id, self._remember)

    def was_delivered(self, task_id: str) -> bool:
        """Whether this process already delivered the reply of ``task_id``."""
        return task_id in self._delivered

    def first_notice(self, task_id: str) -> bool:
        """True the first time only: whether to tell ``task_id``'s user of the delay."""
        if task_id in self._told:
            return False
        _remember(self._told, task_id, self._remember)
        return True


def _remember(seen: OrderedDict[str, None], key: str, limit: int) -> None:
    seen[key] = None
    seen.move_to_end(key)
    while len(seen) > limit:
        seen.popitem(last=False)

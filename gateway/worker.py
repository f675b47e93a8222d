"""WorkerPool: takes conversations from the queue and works through their items, one at a
time per conversation across all replicas, in arrival order.

A dispatcher waits for woken conversations (and, when idle, rescans the ones with queued
work, which is how the items of a dead worker are picked up after its lease expires), and
claims them once no message this process is queueing waits for the store. For
each conversation it claims, a worker hands the queued items in order to ``Execution``,
renewing the lease and watching the conversation's stop flag while one runs, and has
``Replies`` deliver what each ended with.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from agent_core import StoreUnavailableError, TaskResult, tracing
from agent_core.log import trace_context

from .collect import Collector
from .execution import Execution
from .outage import StoreOutage
from .queue import Claim, Head, WorkQueue
from .replies import Replies

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
_FLAG_POLL = 1.0
#: How long a claim waits for this process's ingests in flight (``WorkQueue.quiet``): a
#: burst is acknowledged before the tasks it wakes start, and a steady stream of messages
#: delays a claim by no more than this.
QUIET_LIMIT = 0.05
CRASHED = "Something went wrong on my side while working on this; please try again."


class WorkerPool:
    """Runs queued work for this process; any number of processes can share one queue."""

    def __init__(self, *, queue: WorkQueue, execution: Execution, replies: Replies,
                 concurrency: int, outage: StoreOutage, scan_interval: float = 1.0,
                 collector: Collector | None = None) -> None:
        self.queue = queue
        #: Merges bursts of messages before they start (HERMES_BUSY_MODE=collect).
        self.collector = collector
        self.execution = execution
        self.replies = replies
        self.outage = outage
        self.scan_interval = scan_interval
        self.quiet_limit = QUIET_LIMIT
        self._slots = asyncio.Semaphore(concurrency)
        self._active: dict[str, asyncio.Task[None]] = {}
        # Conversations woken while this process was finishing them: looked at again at once.
        self._rewake: set[str] = set()
        self._dispatcher: asyncio.Task[None] | None = None
        #: Where conversations are served, wherever they were taken.
        self._context = contextvars.copy_context()
        self._stopping = False
        self.processed = 0

    @property
    def active(self) -> int:
        """Conversations this process is working on."""
        return len(self._active)

    async def start(self) -> None:
        """Start dispatching, and serving the conversations whose messages this process
        queues while it has a free worker."""
        self._dispatcher = asyncio.create_task(self._dispatch(), name="hermes-dispatcher")
        self.queue.taker = self

    async def pause(self) -> None:
        """Claim nothing more. A conversation being served finishes its current item, then
        is handed back with the rest of its queue (another process takes it at once)."""
        self._stopping = True
        self.queue.taker = None
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
            self._dispatcher = None
        await self.queue.stop_waiting()

    async def stop(self, grace: float = 10.0) -> None:
        """Stop taking work; let running tasks finish for ``grace`` seconds, then interrupt
        them so that another process recovers them (their items stay queued)."""
        await self.pause()
        if self._active:
            _, pending = await asyncio.wait(list(self._active.values()), timeout=grace)
            if pending:
                self.execution.shutting_down()
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

    # --- dispatching ---------------------------------------------------------------------
    async def _dispatch(self) -> None:
        last_scan = 0.0
        while not self._stopping:
            try:
                woken = await self.queue.wait_for_work(self.scan_interval)
                candidates = list(woken)
                if not woken or time.monotonic() - last_scan > self.scan_interval * 5:
                    last_scan = time.monotonic()
                    candidates += await self.queue.stale_candidates()
                free = []
                for cid in dict.fromkeys(candidates):
                    if cid in self._active:
                        if cid in woken:
                            self._rewake.add(cid)
                    else:
                        free.append(cid)
                await self._launch(free)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis outage: keep trying, never die
                log.warning("dispatcher error: %s", exc)
                await asyncio.sleep(1.0)

    async def _launch(self, cids: list[str]) -> None:
        """Claim as many of ``cids`` as there are free slots (waiting for one if none)."""
        while cids:
            await self._slots.acquire()
            taken = 1
            while taken < len(cids) and not self._slots.locked():
                await self._slots.acquire()
                taken += 1
            batch, cids = cids[:taken], cids[taken:]
            await self.queue.quiet(self.quiet_limit)
            claimed = await self.queue.claim(batch)
            for _ in range(taken - len(claimed)):
                self._slots.release()
            for cid, claim in claimed.items():
                self.adopt(cid, claim)

    # --- conversations taken as their message is queued (``queue.Taker``) -----------------
    async def reserve(self, cid: str) -> bool:
        if self._stopping or cid in self._active or self._slots.locked():
            return False
        await self._slots.acquire()  # free: taken without waiting
        return True

    def unreserve(self) -> None:
        self._slots.release()

    def adopt(self, cid: str, claim: Claim) -> None:
        # Even when stopping meanwhile: _serve then hands the conversation back at once.
        # In the pool's context, not the ingesting request's (its span, its log fields).
        self._active[cid] = asyncio.create_task(
            self._serve(cid, claim.token, claim.head), name=f"hermes-conv-{cid}",
            context=self._context.copy())

    async def _serve(self, cid: str, token: str, head: Head) -> None:
        try:
            while not self._stopping:
                if self.collector is not None:
                    head = await self.collector.collect(cid, token, head)
                if head.attempts > MAX_ATTEMPTS:
                    await self._give_up(head)
                elif await self._run_item(cid, token, head):
                    return  # the lease was lost
                self.processed += 1
                # An answer that went out must not be served again: wait out an outage.
                _, following = await self.outage.retrying(
                    functools.partial(self.queue.complete, cid, token, head.item.id),
                    f"completing {head.item.id}")
                if following is None:
                    return  # none left (the lock was given back), or the lease was lost
                head = following
            # Stopping with the lock held: hand the conversation to another process now.
            await self.queue.release(cid, token, unstarted=head.item.id)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.queue.release(cid, token))
            raise
        except Exception:
            log.exception("worker for %s failed; its item stays queued", cid)
            with contextlib.suppress(Exception):
                await self.queue.release(cid, token)
        finally:
            self._active.pop(cid, None)
            self._slots.release()
            if cid in self._rewake and not self._stopping:
                # A message may have arrived just as we released the lock: wake it again.
                self._rewake.discard(cid)
                with contextlib.suppress(Exception):
                    await self.queue.wake(cid)

    async def _run_item(self, cid: str, token: str, head: Head) -> bool:
        """Handle one item while keeping the lease; True if the lease was lost."""
        item = head.item
        handler = asyncio.create_task(self._handle(head, lambda: self.queue.renew(cid, token)))
        lost = False
        ticks = 0
        renew_every = max(1, int(self.queue.lease_ms / 1000 / 3 / _FLAG_POLL))
        while not handler.done():
            try:
                done, _ = await asyncio.wait({handler}, timeout=_FLAG_POLL)
            except asyncio.CancelledError:
                # Stopping past the grace: the task saves where it got to before the lock
                # is given back (asyncio.wait alone would leave it running, orphaned).
                handler.cancel()
                await asyncio.wait({handler})
                raise
            if done:
                break
            ticks += 1
            try:
                if "stop" in await self.queue.flags(cid, item.task_id):
                    await self.queue.clear_flags(cid)
                    self.execution.cancel(item.task_id)
                if ticks % renew_every == 0 and not await self.queue.renew(cid, token):
                    log.error("lost the lease on %s; abandoning its task", cid)
                    lost = True
                    handler.cancel()
            except Exception as exc:
                log.warning("lease upkeep for %s failed: %s", cid, exc)
        with contextlib.suppress(asyncio.CancelledError):
            await handler
        return lost

    # --- handling one item -------------------------------------------------------------
    async def _handle(self, head: Head, still_ours: Callable[[], Awaitable[bool]]) -> None:
        item = head.item
        started = time.monotonic()
        # The span that queued it, or (an approval, a continued task) the task's first.
        parent = item.traceparent or (head.task.extra.get("traceparent") if head.task
                                      else None)
        with trace_context(item.task_id, item.inbound.conversation_id):
            self._record_waits(head, parent)
            with tracing.span("task", {"hermes.task_id": item.task_id, "hermes.kind": item.kind,
                                       "hermes.channel": item.inbound.channel,
                                       "hermes.conversation_id": item.inbound.conversation_id},
                              parent=parent, trace_id=item.task_id, kind="consumer") as span:
                try:
                    finished, result = await self._execute(head, still_ours)
                    if not finished:
                        return  # another worker took the conversation over meanwhile
                    span.set_attribute("hermes.outcome",
                                       result.outcome if result else "skipped")
                    if result is not None:
                        with tracing.span("deliver", {"hermes.channel": item.inbound.channel}):
                            await self.replies.deliver(item, result)
                finally:
                    self.replies.forget(item)
            # One line per task at INFO: traffic visible without debug logs (no text).
            log.info("task %s %s channel=%s conversation=%s seconds=%.2f", item.task_id,
                     result.outcome if result is not None else "skipped",
                     item.inbound.channel, item.inbound.conversation_id,
                     time.monotonic() - started)

    async def _execute(self, head: Head, still_ours: Callable[[], Awaitable[bool]]
                       ) -> tuple[bool, TaskResult | None]:
        """The item's task carried out, waiting out a store outage: (False, None) when
        another worker took the conversation over meanwhile."""
        item = head.item
        while True:
            try:
                return True, await self.execution.execute(head)
            except StoreUnavailableError as exc:
                log.warning("task %s lost the store (%s); it waits for it", item.task_id, exc)
                if not await self.outage.back():
                    if self.outage.first_notice(item.task_id):
                        await self.replies.delayed(item)
                    raise  # the item stays queued: continued once the store is back
                if not await still_ours():
                    return False, None
                head = await self.execution.reread(head)
            except Exception:
                log.exception("task %s failed unexpectedly", item.task_id)
                return True, await self.replies.without_agent(item, CRASHED, "failed")

    @staticmethod
    def _record_waits(head: Head, parent: str | None) -> None:
        """Spans for the time the item waited in its queue and, for an approval, the time
        the call waited for a person."""
        if not tracing.enabled():
            return
        item, now = head.item, time.time()
        tracing.record("queued", {"hermes.kind": item.kind}, parent=parent,
                       trace_id=item.task_id, start_time=item.enqueued_at, end_time=now)
        pending = head.task.approval if head.task else None
        if item.kind == "approval" and item.approval is not None and pending is not None:
            tracing.record("approval", {
                "hermes.tool": pending.tool_name, "hermes.approved": bool(
                    item.approval.get("approved")),
                "hermes.decided_by": str(item.approval.get("by", ""))},
                parent=parent, trace_id=item.task_id, start_time=pending.requested_at,
                end_time=item.enqueued_at)

    async def _give_up(self, head: Head) -> None:
        log.error("giving up on %s after %d attempts", head.item.id, MAX_ATTEMPTS)
        result = await self.replies.without_agent(
            head.item, f"I could not process this message after {MAX_ATTEMPTS} attempts; "
            "please send it again.", "failed")
        await self.replies.deliver(head.item, result)

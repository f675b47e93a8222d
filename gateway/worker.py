"""WorkerPool: takes conversations from the queue and runs their tasks, one at a time per
conversation across all replicas, in arrival order.

A dispatcher waits for woken conversations (and, when idle, rescans the ones with queued
work, which is how the items of a dead worker are picked up after its lease expires). For
each conversation it claims, a worker handles the queued items in order, renewing the lease
and watching the conversation's stop/interrupt flags while a task runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.base import Channel, InboundMessage, OutboundMessage
from agent_core import (
    Approval,
    Event,
    EventType,
    TaskControl,
    TaskRequest,
    TaskResult,
    TaskState,
)
from agent_core.log import trace_context
from agent_core.report import TaskReport
from agent_core.runtime import Runtime
from agent_core.settings import missing_model_message
from agent_core.task import ACTIVE

from .access import Roles
from .approvals import ApprovalService
from .delivery import Deliverer
from .progress import ProgressRelay
from .queue import Head, WorkItem, WorkQueue
from .settings import GatewaySettings

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
_FLAG_POLL = 1.0



class WorkerPool:
    """Runs queued work for this process; any number of processes can share one queue."""

    def __init__(
        self,
        *,
        queue: WorkQueue,
        runtime: Runtime,
        channels: dict[str, Channel],
        deliverer: Deliverer,
        progress: ProgressRelay,
        settings: GatewaySettings,
        model_ready: bool,
        approvals: ApprovalService | None = None,
        scan_interval: float = 1.0,
    ) -> None:
        self.queue = queue
        self.runtime = runtime
        self.channels = channels
        self.deliverer = deliverer
        self.progress = progress
        self.settings = settings
        self.roles = Roles.from_settings(settings)
        self.model_ready = model_ready
        self.approvals = approvals
        self.scan_interval = scan_interval
        self._slots = asyncio.Semaphore(settings.hermes_workers)
        self._active: dict[str, asyncio.Task[None]] = {}
        # Conversations woken while this process was finishing them: looked at again at once.
        self._rewake: set[str] = set()
        self._running_tasks: dict[str, asyncio.Task[TaskResult]] = {}
        self._dispatcher: asyncio.Task[None] | None = None
        self._stopping = False
        self.processed = 0

    @property
    def active(self) -> int:
        """Conversations this process is working on."""
        return len(self._active)

    async def start(self) -> None:
        """Start dispatching."""
        self._dispatcher = asyncio.create_task(self._dispatch(), name="hermes-dispatcher")

    async def pause(self) -> None:
        """Claim nothing more. A conversation being served finishes its current item, then
        is handed back with the rest of its queue (another process takes it at once)."""
        self._stopping = True
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
            self._dispatcher = None

    async def stop(self, grace: float = 10.0) -> None:
        """Stop taking work; let running tasks finish for ``grace`` seconds, then interrupt
        them so that another process recovers them (their items stay queued)."""
        await self.pause()
        if self._active:
            _, pending = await asyncio.wait(list(self._active.values()), timeout=grace)
            if pending:
                self.runtime.loop.shutting_down = True
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
            claimed = await self.queue.claim(batch)
            for _ in range(taken - len(claimed)):
                self._slots.release()
            for cid, claim in claimed.items():
                self._active[cid] = asyncio.create_task(
                    self._serve(cid, claim.token, claim.head), name=f"hermes-conv-{cid}")

    async def _serve(self, cid: str, token: str, head: Head | None) -> None:
        try:
            while not self._stopping:
                if head is None:
                    left, head = await self.queue.complete(cid, token, "-")
                else:
                    if head.attempts > MAX_ATTEMPTS:
                        await self._give_up(head.item)
                    elif await self._run_item(cid, token, head):
                        return  # the lease was lost
                    self.processed += 1
                    left, head = await self.queue.complete(cid, token, head.item.id)
                if left <= 0:
                    return
            # Stopping with the lock held: hand the conversation to another process now.
            await self.queue.release(cid, token, unstarted=head.item.id if head else None)
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
        handler = asyncio.create_task(self._handle(head))
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
                    self._cancel_task(item.task_id)
                if ticks % renew_every == 0 and not await self.queue.renew(cid, token):
                    log.error("lost the lease on %s; abandoning its task", cid)
                    lost = True
                    handler.cancel()
            except Exception as exc:
                log.warning("lease upkeep for %s failed: %s", cid, exc)
        with contextlib.suppress(asyncio.CancelledError):
            await handler
        return lost

    def _cancel_task(self, task_id: str) -> None:
        task = self._running_tasks.get(task_id)
        if task is not None:
            task.cancel()

    # --- handling one item -------------------------------------------------------------
    async def _handle(self, head: Head) -> None:
        item = head.item
        msg = item.inbound
        with trace_context(item.task_id, msg.conversation_id):
            try:
                result = await self._execute(head)
            except Exception:
                log.exception("task %s failed unexpectedly", item.task_id)
                result = await self._finish_without_agent(
                    item, "Something went wrong on my side while working on this; please "
                    "try again.", "failed")
            if result is None:
                return
            if item.kind == "scheduled" and result.outcome != "answered":
                await self._scheduled_failure(item, result)
                return
            await self._deliver_result(msg, result)

    async def _scheduled_failure(self, item: WorkItem, result: TaskResult) -> None:
        """A scheduled run that did not answer: tell the target and the job's owner."""
        assert item.schedule is not None
        msg = item.inbound
        notice = (f"The scheduled report {item.schedule['name']!r} "
                  f"(job {item.schedule['job_id']}) did not complete: {result.text}")
        await self.deliverer.deliver(msg.reply(notice, "error", task_id=result.task_id))
        owner = str(item.schedule.get("owner") or "")
        channel_name, _, user = owner.partition(":")
        channel = self.channels.get(channel_name)
        if channel is None or not user:
            return
        try:
            target = await channel.direct_target(user)
        except Exception as exc:  # NotImplementedError for pull channels, API errors
            log.info("cannot notify the owner %s of job %s: %s", owner,
                     item.schedule["job_id"], exc)
            return
        await self.deliverer.deliver(OutboundMessage(
            channel=channel.name, conversation_id=msg.conversation_id, reply_target=target,
            text=notice, kind="error", task_id=result.task_id))

    async def _execute(self, head: Head) -> TaskResult | None:
        item = head.item
        msg = item.inbound
        loop = self.runtime.loop
        store = self.runtime.store
        if not self.model_ready:
            return await self._finish_without_agent(item, missing_model_message(), "failed")
        control = TaskControl(interrupted=self._interrupted(msg.conversation_id, item.task_id),
                              steering=self._steering(msg.conversation_id))
        existing = head.task
        channel = self.channels.get(msg.channel)
        if item.kind == "approval":
            assert item.approval is not None
            approval = Approval(approved=bool(item.approval["approved"]),
                                by=str(item.approval["by"]),
                                note=str(item.approval.get("note", "")),
                                arguments=item.approval.get("arguments"))
            runner = loop.resume(item.task_id, approval=approval, control=control)
        elif item.kind == "scheduled" and existing is None:
            assert item.schedule is not None
            runner = loop.run(self._request(
                item, str(item.schedule["run_as"]), control, unattended=True,
                preapproved_tools=list(item.schedule["preapproved_tools"]),
                job_id=item.schedule["job_id"]))
        elif existing is not None and existing.status == "cancelled" and existing.round == 0:
            return None  # cancelled through the API before it started
        elif existing is not None and existing.status == "running":
            runner = loop.recover(item.task_id, control=control)  # its worker died
        elif existing is not None and existing.status not in ACTIVE:
            return _result_from_state(existing)  # done before a crash; deliver again
        else:
            waiting = head.waiting
            if waiting is not None and waiting.status == "asked_user":
                await store.set_waiting(msg.conversation_id, None)
                await self._mark_merged(item.task_id, waiting.task_id, msg)
                runner = loop.resume(waiting.task_id, reply=msg.text, control=control)
            else:
                runner = loop.run(self._request(item, f"{msg.channel}:{msg.user_id}", control,
                                                user_name=msg.user_name),
                                  conversation=head.conversation)
        task = asyncio.ensure_future(runner)
        self._running_tasks[item.task_id] = task
        if channel is not None and item.kind != "scheduled":
            # Nobody waits on a scheduled run: post its answer, without a progress display.
            await self.progress.begin(item.task_id, channel, msg.reply_target)
        try:
            result = await task
        except asyncio.CancelledError:
            if self.runtime.loop.shutting_down:
                raise
            # /stop: the loop recorded the cancellation; tell the chat.
            return TaskResult(item.task_id, item.task_id, msg.conversation_id, "cancelled",
                              "Stopped.", TaskReport(outcome="cancelled"))
        finally:
            self._running_tasks.pop(item.task_id, None)
            await self.progress.end(item.task_id)
        if result.outcome == "asked_user":
            await store.set_waiting(msg.conversation_id, result.task_id)
        return result

    def _request(self, item: WorkItem, identity: str, control: TaskControl,
                 **extra: Any) -> TaskRequest:
        """A new task for ``item``, run as ``identity`` with that identity's role."""
        msg = item.inbound
        role = self.roles.role_of(identity)
        return TaskRequest(
            text=msg.text, conversation_id=msg.conversation_id, user_id=identity, role=role,
            permissions=self.roles.permissions_of(role), task_id=item.task_id,
            trace_id=item.task_id, workdir=self._workdir(msg, item.task_id),
            data_dir=self.settings.hermes_data_dir,
            extra={**self.settings.tool_extra(), "channel": msg.channel,
                   "reply_target": msg.reply_target, **extra},
            control=control)

    async def _finish_without_agent(self, item: WorkItem, text: str, outcome: Any
                                    ) -> TaskResult:
        """End a task the agent could not run (no model, repeated crashes): record the
        state and an AGENT_FINISHED event, so the chat and the task API both say why."""
        msg = item.inbound
        state = TaskState(task_id=item.task_id, trace_id=item.task_id,
                          conversation_id=msg.conversation_id, user_id=msg.user_id,
                          role="", permissions=[], instruction=msg.text, status=outcome,
                          result_text=text, error=text)
        report = TaskReport(outcome=outcome, error=text)
        state.report = report.to_dict()
        await self.runtime.store.save_task(state)
        self.runtime.bus.emit(Event(EventType.AGENT_FINISHED, item.task_id, msg.conversation_id,
                                    0, {"outcome": outcome, "text": text,
                                        "report": state.report}, task_id=item.task_id))
        return TaskResult(item.task_id, item.task_id, msg.conversation_id, outcome, text,
                          report, error=text)

    async def _mark_merged(self, task_id: str, into: str, msg: InboundMessage) -> None:
        """A reply to a waiting question continues that task; the new id points to it."""
        state = TaskState(task_id=task_id, trace_id=task_id, conversation_id=msg.conversation_id,
                          user_id=msg.user_id, role="user", permissions=[],
                          instruction=msg.text, status="answered",
                          answer=f"continued task {into}", extra={"continued": into})
        await self.runtime.store.save_task(state)

    def _interrupted(self, cid: str, task_id: str) -> Callable[[], Any]:
        async def interrupted() -> bool:
            return bool({"interrupt", "stop"} & await self.queue.flags(cid, task_id))

        return interrupted

    def _steering(self, cid: str) -> Callable[[], Any] | None:
        if self.settings.hermes_busy_mode != "steer":
            return None

        async def steering() -> list[str]:
            return [item.inbound.text for item in await self.queue.take_steering(cid)]

        return steering

    def _workdir(self, msg: InboundMessage, task_id: str) -> Path:
        safe = msg.conversation_id.replace("/", "_").replace(":", "_")
        return Path(self.settings.hermes_data_dir) / "sandboxes" / safe / task_id

    async def _give_up(self, item: WorkItem) -> None:
        log.error("giving up on %s after %d attempts", item.id, MAX_ATTEMPTS)
        result = await self._finish_without_agent(
            item, f"I could not process this message after {MAX_ATTEMPTS} attempts; please "
            "send it again.", "failed")
        await self._deliver_result(item.inbound, result)

    # --- replies -------------------------------------------------------------------------
    async def _deliver_result(self, msg: InboundMessage, result: TaskResult) -> None:
        if result.superseded:
            return  # interrupted by the next message, which answers instead
        if result.outcome == "awaiting_approval" and self.approvals is not None \
                and result.approval is not None:
            prompt = await self.approvals.open(result, msg)
            sent = await self.deliverer.deliver(prompt)
            if sent is not None:
                await self.approvals.remember_message(result.approval.id, sent.ref)
            return
        kind: Any = {"answered": "answer", "asked_user": "question",
                     "awaiting_approval": "approval"}.get(result.outcome, "error")
        await self.deliverer.deliver(msg.reply(
            result.text, kind, task_id=result.task_id,
            choices=result.question.choices if result.question else [],
            approval=result.approval.model_dump() if result.approval else None))


def _result_from_state(state: TaskState) -> TaskResult:
    report = TaskReport.from_dict(state.report) if state.report else TaskReport()
    text = state.result_text or state.answer or ""
    return TaskResult(state.task_id, state.trace_id, state.conversation_id, state.status, text,
                      report, question=state.question, approval=state.approval,
                      error=state.error, superseded=state.superseded)

"""Replies: what a task's end becomes in its chat.

An answer, a question with its buttons, an approval prompt (opened, posted, and its
message remembered so the decision can replace it), an error; a scheduled run that did not
answer tells its target and its owner (a run its schedule's budget stopped also pauses the
schedule). On a chat platform each is the end of the item's live reply
(``gateway/live.py``), delivered once whatever fails. A task the agent could not run at all
(no model, a crash, too many attempts) is still ended properly: its state and an
AGENT_FINISHED event are recorded, so the chat and the task API say the same thing.
"""

from __future__ import annotations

import logging
from typing import Any

from adapters.base import Channel, InboundMessage, OutboundKind, OutboundMessage
from adapters.live import LiveChannel
from agent_core import Event, EventType, TaskResult, TaskState, TaskStatus
from agent_core.report import TaskReport
from agent_core.runtime import Runtime

from .approvals import ApprovalService
from .delivery import Deliverer, Sent
from .live import LiveReplies
from .outage import DELAYED, StoreOutage
from .queue import WorkItem
from .scheduler import Scheduler

log = logging.getLogger(__name__)

_KINDS: dict[TaskStatus, OutboundKind] = {"answered": "answer", "asked_user": "question",
                                          "awaiting_approval": "approval"}


class Replies:
    """Delivers the outcome of each task to where its message came from."""

    def __init__(self, *, runtime: Runtime, deliverer: Deliverer,
                 channels: dict[str, Channel], approvals: ApprovalService | None,
                 outage: StoreOutage | None = None, scheduler: Scheduler | None = None,
                 live: LiveReplies | None = None) -> None:
        self.runtime = runtime
        self.deliverer = deliverer
        self.live = live
        self.channels = channels
        self.approvals = approvals
        self.outage = outage
        #: Pauses a schedule whose budget stopped its run.
        self.scheduler = scheduler
        self._again: set[str] = set()

    def again(self, task_id: str) -> None:
        """The next reply of ``task_id`` is one sent before (its item was served again):
        it edits the message it was posted in, where that was recorded."""
        self._again.add(task_id)

    def already_delivered(self, task_id: str) -> bool:
        """Whether this process already delivered the reply of ``task_id`` (its item was
        served again because its removal could not be recorded)."""
        return self.outage is not None and self.outage.was_delivered(task_id)

    async def delayed(self, item: WorkItem) -> None:
        """Tell the user, once, that their answer is delayed by a store outage."""
        if item.kind == "scheduled":
            return  # nobody waits on a scheduled run
        await self.deliverer.deliver(item.inbound.reply(DELAYED, "notice",
                                                        task_id=item.task_id))

    async def deliver(self, item: WorkItem, result: TaskResult) -> None:
        """The reply for a task that ended or paused."""
        if item.kind == "scheduled" and result.outcome != "answered":
            await self._scheduled_failure(item, result)
            return
        msg = item.inbound
        if result.superseded:
            # Interrupted by the next message, which answers instead.
            channel = self.channels.get(msg.channel)
            if self.live is not None and isinstance(channel, LiveChannel):
                await self.live.close(item, channel)
            return
        if result.outcome == "awaiting_approval" and self.approvals is not None \
                and result.approval is not None:
            prompt = await self.approvals.open(result, msg)
            sent = await self._send(item, prompt)
            if sent is not None:
                await self.approvals.remember_message(result.approval.id, sent.ref)
            return
        replaces = None
        if result.task_id in self._again:
            self._again.discard(result.task_id)
            replaces = await self.deliverer.where(result.task_id)
        sent = await self._send(item, msg.reply(
            result.text, _KINDS.get(result.outcome, "error"), task_id=result.task_id,
            choices=result.question.choices if result.question else [],
            approval=result.approval.model_dump() if result.approval else None,
            replaces=replaces))
        if sent is None:
            return
        if self.outage is not None:
            self.outage.delivered(result.task_id)
        await self.deliverer.remember(result.task_id, sent.ref,
                                      ttl=self.runtime.settings.task_retention)

    async def _send(self, item: WorkItem, message: OutboundMessage) -> Sent | None:
        """The item's reply: on a chat platform, the end of its live reply (once)."""
        channel = self.channels.get(message.channel)
        if self.live is not None and isinstance(channel, LiveChannel):
            return await self.live.finish(item, channel, message)
        return await self.deliverer.deliver(message)

    def forget(self, item: WorkItem) -> None:
        """Nothing more is done with ``item`` here (delivered, or handed on)."""
        if self.live is not None:
            self.live.forget(item)

    async def without_agent(self, item: WorkItem, text: str, outcome: TaskStatus
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

    async def _scheduled_failure(self, item: WorkItem, result: TaskResult) -> None:
        """A scheduled run that did not answer: tell the target and the job's owner."""
        assert item.schedule is not None
        msg = item.inbound
        job_id = str(item.schedule["job_id"])
        notice = (f"The scheduled report {item.schedule['name']!r} "
                  f"(job {job_id}) did not complete: {result.text}")
        if result.budget is not None and result.budget.scope == "schedule" \
                and self.scheduler is not None:
            # Every run would meet the same budget: wait for a person to resume it.
            await self.scheduler.set_paused(job_id, True)
            notice += (" The schedule is paused: resume it with POST "
                       f"/agent/schedules/{job_id}/resume once its budget allows, or "
                       f"remove it with /unschedule {job_id}.")
        await self.deliverer.deliver(msg.reply(notice, "error", task_id=result.task_id))
        await self._tell_owner(item, msg, notice, result.task_id)

    async def _tell_owner(self, item: WorkItem, msg: InboundMessage, notice: str,
                          task_id: str) -> None:
        assert item.schedule is not None
        owner = str(item.schedule.get("owner") or "")
        channel_name, _, user = owner.partition(":")
        channel = self.channels.get(channel_name)
        if channel is None or not user:
            return
        try:
            target: dict[str, Any] = await channel.direct_target(user)
        except Exception as exc:  # NotImplementedError for pull channels, API errors
            log.info("cannot notify the owner %s of job %s: %s", owner,
                     item.schedule["job_id"], exc)
            return
        await self.deliverer.deliver(OutboundMessage(
            channel=channel.name, conversation_id=msg.conversation_id, reply_target=target,
            text=notice, kind="error", task_id=task_id))

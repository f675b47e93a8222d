"""Execution: carries out one queued item, as the task state machine says.

``agent_core.lifecycle.next_step`` chooses what the item's task needs (start, resume with
an approval or with the answer to its question, recover, redeliver, skip); this module
does it with what only the gateway knows: who the sender is (their role and permissions),
the task's sandbox, its channel's progress display, the conversation's stop and steer
flags. A task it runs can be stopped by id (``/stop``, the API's cancel).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, assert_never

from adapters.base import Channel, InboundMessage
from adapters.live import LiveChannel
from agent_core import (
    Approval,
    Event,
    EventType,
    Message,
    TaskControl,
    TaskRequest,
    TaskResult,
    TaskState,
)
from agent_core.lifecycle import (
    AnswerWaiting,
    ApplyApproval,
    Recover,
    Redeliver,
    Skip,
    Start,
    next_step,
)
from agent_core.report import TaskReport
from agent_core.runtime import Runtime
from agent_core.settings import missing_model_message
from agent_core.tools.sandbox import inbox_dir, sandbox_dir

from .access import Roles
from .inbox import SENT_FILES, Inbox, Received
from .live import LiveReplies
from .progress import ProgressRelay
from .queue import Head, WorkItem, WorkQueue
from .replies import Replies
from .settings import GatewaySettings
from .workflows import WorkflowTasks

log = logging.getLogger(__name__)


class Execution:
    """Runs the task of each item a worker hands over."""

    def __init__(self, *, runtime: Runtime, queue: WorkQueue, channels: dict[str, Channel],
                 progress: ProgressRelay, replies: Replies, settings: GatewaySettings,
                 model_ready: bool, workflows: WorkflowTasks | None = None,
                 live: LiveReplies | None = None, inbox: Inbox | None = None) -> None:
        self.runtime = runtime
        self.queue = queue
        self.channels = channels
        self.progress = progress
        #: Shows replies on chat platforms while they are written.
        self.live = live
        self.replies = replies
        self.settings = settings
        self.roles = Roles.from_settings(settings)
        self.model_ready = model_ready
        #: Runs ``/workflow`` tasks (with the hub).
        self.workflows = workflows
        #: Receives the files that come with messages (None: they are not read).
        self.inbox = inbox
        self._running: dict[str, asyncio.Future[TaskResult]] = {}

    def cancel(self, task_id: str) -> None:
        """Stop task ``task_id`` if it runs here (the loop records the cancellation)."""
        task = self._running.get(task_id)
        if task is not None:
            task.cancel()

    def shutting_down(self) -> None:
        """Tasks cancelled from now on are being handed to another process: they stay
        "running", for ``recover`` there."""
        self.runtime.loop.shutting_down = True

    async def execute(self, head: Head) -> TaskResult | None:
        """The item's task carried out: its result, or None when there is nothing to
        deliver (cancelled before it started)."""
        item = head.item
        msg = item.inbound
        if not self.model_ready and item.kind != "workflow":
            return await self.replies.without_agent(item, missing_model_message(), "failed")
        loop = self.runtime.loop
        control = TaskControl(interrupted=self._interrupted(msg.conversation_id, item.task_id),
                              steering=self._steering(msg.conversation_id, item.task_id))
        runner: Awaitable[TaskResult]
        step = next_step(item.kind, head.task, head.waiting,
                         sender=f"{msg.channel}:{msg.user_id}")
        match step:
            case Skip():
                return None
            case Start() | Recover() if item.kind == "workflow":
                if self.workflows is None:
                    return await self.replies.without_agent(
                        item, "Workflows need the agent hub, which is not enabled here "
                        "(HERMES_HUB=true).", "failed")
                runner = self.workflows.run(
                    item, identity=f"{msg.channel}:{msg.user_id}",
                    stored=head.task if isinstance(step, Recover) else None)
            case Redeliver(state=state):
                if self.replies.already_delivered(state.task_id):
                    return None  # its removal was lost in an outage; the person has it
                self.replies.again(state.task_id)
                return TaskResult.from_state(state)
            case ApplyApproval():
                assert item.approval is not None
                decision = item.approval
                runner = loop.resume(item.task_id, control=control, approval=Approval(
                    approved=bool(decision["approved"]), by=str(decision["by"]),
                    note=str(decision.get("note", "")), arguments=decision.get("arguments")))
            case Recover():
                runner = loop.recover(item.task_id, control=control)  # its worker died
            case AnswerWaiting(task_id=waiting):
                received = await self._receive(item)
                await self.runtime.store.set_waiting(msg.conversation_id, None)
                await self._mark_merged(item.task_id, waiting, msg, received)
                runner = loop.resume(waiting, reply=_said(msg, received), control=control,
                                     parts=received.parts)
            case Start(unattended=True):
                assert item.schedule is not None
                runner = loop.run(self._request(
                    item, str(item.schedule["run_as"]), control, unattended=True,
                    preapproved_tools=list(item.schedule["preapproved_tools"]),
                    job_id=item.schedule["job_id"]))
            case Start():
                received = await self._receive(item)
                request = self._request(item, f"{msg.channel}:{msg.user_id}", control,
                                        user_name=msg.user_name)
                request.text, request.parts = _said(msg, received), received.parts
                if msg.attachments:
                    request.extra[SENT_FILES] = received.sent()
                runner = loop.run(request, conversation=head.conversation)
            case unknown:
                assert_never(unknown)
        return await self._follow(item, runner)

    async def _receive(self, item: WorkItem, into: str | None = None) -> Received:
        """The files of the item's message, received into its conversation's inbox; what
        the person is told about them (refusals, what a voice note said) goes out first,
        and to the event stream of the task that reads them (``into``: a running task the
        message was steered into)."""
        msg = item.inbound
        if self.inbox is None or not msg.attachments:
            return Received()
        received = await self.inbox.receive(msg, item.task_id)
        task_id = into or item.task_id
        self.runtime.bus.emit(Event(EventType.FILES_RECEIVED, task_id,
                                    msg.conversation_id, 0, {
                                        "files": [_shown(p.to_dict()) for p in received.parts],
                                        "notices": received.notices}, task_id=task_id))
        if received.notices:
            await self.replies.deliverer.deliver(msg.reply("\n".join(received.notices),
                                                           "notice"))
        return received

    async def reread(self, head: Head) -> Head:
        """``head`` with its task (and the waiting one) as the store has them now: after an
        outage the task goes on from its last save."""
        store = self.runtime.store
        task = await store.load_task(head.item.task_id)
        waiting = await store.load_task(head.waiting.task_id) if head.waiting else None
        return dataclasses.replace(head, task=task, waiting=waiting, conversation=None)

    async def _follow(self, item: WorkItem, runner: Awaitable[TaskResult]) -> TaskResult:
        """Run the task with its channel's progress display; a /stop ends it "cancelled"."""
        msg = item.inbound
        task = asyncio.ensure_future(runner)
        self._running[item.task_id] = task
        channel = self.channels.get(msg.channel)
        live = self.live if isinstance(channel, LiveChannel) and \
            item.kind != "scheduled" else None
        if channel is not None and item.kind != "scheduled":
            # Nobody waits on a scheduled run: post its answer, without a progress display.
            if live is not None:
                assert isinstance(channel, LiveChannel)
                await live.begin(item, channel)
            await self.progress.begin(item.task_id, channel, msg.reply_target,
                                      display=live is None)
        try:
            result = await task
        except asyncio.CancelledError:
            if self.runtime.loop.shutting_down:
                raise
            # /stop: the loop recorded the cancellation; tell the chat.
            return TaskResult(item.task_id, item.task_id, msg.conversation_id, "cancelled",
                              "Stopped.", TaskReport(outcome="cancelled"))
        finally:
            self._running.pop(item.task_id, None)
            await self.progress.end(item.task_id)
            if live is not None:
                await live.pause(item)
        if result.outcome == "asked_user":
            await self.runtime.store.set_waiting(msg.conversation_id, result.task_id)
        return result

    def _request(self, item: WorkItem, identity: str, control: TaskControl,
                 **extra: Any) -> TaskRequest:
        """A new task for ``item``, run as ``identity`` with that identity's role."""
        msg = item.inbound
        role = msg.role or self.roles.role_of(identity)
        if msg.principal:
            extra = {**extra, "principal": msg.principal}
        return TaskRequest(
            text=msg.text, conversation_id=msg.conversation_id, user_id=identity, role=role,
            permissions=self.roles.permissions_of(role), task_id=item.task_id,
            trace_id=item.task_id,
            workdir=sandbox_dir(self.settings.hermes_data_dir, msg.conversation_id,
                                item.task_id),
            data_dir=self.settings.hermes_data_dir,
            extra={**self.settings.tool_extra(), "channel": msg.channel,
                   "inbox": str(inbox_dir(self.settings.hermes_data_dir,
                                          msg.conversation_id)),
                   "reply_target": msg.reply_target, **extra,
                   **({"traceparent": item.traceparent} if item.traceparent else {})},
            control=control)

    async def _mark_merged(self, task_id: str, into: str, msg: InboundMessage,
                           received: Received) -> None:
        """A reply to a waiting question continues that task; the new id points to it."""
        extra: dict[str, Any] = {"continued": into}
        if msg.attachments:
            extra[SENT_FILES] = received.sent()
        state = TaskState(task_id=task_id, trace_id=task_id, conversation_id=msg.conversation_id,
                          user_id=msg.user_id, role="user", permissions=[],
                          instruction=msg.text, status="answered",
                          answer=f"continued task {into}", extra=extra)
        await self.runtime.store.save_task(state)

    def _interrupted(self, cid: str, task_id: str) -> Callable[[], Awaitable[bool]]:
        async def interrupted() -> bool:
            return bool({"interrupt", "stop"} & await self.queue.flags(cid, task_id))

        return interrupted

    def _steering(self, cid: str, task_id: str
                  ) -> Callable[[], Awaitable[list[str | Message]]] | None:
        if self.settings.hermes_busy_mode != "steer":
            return None

        async def steering() -> list[str | Message]:
            """The messages steered into the running task, with their files (received
            into the conversation's inbox like any message's)."""
            said: list[str | Message] = []
            for item in await self.queue.take_steering(cid):
                if not item.inbound.attachments:
                    said.append(item.inbound.text)
                    continue
                received = await self._receive(item, into=task_id)
                said.append(Message(role="user", kind="user", parts=received.parts,
                                    content=_said(item.inbound, received)))
            return said

        return steering


def _said(msg: InboundMessage, received: Received) -> str:
    """What the person said: the message's text, and the speech of its voice notes."""
    said = "\n\n".join(t for t in (msg.text, received.transcript) if t)
    return said or ("" if received.parts else "(empty)")


def _shown(part: dict[str, Any]) -> dict[str, Any]:
    """A part as the event stream shows it: no text, no path on the gateway's disk."""
    return {k: v for k, v in part.items() if k not in ("text", "rendition")}

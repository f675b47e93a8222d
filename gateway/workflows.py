"""``/workflow <id> <text>`` in every channel: a task of the conversation whose work is a
run of a hub workflow instead of the agent's loop.

The router queues it like any message (so it waits its turn, shows progress, stops with
/stop and is answered where it was asked: a Slack thread, a Telegram topic, the web chat,
the API's task). Its worker sends the ``run_workflow`` request with a sender id of its own
(``gateway-wf.<task id>``) and keeps when and to which executor in the task's state first,
so a worker that continues the task after another died reads the answer that came
meanwhile, or waits for it, instead of starting the run again. Each step's start and end is
shown as the task's progress; /stop cancels the run. The run acts for the conversation it
was asked in (its steps may read that conversation's data, and no other's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent_core import TaskResult, TaskState
from agent_core.events import Event, EventBus, EventType
from agent_core.report import TaskReport

if TYPE_CHECKING:
    from agent_core.store import RedisConversationStore
    from hub import TaskResponse
    from hub.workflows.store import WorkflowStore

    from .queue import WorkItem

log = logging.getLogger(__name__)

_MAX_TEXT = 3500
_DEADLINE_MS = 300_000


class WorkflowTasks:
    """Runs the workflow tasks of the conversations."""

    def __init__(self, workflows: WorkflowStore, store: RedisConversationStore,
                 events: EventBus, *, shutting_down: Callable[[], bool] = lambda: False
                 ) -> None:
        self.workflows = workflows
        self.bus = workflows.bus
        self.store = store
        self.events = events
        #: True while the process hands its tasks back (a cancel is then not a /stop).
        self.shutting_down = shutting_down

    async def run(self, item: WorkItem, *, identity: str, stored: TaskState | None
                  ) -> TaskResult:
        """Carry out ``/workflow <id> <text>`` for ``item`` (``stored``: its state, when a
        worker before this one began it)."""
        from hub import TaskRequest
        from hub.workflows.client import NoExecutor, choose_executor

        msg = item.inbound
        workflow_id, _, text = _arguments(msg.text).partition(" ")
        state = stored if stored is not None and stored.extra.get("workflow") else TaskState(
            task_id=item.task_id, trace_id=item.task_id, conversation_id=msg.conversation_id,
            user_id=identity, role="", permissions=[], instruction=msg.text, status="running",
            extra={"channel": msg.channel})
        self._emit(state, EventType.AGENT_STARTED, {"task_id": state.task_id,
                                                     "text": msg.text[:2000],
                                                     "resumed": stored is not None})
        kept = state.extra.get("workflow")
        if kept is None:
            if not workflow_id:
                listed = ", ".join(await self.workflows.versions()) or "none yet"
                return await self._end(state, "answered", "Usage: /workflow <id> <what to do>."
                                       f" Workflows here: {listed}.")
            workflow = await self.workflows.get(workflow_id)
            if workflow is None:
                listed = ", ".join(await self.workflows.versions()) or "none yet"
                return await self._end(state, "failed", f"There is no workflow "
                                       f"{workflow_id!r}. Workflows here: {listed}.")
            try:
                executor = await choose_executor(self.bus)
            except NoExecutor as exc:
                return await self._end(state, "failed", f"The workflow cannot start: {exc}.")
            kept = {"workflow_id": workflow_id, "version": workflow.version,
                    "executor": executor, "sent_at": time.time(),
                    "input": {"text": text.strip(), "conversation_id": msg.conversation_id,
                              "channel": msg.channel, "user_id": msg.user_id}}
            state.extra["workflow"] = kept
            state.status = "running"
            await self.store.save_task(state)  # before it is sent: a later worker knows
        request = TaskRequest(
            message_id=f"wf-{state.task_id}", task_id=f"wf-{state.task_id}",
            sender_id=f"gateway-wf.{state.task_id}", correlation_id=state.task_id,
            intent="run_workflow", timestamp=kept["sent_at"], deadline_ms=_DEADLINE_MS,
            arguments={"workflow_id": kept["workflow_id"], "version": kept["version"],
                       "input": kept["input"]}).for_conversation(state.conversation_id)
        try:
            response = await self._follow(state, request, kept["executor"],
                                          resume=stored is not None)
        except asyncio.CancelledError:
            if not self.shutting_down():  # /stop: the run ends, and the task with it
                await asyncio.shield(self._stopped(state, request))
            raise
        status = "answered" if response.status == "success" else \
            "cancelled" if response.error_code == "CANCELLED" else "failed"
        return await self._end(state, status, describe(response))

    async def _follow(self, state: TaskState, request: Any, executor: str, *,
                      resume: bool) -> TaskResponse:
        """The run's answer, its steps shown as the task's progress meanwhile."""
        from hub import LogEvent
        from hub.subjects import log_subject

        async def step(msg: Any) -> None:
            try:
                note = self.bus.parse(msg.data)
            except Exception:
                return
            if not isinstance(note, LogEvent):
                return
            details = note.details
            name = f"step {details.get('step')}"
            if note.event_type == "step_started":
                self._emit(state, EventType.TOOL_STARTED, {"tool": name, "arguments": {},
                                                           "call_id": name})
            elif note.event_type == "step_finished" and details.get("status") in (
                    "success", "skipped"):
                self._emit(state, EventType.TOOL_FINISHED, {
                    "tool": name, "call_id": name, "status": details.get("status")})
            elif note.event_type == "step_finished":
                self._emit(state, EventType.TOOL_ERROR, {
                    "tool": name, "call_id": name,
                    "error": f"{details.get('status')} ({details.get('error_code')})"})

        subscription = await self.bus.nc.subscribe(log_subject(request.task_id), cb=step)
        try:
            return await self.bus.request(executor, request, resume=resume)
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def _stopped(self, state: TaskState, request: Any) -> None:
        """/stop: the run is cancelled, the task ends "cancelled"."""
        from hub.workflows.runs import run_id_of

        with contextlib.suppress(Exception):
            await self.workflows.cancel(run_id_of(request.sender_id, request.task_id))
        await self._end(state, "cancelled", "Stopped.")

    async def _end(self, state: TaskState, status: str, text: str) -> TaskResult:
        state.status = status  # type: ignore[assignment]
        state.result_text = text
        if status == "answered":
            state.answer = text
        elif status == "failed":
            state.error = text
        await self.store.save_task(state)
        self._emit(state, EventType.AGENT_FINISHED, {"outcome": status, "text": text[:4000]})
        return TaskResult(state.task_id, state.trace_id, state.conversation_id,
                          state.status, text, TaskReport(outcome=state.status),
                          error=state.error)

    def _emit(self, state: TaskState, kind: EventType, payload: dict[str, Any]) -> None:
        self.events.emit(Event(kind, state.trace_id, state.conversation_id, 0, payload,
                               task_id=state.task_id))


def _arguments(text: str) -> str:
    """What follows ``/workflow`` (or ``/workflow@bot``)."""
    from .commands import _COMMAND

    return _COMMAND.sub("", text, count=1).strip()


def describe(answer: TaskResponse) -> str:
    """A run's answer as a chat message."""
    result = answer.result
    name = f"{result.get('workflow_id', 'the workflow')}"
    if answer.status == "success":
        output: Any = result.get("output")
        if isinstance(output, dict) and isinstance(output.get("answer"), str):
            text = output["answer"]
            cited = output.get("citations")
            if isinstance(cited, list) and cited:
                text += "\n\nSources: " + ", ".join(str(c) for c in cited)
        elif isinstance(output, str):
            text = output
        else:
            text = f"Workflow {name} finished:\n```\n" + json.dumps(
                output, ensure_ascii=False, indent=2)[:_MAX_TEXT] + "\n```"
        return str(text)[:_MAX_TEXT]
    if answer.error_code == "CANCELLED":
        return f"Workflow {name} was cancelled."
    step = result.get("failed_step")
    error = result.get("error") or ""
    where = f" at step {step}" if step else ""
    return (f"Workflow {name} did not finish{where}: {answer.error_code}"
            + (f" ({str(error)[:500]})" if error else "") + ".")

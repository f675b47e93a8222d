"""LoopAgent: a TaskLoop as a hub agent, with its own tools and model.

A request's ``arguments["text"]`` (or its intent and arguments, when there is no text) is
the task; each correlation id is a conversation of its own, so follow-ups of one caller's
work share memory. The task runs unattended: a tool that needs a human's approval is
refused, never left waiting. An answer is ``success``; a question back is ``partial``
(its next step: answer the question); everything else is ``failed`` with the outcome as
its error code (``BUDGET`` when a budget stopped it: the runtime's budgets count the
agent's calls under its id, the ``agent`` scope). Each tool step is told as a
``log_event`` on ``log.<task_id>``.
"""

from __future__ import annotations

import contextvars
import json

from agent_core import ConfigError, TaskResult
from agent_core import TaskRequest as AgentTask
from agent_core.events import Event, EventType
from agent_core.runtime import Runtime

from .agent import Agent
from .messages import LogEvent, TaskRequest, TaskResponse
from .subjects import log_subject

#: The steps of a task worth telling whoever follows it (the A2A edge streams them).
_TOLD = (EventType.TOOL_STARTED, EventType.TOOL_FINISHED, EventType.TOOL_ERROR)


class LoopAgent(Agent):
    """Answers requests by running a task on its runtime."""

    def __init__(self, agent_id: str, capabilities: tuple[str, ...], runtime: Runtime, *,
                 permissions: frozenset[str] = frozenset({"read"})) -> None:
        super().__init__()
        self.agent_id = agent_id
        self.capabilities = capabilities
        self.runtime = runtime
        self.permissions = permissions
        #: The request being handled (in this task).
        self._request: contextvars.ContextVar[TaskRequest] = contextvars.ContextVar(
            f"request-{id(self)}")
        runtime.bus.subscribe(self._tell, *_TOLD)

    async def _tell(self, event: Event) -> None:
        """A tool step of the task, as a ``log_event`` on ``log.<task_id>`` (run in the
        handler's own context: the event's task is the request's)."""
        request = self._request.get(None)
        if request is None:
            return
        p = event.payload
        details = {"tool": str(p.get("tool", "")), **(
            {"error": str(p.get("error", ""))[:200]} if event.type == EventType.TOOL_ERROR
            else {})}
        await self.publish(log_subject(request.task_id), LogEvent(
            sender_id=self.agent_id, correlation_id=request.correlation_id,
            level="warn" if event.type == EventType.TOOL_ERROR else "info",
            event_type=str(event.type).lower(), details=details))

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self._request.set(request)
        text = request.arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            text = f"{request.intent}: {json.dumps(request.arguments, ensure_ascii=False)}"
        try:
            result = await self._run(request, text)
        except ConfigError as exc:  # no model configured: say which settings to set
            return self.respond(request, "failed", {"error": str(exc)},
                                error_code="NOT_CONFIGURED")
        report = {"rounds": result.report.rounds, "tool_calls": result.report.tool_calls}
        if result.outcome == "answered":
            return self.respond(request, "success", {"answer": result.text, **report})
        if result.outcome == "asked_user":
            return self.respond(request, "partial", {
                "question": result.text, **report,
                "next_steps": [{"intent": request.intent, "ask": result.text}]})
        return self.respond(request, "failed", {"error": result.text, **report},
                            error_code="BUDGET" if result.budget is not None
                            else result.outcome.upper())

    async def _run(self, request: TaskRequest, text: str) -> TaskResult:
        settings = self.runtime.settings
        return await self.runtime.loop.run(AgentTask(
            text=text, conversation_id=f"hub:{self.agent_id}:{request.correlation_id}",
            user_id=f"hub:{request.sender_id}", role="agent", permissions=self.permissions,
            trace_id=request.correlation_id, deadline=request.deadline_ms / 1000,
            data_dir=settings.hermes_data_dir,
            extra={**settings.tool_extra(), "unattended": True, "intent": request.intent,
                   "agent_id": self.agent_id}))

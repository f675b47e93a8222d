"""ToolTurn: the tool calls of one model turn, run in order through the executor.

The calls of a turn are recorded first (with the assistant message that made them), then
run one by one; each result is stored before the next call starts, so an interrupted
task never runs a finished call again. A call that needs approval pauses the task with
its pending calls persisted; ``apply_approval`` continues from there.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Protocol

from pydantic_core import to_jsonable_python

from .context.tokens import TokenCounter
from .decisions import AgentDecision
from .errors import ApprovalRequired, TaskInterrupted
from .events import EventType
from .ids import new_id
from .journal import Journal
from .messages import Message, ToolCall
from .models.base import ModelResponse
from .run import LoopConfig, Run
from .store.base import BoundMemory, ConversationStore
from .task import Approval, PendingApproval, TaskStatus
from .tools.approval import PRIVATE
from .tools.context import Services, ToolContext
from .tools.executor import ToolExecutor, ToolResult


class Compressor(Protocol):
    """Reduces a long tool output before it enters the window."""

    async def compress(self, text: str, max_tokens: int) -> str: ...


class ToolTurn:
    """Records and runs a run's tool calls."""

    def __init__(self, executor: ToolExecutor, journal: Journal, store: ConversationStore,
                 counter: TokenCounter, config: LoopConfig, *,
                 compressor: Compressor | None = None, services: Services | None = None
                 ) -> None:
        self.executor = executor
        self.journal = journal
        self.store = store
        self.counter = counter
        self.config = config
        self.compressor = compressor
        #: Live services tools may use through ``ctx.services`` (e.g. the scheduler).
        self.services = services or Services()

    async def record_calls(self, run: Run, response: ModelResponse,
                           decisions: list[AgentDecision]) -> None:
        """The model's tool turn: its calls become the task's pending calls (stored with the
        assistant message); what cannot be run is answered with an error result at once."""
        calls: list[ToolCall] = []
        errors: list[Message] = []
        seen: set[str] = set()
        for d in decisions:
            if d.type not in ("tool_call", "invalid", "final_answer", "ask_user"):
                continue
            call_id = d.call_id if d.call_id and d.call_id not in seen else \
                f"call_{new_id(12)}"
            seen.add(call_id)
            if d.type == "tool_call" and d.tool_name:
                calls.append(ToolCall(call_id, d.tool_name, d.arguments))
                continue
            # Anything else in a tool turn still needs a result so the turn stays well formed.
            name = d.tool_name or ("final_answer" if d.type == "final_answer" else
                                   "ask_user" if d.type == "ask_user" else "invalid")
            calls.append(ToolCall(call_id, name, d.arguments))
            reason = d.reason or f"{name} cannot be combined with tool calls in one turn"
            errors.append(Message(role="tool", kind="error", tool_call_id=call_id, name=name,
                                  content=json.dumps({"error": "invalid", "message": reason})))
        text = response.text if response.tool_calls else ""
        assistant = Message(role="assistant", kind="decision", content=text, tool_calls=calls)
        error_ids = {m.tool_call_id for m in errors}
        run.state.set_calls([c for c in calls if c.id not in error_ids])
        await self.journal.append(run, [assistant, *errors])

    async def run_calls(self, run: Run) -> tuple[TaskStatus, str] | None:
        """Run the pending calls in order; the pause, when one needs approval."""
        state = run.state
        while state.pending_calls:
            control = run.control
            if control is not None and control.interrupted is not None \
                    and await control.interrupted():
                raise TaskInterrupted("interrupted at a tool boundary")
            call = state.calls()[0]
            approved_by = state.approved_calls.get(call.id)
            run.emit(EventType.TOOL_STARTED, {
                "tool": call.name, "arguments": call.arguments, "call_id": call.id})
            try:
                result = await self.executor.execute(
                    call.name, call.arguments, self._tool_context(run, call), call_id=call.id,
                    failures=run.runtime.failures, approved_by=approved_by)
            except ApprovalRequired as signal:
                tool = self.executor.registry.get(call.name)
                # What the approver is shown is what runs: the arguments as the tool
                # validated them (coerced, defaults filled in), kept as the call's own.
                call.arguments = to_jsonable_python(signal.arguments, fallback=str)
                state.set_calls([call, *state.calls()[1:]])
                state.approval = PendingApproval(
                    call_id=call.id, tool_name=call.name, arguments=call.arguments,
                    reason=signal.reason, side_effect=tool.side_effect if tool else "write",
                    tags=sorted(tool.tags) if tool else [], requester=state.user_id)
                run.emit(EventType.HUMAN_CONFIRM_REQUIRED, state.approval.model_dump())
                return "awaiting_approval", (
                    f"Waiting for approval to run {call.name} "
                    f"{json.dumps(call.arguments, ensure_ascii=False)[:300]}")
            await self._record_result(run, call, result)
        return None

    async def _record_result(self, run: Run, call: ToolCall, result: ToolResult) -> None:
        run.report.record_tool(call.name, result.duration, ok=result.ok)
        if result.ok:
            run.emit(EventType.TOOL_FINISHED, {
                "tool": call.name, "call_id": call.id, "ok": True,
                "seconds": round(result.duration, 6), "attempts": result.attempts,
                "output": _preview(result.output)})
        else:
            assert result.error is not None
            run.emit(EventType.TOOL_ERROR, {
                "tool": call.name, "call_id": call.id, "error": result.error.type,
                "message": result.error.message, "hint": result.hint,
                "seconds": round(result.duration, 6)})
        content = result.observation()
        message = Message(role="tool", kind="observation" if result.ok else "error",
                          tool_call_id=call.id, name=call.name, content=content)
        tool = self.executor.registry.get(call.name)
        if result.ok and tool is not None and PRIVATE in tool.tags \
                and call.name not in run.state.private_reads:
            run.state.private_reads.append(call.name)
        policy = tool.context_policy if tool else "keep"
        if result.ok and policy == "drop":
            run.ephemeral[message.id] = content
            message.content = f"[{call.name} output shown once and not kept: " \
                              f"{len(content)} characters]"
        elif result.ok and self.compressor is not None and (
                policy == "summarise"
                or self.counter.count(content) > self.config.max_observation_tokens):
            message.content = await self.compressor.compress(
                content, self.config.max_observation_tokens)
        remaining = run.state.calls()[1:]
        run.state.set_calls(remaining)
        run.state.approved_calls.pop(call.id, None)
        await self.journal.append(run, [message], read_back=not remaining)

    def apply_approval(self, run: Run, approval: Approval) -> list[Message]:
        """A human's decision on the first pending call: approved, it runs next (perhaps
        with edited arguments); rejected, the model is told."""
        state = run.state
        call = state.calls()[0]
        run.emit(EventType.HUMAN_CONFIRM_RESOLVED, {
            "call_id": call.id, "tool": call.name, "approved": approval.approved,
            "by": approval.by, "note": approval.note})
        if approval.approved:
            if approval.arguments is not None:
                call.arguments = approval.arguments
                state.set_calls([call, *state.calls()[1:]])
            state.approved_calls[call.id] = approval.by
            return []
        state.set_calls(state.calls()[1:])
        note = f": {approval.note}" if approval.note else ""
        return [Message(role="tool", kind="error", tool_call_id=call.id, name=call.name,
                        content=json.dumps({
                            "error": "rejected",
                            "message": f"{approval.by} rejected this action{note}. Do not "
                                       "retry it; tell the user, or propose something else."},
                            ensure_ascii=False))]

    def _tool_context(self, run: Run, call: ToolCall) -> ToolContext:
        state = run.state
        loop = asyncio.get_running_loop()

        def emit(type_: EventType, payload: dict[str, Any]) -> None:
            # A sync tool runs in a worker thread: its events are emitted on the loop's
            # thread, where the subscribers run (ahead of the tool's result, sent later).
            if _running_loop() is loop:
                run.emit(type_, payload)
            else:
                loop.call_soon_threadsafe(run.emit, type_, payload)

        def progress(note: str) -> None:
            emit(EventType.TOOL_PROGRESS, {"tool": call.name, "call_id": call.id,
                                           "note": note[:300]})

        def attachment(name: str, mime_type: str, size: int, path: str | None) -> None:
            emit(EventType.TOOL_ATTACHMENT, {"tool": call.name, "call_id": call.id,
                                             "name": name, "mime_type": mime_type,
                                             "bytes": size, "path": path})

        return ToolContext(
            user_id=state.user_id, conversation_id=state.conversation_id,
            trace_id=state.trace_id, created_at=state.created_at, role=state.role,
            permissions=frozenset(state.permissions),
            workdir=Path(state.workdir) if state.workdir else None, task_id=state.task_id,
            extra=state.extra, data_dir=Path(state.data_dir) if state.data_dir else None,
            memory=BoundMemory(self.store, state.conversation_id), services=self.services,
            progress=progress, attachments=attachment,
            private_reads=frozenset(state.private_reads))


def _preview(output: Any, limit: int = 500) -> str:
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False,
                                                             default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None

"""TaskLoop: plan, call tools step by step, answer. Every step is an Event.

One round is one model call and what follows from its decision:

- final_answer: the task ends with the answer
- tool_call: every call of the turn runs (through the ToolExecutor's policies) and its
  result is fed back; a call that needs approval pauses the task (state persisted)
- ask_user: the task pauses with the question; ``resume(reply=...)`` continues it
- invalid: the model is told what was wrong; K in a row end the task

The task state is saved with every step, so a paused task resumes in any process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .context.tokens import TokenCounter, counter_for, message_tokens
from .context.window import WindowPolicy, fit
from .decisions import AgentDecision
from .errors import (
    AgentDeadlineError,
    AgentLoopLimitError,
    ApprovalRequired,
    ContextLengthError,
    RuntimeFailure,
    TaskInterrupted,
    TooManyInvalidDecisions,
)
from .events import Event, EventBus, EventType
from .log import trace_context
from .messages import Message, ToolCall
from .models.base import ModelAdapter, ModelRequest, ModelResponse
from .parser import DecisionParser
from .prompt import REPAIR_PROMPT, system_message
from .replanner import Replanner
from .report import TaskReport
from .settings import Settings
from .store.base import BoundMemory, ConversationStore, Snapshot, WindowSize
from .task import (
    PendingApproval,
    Question,
    RuntimeState,
    TaskRequest,
    TaskResult,
    TaskState,
    TaskStatus,
)
from .tools.context import Services, ToolContext
from .tools.executor import ToolExecutor, ToolResult

log = logging.getLogger(__name__)


class Compressor(Protocol):
    """Reduces a long tool output before it enters the window."""

    async def compress(self, text: str, max_tokens: int) -> str: ...


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Limits and switches of the loop (from settings, or given directly)."""

    max_rounds: int = 15
    max_invalid: int = 3
    task_timeout: float = 300.0
    replan_every: int = 5
    temperature: float = 0.1
    max_tokens: int = 2048
    stream: bool = False
    context_tokens: int = 32_000
    context_margin: float = 0.05
    max_context_messages: int = 20
    context_warn_ratio: float = 0.8
    max_observation_tokens: int = 2_000
    system_prompt: str | None = None
    repair_with_model: bool = False
    #: Share of the limits a full window is evicted down to.
    evict_to: float = 0.6

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> LoopConfig:
        """A config from the loaded settings."""
        values: dict[str, Any] = {
            "max_rounds": settings.agent_max_round,
            "max_invalid": settings.agent_max_invalid,
            "task_timeout": settings.agent_task_timeout,
            "replan_every": settings.agent_replan_every,
            "temperature": settings.llm_temperature,
            "max_tokens": settings.llm_max_tokens,
            "stream": settings.llm_stream,
            "context_tokens": settings.llm_context_tokens,
            "system_prompt": settings.agent_system_prompt,
            "repair_with_model": settings.llm_repair_with_model,
        }
        for name in ("max_context_messages", "context_warn_ratio", "max_observation_tokens",
                     "context_margin"):
            if hasattr(settings, name):
                values[name] = getattr(settings, name)
        values.update(overrides)
        return cls(**values)

    @property
    def prompt_budget(self) -> int:
        """Tokens the prompt may use: the context minus the answer and a safety margin."""
        return int(self.context_tokens * (1 - self.context_margin)) - self.max_tokens


@dataclass(slots=True)
class Approval:
    """A human's decision on a paused tool call."""

    approved: bool
    by: str
    note: str = ""
    #: Edited arguments (edit-before-approve); None keeps the model's.
    arguments: dict[str, Any] | None = None


@dataclass(slots=True)
class _Run:
    """One drive of a task: persisted state plus what lives only in this process."""

    state: TaskState
    report: TaskReport
    runtime: RuntimeState
    control: Any = None
    ephemeral: dict[str, str] = field(default_factory=dict)
    system_tokens: int = 1_500
    #: Messages that end the task, stored together with its final state (one round trip).
    closing: list[Message] = field(default_factory=list)
    #: The conversation as read back by the last append, for the next model call (None
    #: once used, or when something may have changed it since).
    snapshot: Snapshot | None = None
    #: An append still under way (the first one, when the conversation came with the
    #: request); every later store step waits for it first (``_settle``).
    behind: asyncio.Future[Any] | None = None


class TaskLoop:
    """Runs tasks: ``await loop.run(request)`` and ``await loop.resume(task_id, ...)``."""

    def __init__(
        self,
        *,
        model: ModelAdapter,
        executor: ToolExecutor,
        store: ConversationStore,
        bus: EventBus | None = None,
        config: LoopConfig | None = None,
        counter: TokenCounter | None = None,
        compressor: Compressor | None = None,
        extra_tool_specs: Sequence[dict[str, Any]] = (),
        services: Services | None = None,
    ) -> None:
        self.model = model
        self.executor = executor
        self.store = store
        self.bus = bus or EventBus()
        self.config = config or LoopConfig()
        self.counter = counter or counter_for(None)
        # The system message changes only with the plan and the archive's size: its count is
        # worth keeping (~0.1 ms of tokenizing per model call otherwise).
        self._system_tokens = functools.lru_cache(maxsize=256)(self.counter.count)
        self.compressor = compressor
        #: Live services tools may use through ``ctx.services`` (e.g. the scheduler).
        self.services = services or Services()
        self.native_tools = bool(getattr(model, "native_tools", True))
        from ._toolformats import ASK_USER_SPEC

        self.tool_specs = [*executor.registry.specs(), ASK_USER_SPEC, *extra_tool_specs]
        self.parser = DecisionParser(executor.registry.names())
        self.replanner = Replanner(model)
        #: Set before cancelling tasks for a restart: their state stays "running" so that
        #: ``recover`` continues them in the next process instead of closing them.
        self.shutting_down = False

    # --- public ------------------------------------------------------------------------
    async def run(self, request: TaskRequest, *,
                  conversation: Snapshot | None = None) -> TaskResult:
        """Start a task and drive it until it answers, pauses or fails. ``conversation``:
        the conversation as the caller just read it (the gateway's queue reads it with the
        message); then the instruction is stored while the first model call is under way,
        instead of before it."""
        timeout = request.deadline or self.config.task_timeout
        state = TaskState.start(request, deadline_at=time.time() + timeout)
        run = _Run(state, TaskReport(), RuntimeState(), request.control)
        with trace_context(state.trace_id, state.conversation_id):
            self._emit(run, EventType.AGENT_STARTED, {
                "task_id": state.task_id, "text": request.text[:2000],
                "user_id": request.user_id, "model": self.model.name})
            instruction = Message(role="user", content=request.text, kind="instruction")
            return await self._drive(run, [instruction], conversation)

    async def resume(
        self,
        task_id: str,
        *,
        reply: str | None = None,
        approval: Approval | None = None,
        control: Any = None,
    ) -> TaskResult:
        """Continue a paused task with the user's reply or a human's approval decision."""
        state = await self.store.load_task(task_id)
        if state is None:
            raise KeyError(f"no task {task_id!r}")
        run = _Run(state, TaskReport.from_dict(state.report) if state.report else TaskReport(),
                   RuntimeState(), control)
        with trace_context(state.trace_id, state.conversation_id):
            self._emit(run, EventType.AGENT_STARTED, {"task_id": task_id, "resumed": True,
                                                      "report": run.report.to_dict()})
            first: list[Message] = []
            if approval is not None:
                if state.status != "awaiting_approval" or not state.pending_calls:
                    raise ValueError(f"task {task_id!r} is not waiting for an approval")
                first = self._apply_approval(run, approval)
            elif reply is not None:
                if state.status != "asked_user":
                    raise ValueError(f"task {task_id!r} is not waiting for a reply")
                first = [Message(role="user", content=reply, kind="user")]
            state.status, state.question, state.approval = "running", None, None
            timeout = self.config.task_timeout
            state.deadline_at = time.time() + timeout
            return await self._drive(run, first)

    async def recover(self, task_id: str, *, control: Any = None) -> TaskResult:
        """Continue a task whose process stopped mid-run (its state still says running)."""
        state = await self.store.load_task(task_id)
        if state is None or state.status != "running":
            raise ValueError(f"task {task_id!r} is not running")
        run = _Run(state, TaskReport.from_dict(state.report) if state.report else TaskReport(),
                   RuntimeState(), control)
        with trace_context(state.trace_id, state.conversation_id):
            log.info("recovering task %s at round %d with %d pending calls", task_id,
                     state.round, len(state.pending_calls))
            self._emit(run, EventType.AGENT_STARTED, {"task_id": task_id, "resumed": True,
                                                      "recovered": True,
                                                      "report": run.report.to_dict()})
            state.deadline_at = time.time() + self.config.task_timeout
            return await self._drive(run, [])

    # --- driving -----------------------------------------------------------------------
    async def _drive(self, run: _Run, first: list[Message],
                     conversation: Snapshot | None = None) -> TaskResult:
        state = run.state
        try:
            remaining = max(0.0, (state.deadline_at or time.time() + 1e9) - time.time())
            try:
                async with asyncio.timeout(remaining):
                    if first and conversation is not None:
                        await self._append_behind(run, first, conversation)
                    elif first:
                        await self._append(run, first, read_back=True)
                    outcome, text = await self._rounds(run)
            except TimeoutError:
                raise AgentDeadlineError(self.config.task_timeout) from None
        except asyncio.CancelledError:
            if self.shutting_down:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._settle(run))
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.store.save_task(state))
                raise
            await asyncio.shield(self._finish_closed(run, "cancelled", "Stopped.",
                                                     "the task was cancelled"))
            raise
        except TaskInterrupted:
            state.superseded = True
            return await self._finish_closed(run, "cancelled",
                                             "Stopped: a newer message took over.",
                                             "the task was interrupted by a newer message")
        except AgentLoopLimitError as exc:
            return await self._finish_closed(run, "limit", exc.user_message, str(exc))
        except AgentDeadlineError as exc:
            return await self._finish_closed(run, "limit", exc.user_message, str(exc))
        except TooManyInvalidDecisions as exc:
            return await self._finish_closed(run, "invalid", exc.user_message, str(exc))
        except RuntimeFailure as exc:
            log.warning("task failed: %s", exc)
            return await self._finish_closed(run, "failed", exc.user_message, str(exc))
        return await self._finish(run, outcome, text)

    async def _rounds(self, run: _Run) -> tuple[TaskStatus, str]:
        state = run.state
        if state.pending_calls:
            paused = await self._run_calls(run)
            if paused is not None:
                return paused
        while True:
            if state.round >= self.config.max_rounds:
                raise AgentLoopLimitError(self.config.max_rounds)
            state.round += 1
            run.report.rounds = state.round
            await self._steer(run)
            if self.config.replan_every and state.round > 1 and \
                    (state.round - 1) % self.config.replan_every == 0:
                await self._replan(run, "periodic")
            response = await self._call_model(run)
            decisions = await self.parser.parse_with_repair(
                response, self._repair if self.config.repair_with_model else None)
            for d in decisions:
                self._emit(run, EventType.PLANNER_DECISION, _decision_payload(d))

            # A tool turn: real calls, or native calls that failed to parse (each native call
            # id needs a result). Native final_answer/ask_user calls are plain decisions.
            if any(d.type == "tool_call" for d in decisions) or (
                    response.tool_calls and any(d.type == "invalid" for d in decisions)):
                if all(d.type == "invalid" for d in decisions):
                    await self._count_invalid(run, decisions[0])
                else:
                    state.invalid_streak = 0
                await self._record_calls(run, response, decisions)
                paused = await self._run_calls(run)
                if paused is not None:
                    return paused
                continue

            decision = decisions[0]
            match decision.type:
                case "final_answer" if decision.content.strip():
                    state.invalid_streak = 0
                    state.answer = decision.content
                    run.closing = [Message(role="assistant", kind="answer",
                                           content=decision.content)]
                    return "answered", decision.content
                case "ask_user" if decision.content.strip():
                    state.invalid_streak = 0
                    state.question = Question(text=decision.content, choices=decision.choices)
                    run.closing = [Message(role="assistant", kind="answer",
                                           content=decision.content)]
                    self._emit(run, EventType.ASK_USER, state.question.model_dump())
                    return "asked_user", decision.content
                case _:
                    if decision.type != "invalid":
                        decision = AgentDecision.invalid(f"the {decision.type} was empty",
                                                         rule=decision.rule)
                    correction = [
                        Message(role="assistant", kind="note", content=response.text[:4000]),
                        Message(role="user", kind="correction", content=(
                            f"Your last reply could not be used: {decision.reason}. "
                            + ("Call a tool, or answer in plain text." if self.native_tools
                               else REPAIR_PROMPT))),
                    ]
                    await self._append(run, correction, read_back=True)
                    await self._count_invalid(run, decision)

    async def _count_invalid(self, run: _Run, decision: AgentDecision) -> None:
        run.state.invalid_streak += 1
        run.report.invalid_decisions += 1
        if run.state.invalid_streak >= self.config.max_invalid:
            raise TooManyInvalidDecisions(run.state.invalid_streak, decision.reason)
        if run.state.invalid_streak == 2:
            await self._replan(run, "invalid_burst")

    # --- the model ---------------------------------------------------------------------
    async def _call_model(self, run: _Run) -> ModelResponse:
        messages = await self._context(run, shrink=False)
        try:
            response = await self._timed_complete(run, messages)
        except ContextLengthError:
            log.warning("context too long for the model; shrinking once and retrying")
            messages = await self._context(run, shrink=True)
            response = await self._timed_complete(run, messages)
        await self._settle(run)  # nothing acts on an answer to messages not yet stored
        return response

    async def _timed_complete(self, run: _Run, messages: list[Message]) -> ModelResponse:
        request = ModelRequest(
            messages=messages, tools=self.tool_specs, temperature=self.config.temperature,
            max_tokens=self.config.max_tokens, stream=self.config.stream,
            on_event=lambda name, payload: self._model_event(run, name, payload),
        )
        started = time.perf_counter()
        try:
            response = await self.model.complete(request)
        finally:
            run.report.model_time += time.perf_counter() - started
            run.report.model_calls += 1
        run.report.prompt_tokens += response.usage.prompt_tokens
        run.report.completion_tokens += response.usage.completion_tokens
        return response

    async def _context(self, run: _Run, *, shrink: bool) -> list[Message]:
        state = run.state
        if run.snapshot is None:
            await self._settle(run)
        snap = run.snapshot or await self.store.snapshot(state.conversation_id)
        run.snapshot = None
        system = system_message(
            instructions=self.config.system_prompt, plan=snap.plan, archived=snap.archived,
            has_recall="recall" in self.executor.registry, tools=self.tool_specs,
            native_tools=self.native_tools)
        run.system_tokens = self._system_tokens(system) + 4
        window = snap.window
        budget = self.config.prompt_budget
        if shrink:
            policy = WindowPolicy(max_messages=max(4, self.config.max_context_messages // 2),
                                  budget_tokens=max(256, (budget - run.system_tokens) // 2))
            window = fit(window, policy, self.counter, task_id=state.task_id).keep
        if run.ephemeral:
            window = [_with_content(m, run.ephemeral[m.id]) if m.id in run.ephemeral else m
                      for m in window]
            run.ephemeral.clear()
        used = run.system_tokens + sum(m.tokens for m in window)
        payload = {"tokens": used, "budget": budget, "messages": len(window) + 1,
                   "archived": snap.archived, "shrunk": shrink}
        self._emit(run, EventType.CONTEXT_UPDATED, payload)
        if used >= budget * self.config.context_warn_ratio:
            self._emit(run, EventType.CONTEXT_WARNING, payload)
        return [Message(role="system", content=system, kind="note"), *window]

    async def _repair(self, text: str) -> str:
        response = await self.model.complete(ModelRequest(
            messages=[Message(role="system", content=REPAIR_PROMPT),
                      Message(role="user", content=text[:8000])],
            temperature=0.0, max_tokens=self.config.max_tokens))
        return response.text

    async def _replan(self, run: _Run, why: str) -> None:
        await self._settle(run)
        snap = run.snapshot or await self.store.snapshot(run.state.conversation_id)
        run.snapshot = None  # the plan is about to change
        started = time.perf_counter()
        try:
            plan = await self.replanner.summarise(snap.window, run.state.instruction)
        except RuntimeFailure as exc:
            log.info("replanning skipped: %s", exc)
            return
        finally:
            run.report.model_time += time.perf_counter() - started
            run.report.model_calls += 1
        if plan:
            await self.store.set_plan(run.state.conversation_id, plan)
            self._emit(run, EventType.PLAN_UPDATED, {"plan": plan, "why": why})

    async def _steer(self, run: _Run) -> None:
        control = run.control
        if control is None or control.steering is None:
            return
        texts = await control.steering()
        if texts:
            await self._append(run, [Message(role="user", kind="user", content=t)
                                     for t in texts], read_back=True)

    # --- tools -------------------------------------------------------------------------
    async def _record_calls(self, run: _Run, response: ModelResponse,
                            decisions: list[AgentDecision]) -> None:
        calls: list[ToolCall] = []
        errors: list[Message] = []
        seen: set[str] = set()
        for d in decisions:
            if d.type not in ("tool_call", "invalid", "final_answer", "ask_user"):
                continue
            call_id = d.call_id if d.call_id and d.call_id not in seen else \
                f"call_{uuid.uuid4().hex[:12]}"
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
        await self._append(run, [assistant, *errors])

    async def _run_calls(self, run: _Run) -> tuple[TaskStatus, str] | None:
        state = run.state
        while state.pending_calls:
            control = run.control
            if control is not None and control.interrupted is not None \
                    and await control.interrupted():
                raise TaskInterrupted("interrupted at a tool boundary")
            call = state.calls()[0]
            approved_by = state.approved_calls.get(call.id)
            self._emit(run, EventType.TOOL_STARTED, {
                "tool": call.name, "arguments": call.arguments, "call_id": call.id})
            try:
                result = await self.executor.execute(
                    call.name, call.arguments, self._tool_context(state), call_id=call.id,
                    failures=run.runtime.failures, approved_by=approved_by)
            except ApprovalRequired as signal:
                tool = self.executor.registry.get(call.name)
                state.approval = PendingApproval(
                    call_id=call.id, tool_name=call.name, arguments=call.arguments,
                    reason=signal.reason, side_effect=tool.side_effect if tool else "write",
                    tags=sorted(tool.tags) if tool else [], requester=state.user_id)
                self._emit(run, EventType.HUMAN_CONFIRM_REQUIRED, state.approval.model_dump())
                return "awaiting_approval", (
                    f"Waiting for approval to run {call.name} "
                    f"{json.dumps(call.arguments, ensure_ascii=False)[:300]}")
            await self._record_result(run, call, result)
        return None

    async def _record_result(self, run: _Run, call: ToolCall, result: ToolResult) -> None:
        run.report.record_tool(call.name, result.duration, ok=result.ok)
        if result.ok:
            self._emit(run, EventType.TOOL_FINISHED, {
                "tool": call.name, "call_id": call.id, "ok": True,
                "seconds": round(result.duration, 6), "attempts": result.attempts,
                "output": _preview(result.output)})
        else:
            assert result.error is not None
            self._emit(run, EventType.TOOL_ERROR, {
                "tool": call.name, "call_id": call.id, "error": result.error.type,
                "message": result.error.message, "hint": result.hint,
                "seconds": round(result.duration, 6)})
        content = result.observation()
        message = Message(role="tool", kind="observation" if result.ok else "error",
                          tool_call_id=call.id, name=call.name, content=content)
        tool = self.executor.registry.get(call.name)
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
        await self._append(run, [message], read_back=not remaining)

    def _apply_approval(self, run: _Run, approval: Approval) -> list[Message]:
        state = run.state
        call = state.calls()[0]
        self._emit(run, EventType.HUMAN_CONFIRM_RESOLVED, {
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

    def _tool_context(self, state: TaskState) -> ToolContext:
        return ToolContext(
            user_id=state.user_id, conversation_id=state.conversation_id,
            trace_id=state.trace_id, created_at=state.created_at, role=state.role,
            permissions=frozenset(state.permissions),
            workdir=Path(state.workdir) if state.workdir else None, task_id=state.task_id,
            extra=state.extra, data_dir=Path(state.data_dir) if state.data_dir else None,
            memory=BoundMemory(self.store, state.conversation_id), services=self.services)

    # --- persistence -------------------------------------------------------------------
    async def _append(self, run: _Run, messages: list[Message], *,
                      read_back: bool = False) -> None:
        """Store messages with the task's state; ``read_back`` when a model call comes next,
        so that its read of the conversation rides on the same round trip."""
        await self._settle(run)
        state = self._stamp(run, messages)
        run.snapshot = None
        if read_back:
            size, run.snapshot = await self.store.append_and_read(
                state.conversation_id, messages, task=state)
        else:
            size = await self.store.append(state.conversation_id, messages, task=state)
        await self._evict_if_over(run, size)

    async def _append_behind(self, run: _Run, messages: list[Message],
                             conversation: Snapshot) -> None:
        """Store messages while the next model call is under way: that call reads
        ``conversation`` (as the caller read it) plus them, and ``_settle`` waits for the
        write before anything else touches the store. Saves the round trip in front of a
        new task's first model call."""
        state = self._stamp(run, messages)
        run.snapshot = dataclasses.replace(conversation,
                                           window=[*conversation.window, *messages])
        # A copy: the state moves on (its round) before the write's coroutine first runs.
        behind = asyncio.ensure_future(self.store.append(
            state.conversation_id, messages, task=state.model_copy()))
        behind.add_done_callback(_retrieved)  # a failure is raised by _settle, not logged
        run.behind = behind
        await self._evict_if_over(run, WindowSize(len(run.snapshot.window),
                                                  run.snapshot.tokens))  # settles first

    async def _settle(self, run: _Run) -> None:
        """Wait for an append still under way; raises what it failed with."""
        behind, run.behind = run.behind, None
        if behind is not None:
            await behind

    def _stamp(self, run: _Run, messages: list[Message]) -> TaskState:
        """Ready messages and the task's state for storing; returns the state."""
        state = run.state
        for m in messages:
            m.task_id = state.task_id
            m.round = state.round
            m.tokens = message_tokens(self.counter, m)
        state.report = run.report.to_dict()
        state.updated_at = time.time()
        return state

    async def _evict_if_over(self, run: _Run, size: WindowSize) -> None:
        budget = self.config.prompt_budget - run.system_tokens
        if size.messages > self.config.max_context_messages or size.tokens > budget:
            await self._evict(run, budget)

    async def _evict(self, run: _Run, budget: int) -> None:
        await self._settle(run)
        snap = run.snapshot or await self.store.snapshot(run.state.conversation_id)
        run.snapshot = None  # the window is about to change
        # Evict down to a low-water mark, so that a full window is rewritten every few
        # messages rather than on every one.
        low = self.config.evict_to
        policy = WindowPolicy(max_messages=max(4, int(self.config.max_context_messages * low)),
                              budget_tokens=max(256, int(budget * low)),
                              warn_ratio=self.config.context_warn_ratio)
        eviction = fit(snap.window, policy, self.counter, task_id=run.state.task_id)
        if eviction.changed:
            await self.store.rewrite_window(run.state.conversation_id, eviction.keep,
                                            eviction.archive, base=[m.id for m in snap.window])

    async def _finish(self, run: _Run, outcome: TaskStatus, text: str) -> TaskResult:
        state = run.state
        state.status = outcome
        state.result_text = text
        run.report.outcome = outcome
        run.report.wall_time += time.perf_counter() - run.runtime.started
        if run.closing:
            closing, run.closing = run.closing, []
            await self._append(run, closing)  # saves the final state in the same step
        else:
            await self._settle(run)
            state.report = run.report.to_dict()
            state.updated_at = time.time()
            await self.store.save_task(state)
        self._emit(run, EventType.AGENT_FINISHED, {
            "outcome": outcome, "text": text[:4000], "report": state.report})
        return TaskResult(state.task_id, state.trace_id, state.conversation_id, outcome, text,
                          run.report, question=state.question, approval=state.approval,
                          error=state.error, superseded=state.superseded)

    async def _finish_closed(self, run: _Run, outcome: TaskStatus, text: str, error: str
                             ) -> TaskResult:
        """End a task early: every pending call gets a result so the window stays valid."""
        state = run.state
        state.error = error
        run.report.error = error
        closing = [Message(role="tool", kind="error", tool_call_id=c.id, name=c.name,
                           content=json.dumps({"error": "interrupted", "message": error}))
                   for c in state.calls()]
        state.set_calls([])
        state.approved_calls = {}
        try:
            if closing:
                await self._append(run, closing)
        except RuntimeFailure as exc:  # the store itself may be what failed
            log.warning("could not record the closing of the task: %s", exc)
        try:
            return await self._finish(run, outcome, text)
        except RuntimeFailure as exc:
            log.warning("could not save the final task state: %s", exc)
            self._emit(run, EventType.AGENT_FINISHED, {"outcome": outcome, "text": text,
                                                       "report": run.report.to_dict()})
            return TaskResult(state.task_id, state.trace_id, state.conversation_id, outcome,
                              text, run.report, error=error, superseded=state.superseded)

    def _model_event(self, run: _Run, name: str, payload: dict[str, Any]) -> None:
        if name in EventType.__members__:
            self._emit(run, EventType[name], payload)

    def _emit(self, run: _Run, type_: EventType, payload: dict[str, Any]) -> None:
        self.bus.emit(Event(type_, run.state.trace_id, run.state.conversation_id,
                            run.state.round, payload, task_id=run.state.task_id))


def _decision_payload(d: AgentDecision) -> dict[str, Any]:
    return {"type": d.type, "tool_name": d.tool_name, "arguments": d.arguments,
            "content": d.content[:2000], "reason": d.reason, "rule": d.rule,
            "choices": d.choices}


def _preview(output: Any, limit: int = 500) -> str:
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False,
                                                             default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a background write's failure as seen (it is raised where it is awaited)."""
    if not future.cancelled():
        future.exception()


def _with_content(m: Message, content: str) -> Message:
    return dataclasses.replace(m, content=content)

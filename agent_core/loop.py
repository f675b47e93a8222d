"""TaskLoop: plan, call tools step by step, answer. Every step is an Event.

One round is one model call (``ModelTurn``) and what follows from its decision:

- final_answer: the task ends with the answer
- tool_call: every call of the turn runs (``ToolTurn``, through the ToolExecutor's
  policies) and its result is fed back; a call that needs approval pauses the task
- ask_user: the task pauses with the question; ``resume(reply=...)`` continues it
- invalid: the model is told what was wrong; K in a row end the task

The task state is saved with every step (``Journal``), so a paused task resumes in any
process. This module drives a task (run, resume, recover, and how each way of ending maps
to an outcome) and runs its rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from .budget.base import Budget
from .context.tokens import TokenCounter, counter_for
from .decisions import AgentDecision
from .errors import (
    AgentDeadlineError,
    AgentLoopLimitError,
    BudgetExceeded,
    RuntimeFailure,
    StoreUnavailableError,
    TaskInterrupted,
    TooManyInvalidDecisions,
)
from .events import EventBus, EventType
from .journal import Journal
from .log import trace_context
from .messages import Message, Part
from .model_turn import ModelTurn
from .models.base import ModelAdapter
from .parser import DecisionParser
from .prompt import REPAIR_PROMPT
from .report import TaskReport
from .run import LoopConfig, Run
from .store.base import ConversationStore, Snapshot
from .task import (
    Approval,
    Question,
    TaskControl,
    TaskRequest,
    TaskResult,
    TaskState,
    TaskStatus,
)
from .tool_turn import Compressor, ToolTurn
from .tools.approval import PRIVATE
from .tools.context import Services
from .tools.executor import ToolExecutor

log = logging.getLogger(__name__)

__all__ = ["Approval", "Compressor", "LoopConfig", "TaskLoop"]


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
        budget: Budget | None = None,
    ) -> None:
        self.model = model
        self.executor = executor
        self.store = store
        self.bus = bus or EventBus()
        self.config = config or LoopConfig()
        self.counter = counter or counter_for(None)
        self._extra_tool_specs = list(extra_tool_specs)
        self.journal = Journal(store, self.counter, self.config)
        self.model_turn = ModelTurn(model, self.journal, self.counter, self.config,
                                    tool_specs=(), has_recall=False, budget=budget)
        self.tools = ToolTurn(executor, self.journal, store, self.counter, self.config,
                              compressor=compressor, services=services)
        self._tools_version = -1
        self.sync_tools()
        #: Set before cancelling tasks for a restart: their state stays "running" so that
        #: ``recover`` continues them in the next process instead of closing them.
        self.shutting_down = False

    def sync_tools(self) -> None:
        """Read the registry again when it changed (an MCP server's tools came, went or
        changed): the specs the model is given and the names the parser accepts."""
        registry = self.executor.registry
        if registry.version == self._tools_version:
            return
        from ._toolformats import ASK_USER_SPEC

        self.tool_specs = [*registry.specs(), ASK_USER_SPEC, *self._extra_tool_specs]
        self.model_turn.tool_specs = self.tool_specs
        self.model_turn.has_recall = "recall" in registry
        self.model_turn.private_tools = frozenset(t.name for t in registry if PRIVATE in t.tags)
        self.parser = DecisionParser(registry.names(), {t.name: t.parameters for t in registry})
        self._tools_version = registry.version

    @property
    def services(self) -> Services:
        """Live services tools may use through ``ctx.services`` (e.g. the scheduler)."""
        return self.tools.services

    @services.setter
    def services(self, services: Services) -> None:
        self.tools.services = services

    @property
    def compressor(self) -> Compressor | None:
        """What reduces long tool outputs before they enter the window."""
        return self.tools.compressor

    @compressor.setter
    def compressor(self, compressor: Compressor | None) -> None:
        self.tools.compressor = compressor

    @property
    def native_tools(self) -> bool:
        """Whether the model takes tools in its API (else they are described in text)."""
        return self.model_turn.native_tools

    # --- public ------------------------------------------------------------------------
    async def run(self, request: TaskRequest, *,
                  conversation: Snapshot | None = None) -> TaskResult:
        """Start a task and drive it until it answers, pauses or fails. ``conversation``:
        the conversation as the caller just read it (the gateway's queue reads it with the
        message); then the instruction is stored while the first model call is under way,
        instead of before it."""
        timeout = request.deadline or self.config.task_timeout
        state = TaskState.start(request, deadline_at=time.time() + timeout)
        run = Run(state, TaskReport(), self.bus, control=request.control)
        with trace_context(state.trace_id, state.conversation_id):
            run.emit(EventType.AGENT_STARTED, {
                "task_id": state.task_id, "text": request.text[:2000],
                "user_id": request.user_id, "model": self.model.name})
            instruction = Message(role="user", content=request.text, kind="instruction",
                                  parts=list(request.parts))
            return await self._drive(run, [instruction], conversation)

    async def resume(
        self,
        task_id: str,
        *,
        reply: str | None = None,
        approval: Approval | None = None,
        control: TaskControl | None = None,
        parts: Sequence[Part] = (),
    ) -> TaskResult:
        """Continue a paused task with the user's reply (and its files) or an approval."""
        state = await self.store.load_task(task_id)
        if state is None:
            raise KeyError(f"no task {task_id!r}")
        run = self._resumed(state, control)
        with trace_context(state.trace_id, state.conversation_id):
            run.emit(EventType.AGENT_STARTED, {"task_id": task_id, "resumed": True,
                                               "report": run.report.to_dict()})
            first: list[Message] = []
            if approval is not None:
                if state.status != "awaiting_approval" or not state.pending_calls:
                    raise ValueError(f"task {task_id!r} is not waiting for an approval")
                first = self.tools.apply_approval(run, approval)
            elif reply is not None:
                if state.status != "asked_user":
                    raise ValueError(f"task {task_id!r} is not waiting for a reply")
                first = [Message(role="user", content=reply, kind="user", parts=list(parts))]
            state.status, state.question, state.approval = "running", None, None
            timeout = self.config.task_timeout
            state.deadline_at = time.time() + timeout
            return await self._drive(run, first)

    async def recover(self, task_id: str, *, control: TaskControl | None = None
                      ) -> TaskResult:
        """Continue a task whose process stopped mid-run (its state still says running)."""
        state = await self.store.load_task(task_id)
        if state is None or state.status != "running":
            raise ValueError(f"task {task_id!r} is not running")
        run = self._resumed(state, control)
        with trace_context(state.trace_id, state.conversation_id):
            log.info("recovering task %s at round %d with %d pending calls", task_id,
                     state.round, len(state.pending_calls))
            run.emit(EventType.AGENT_STARTED, {"task_id": task_id, "resumed": True,
                                               "recovered": True,
                                               "report": run.report.to_dict()})
            state.deadline_at = time.time() + self.config.task_timeout
            return await self._drive(run, [])

    # --- driving -----------------------------------------------------------------------
    async def _drive(self, run: Run, first: list[Message],
                     conversation: Snapshot | None = None) -> TaskResult:
        state = run.state
        try:
            remaining = max(0.0, (state.deadline_at or time.time() + 1e9) - time.time())
            try:
                async with asyncio.timeout(remaining):
                    if first and conversation is not None:
                        await self.journal.append_behind(run, first, conversation)
                    elif first:
                        await self.journal.append(run, first, read_back=True)
                    outcome, text = await self._rounds(run)
            except TimeoutError:
                raise AgentDeadlineError(self.config.task_timeout) from None
        except asyncio.CancelledError:
            if self.shutting_down:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.journal.settle(run))
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
        except (AgentLoopLimitError, AgentDeadlineError, BudgetExceeded) as exc:
            return await self._finish_closed(run, "limit", exc.user_message, str(exc))
        except TooManyInvalidDecisions as exc:
            return await self._finish_closed(run, "invalid", exc.user_message, str(exc))
        except StoreUnavailableError as exc:
            if self.config.on_store_outage == "raise":
                raise  # the caller waits for the store and continues from the last save
            return await self._finish_closed(run, "failed", exc.user_message, str(exc))
        except RuntimeFailure as exc:
            log.warning("task failed: %s", exc)
            return await self._finish_closed(run, "failed", exc.user_message, str(exc))
        return await self._finish(run, outcome, text)

    async def _rounds(self, run: Run) -> tuple[TaskStatus, str]:
        state = run.state
        if state.pending_calls:
            paused = await self.tools.run_calls(run)
            if paused is not None:
                return paused
        while True:
            if state.round >= self.config.max_rounds:
                raise AgentLoopLimitError(self.config.max_rounds)
            state.round += 1
            run.report.rounds = state.round
            self.sync_tools()
            await self._steer(run)
            if self.config.replan_every and state.round > 1 and \
                    (state.round - 1) % self.config.replan_every == 0:
                await self.model_turn.replan(run, "periodic")
            response, decisions = await self.model_turn.decide(run, self.parser)
            for d in decisions:
                run.emit(EventType.PLANNER_DECISION, _decision_payload(d))

            # A tool turn: real calls, or native calls that failed to parse (each native call
            # id needs a result). Native final_answer/ask_user calls are plain decisions.
            if any(d.type == "tool_call" for d in decisions) or (
                    response.tool_calls and any(d.type == "invalid" for d in decisions)):
                if all(d.type == "invalid" for d in decisions):
                    await self._count_invalid(run, decisions[0])
                else:
                    state.invalid_streak = 0
                await self.tools.record_calls(run, response, decisions)
                paused = await self.tools.run_calls(run)
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
                    run.emit(EventType.ASK_USER, state.question.model_dump())
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
                    await self.journal.append(run, correction, read_back=True)
                    await self._count_invalid(run, decision)

    async def _count_invalid(self, run: Run, decision: AgentDecision) -> None:
        run.state.invalid_streak += 1
        run.report.invalid_decisions += 1
        if run.state.invalid_streak >= self.config.max_invalid:
            raise TooManyInvalidDecisions(run.state.invalid_streak, decision.reason)
        if run.state.invalid_streak == 2:
            await self.model_turn.replan(run, "invalid_burst")

    # --- between rounds ------------------------------------------------------------
    async def _steer(self, run: Run) -> None:
        control = run.control
        if control is None or control.steering is None:
            return
        if said := [Message(role="user", kind="user", content=s) if isinstance(s, str) else s
                    for s in await control.steering()]:
            await self.journal.append(run, said, read_back=True)

    # --- ending ------------------------------------------------------------------
    async def _finish(self, run: Run, outcome: TaskStatus, text: str) -> TaskResult:
        state = run.state
        state.status = outcome
        state.result_text = text
        run.report.outcome = outcome
        run.report.wall_time += time.perf_counter() - run.runtime.started
        if run.closing:
            closing, run.closing = run.closing, []
            await self.journal.append(run, closing)  # saves the final state in the same step
        else:
            await self.journal.save(run)
        run.emit(EventType.AGENT_FINISHED, {
            "outcome": outcome, "text": text[:4000], "report": state.report})
        return TaskResult.from_state(state, run.report)

    async def _finish_closed(self, run: Run, outcome: TaskStatus, text: str, error: str
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
                await self.journal.append(run, closing)
        except RuntimeFailure as exc:  # the store itself may be what failed
            log.warning("could not record the closing of the task: %s", exc)
        try:
            return await self._finish(run, outcome, text)
        except RuntimeFailure as exc:
            log.warning("could not save the final task state: %s", exc)
            run.emit(EventType.AGENT_FINISHED, {"outcome": outcome, "text": text,
                                                "report": run.report.to_dict()})
            state.status, state.result_text = outcome, text
            return TaskResult.from_state(state, run.report)

    def _resumed(self, state: TaskState, control: TaskControl | None) -> Run:
        """A run continuing a stored task, its report carried over."""
        report = TaskReport.from_dict(state.report) if state.report else TaskReport()
        return Run(state, report, self.bus, control=control)


def _decision_payload(d: AgentDecision) -> dict[str, Any]:
    return {"type": d.type, "tool_name": d.tool_name, "arguments": d.arguments,
            "content": d.content[:2000], "reason": d.reason, "rule": d.rule,
            "choices": d.choices}

"""A task's request, its persisted state, and its result."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from ._json import dumps
from .budget.base import Overrun
from .ids import new_id
from .messages import Message, Part, ToolCall
from .report import TaskReport
from .tools.policies import TaskFailures

#: Where a task is. The one vocabulary: the store, the gateway, the API and the metrics
#: all branch on these values (and on the sets below), never on the text a user was told.
TaskStatus = Literal[
    "queued",  # accepted by the gateway, not started yet
    "running",  # being worked on (or its process died: ``recover`` continues it)
    "asked_user",  # the task waits for the user's reply
    "awaiting_approval",  # a tool call waits for a human decision
    "answered",  # a final answer was given
    "failed",  # a runtime failure ended the task
    "limit",  # AGENT_MAX_ROUND, the deadline or a budget (HERMES_BUDGETS) was reached
    "invalid",  # K consecutive invalid decisions
    "cancelled",  # /stop, an interrupt by a newer message, the API's cancel
]
ALL_STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)
#: Ended for good: nothing more will happen to the task.
TERMINAL: frozenset[TaskStatus] = frozenset(
    {"answered", "failed", "limit", "invalid", "cancelled"})
#: Waiting for a person: a reply (ask_user) or an approval resumes it.
PAUSED: frozenset[TaskStatus] = frozenset({"asked_user", "awaiting_approval"})
#: Not started, or under way.
ACTIVE: frozenset[TaskStatus] = frozenset({"queued", "running"})


@dataclass(slots=True)
class TaskControl:
    """Hooks through which the gateway steers a running task (all optional).

    ``interrupted`` is asked at every tool boundary: True stops the task there.
    ``steering`` is asked before every model call: what it returns is injected as user
    messages (the ``steer`` busy mode): a text, or a user ``Message`` with the files it
    carried.
    """

    interrupted: Callable[[], Awaitable[bool]] | None = None
    steering: Callable[[], Awaitable[Sequence[str | Message]]] | None = None


@dataclass(slots=True)
class TaskRequest:
    """What to do, for whom."""

    text: str
    conversation_id: str = "cli"
    user_id: str = "local"
    #: Least privilege unless said otherwise: a task built without a role may only read.
    role: str = "user"
    permissions: frozenset[str] = frozenset({"read"})
    task_id: str = field(default_factory=lambda: new_id(16))
    trace_id: str = field(default_factory=lambda: new_id(16))
    workdir: Path | None = None
    #: The deployment's data directory, for tools (``ToolContext.data_dir``).
    data_dir: Path | None = None
    #: Seconds for the whole task; None uses AGENT_TASK_TIMEOUT.
    deadline: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    control: TaskControl | None = None
    #: Files the person sent with the request (the instruction's parts).
    parts: list[Part] = field(default_factory=list)


@dataclass(slots=True)
class Approval:
    """A human's decision on a paused tool call."""

    approved: bool
    by: str
    note: str = ""
    #: Edited arguments (edit-before-approve); None keeps the model's.
    arguments: dict[str, Any] | None = None


class PendingApproval(BaseModel):
    """A tool call waiting for a human decision."""

    model_config = ConfigDict(defer_build=True)

    id: str = Field(default_factory=lambda: new_id(16))
    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    reason: str
    side_effect: str = "write"
    tags: list[str] = Field(default_factory=list)
    requester: str = ""
    requested_at: float = Field(default_factory=time.time)


class Question(BaseModel):
    """What the task asked the user."""

    model_config = ConfigDict(defer_build=True)

    text: str
    choices: list[str] = Field(default_factory=list)


class TaskState(BaseModel):
    """Everything needed to resume a paused task in any process, after a restart."""

    model_config = ConfigDict(defer_build=True)

    task_id: str
    trace_id: str
    conversation_id: str
    user_id: str
    role: str
    permissions: list[str]
    instruction: str
    workdir: str | None = None
    data_dir: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    status: TaskStatus = "running"
    round: int = 0
    invalid_streak: int = 0
    pending_calls: list[dict[str, Any]] = Field(default_factory=list)
    #: Calls a human approved: call id -> who approved.
    approved_calls: dict[str, str] = Field(default_factory=dict)
    #: The tools tagged ``private`` whose results this task has read (recall, files): a
    #: request out of the deployment afterwards is an egress the rules may ask about.
    private_reads: list[str] = Field(default_factory=list)
    approval: PendingApproval | None = None
    question: Question | None = None
    answer: str | None = None
    #: What the user was told when the task ended or paused (answer, question, or a sentence).
    result_text: str | None = None
    error: str | None = None
    #: Cancelled because a newer message of the conversation took over (its task answers
    #: instead, so this one is not answered at all).
    superseded: bool = False
    #: The budget that stopped the task (its status is then "limit").
    budget: Overrun | None = None
    report: dict[str, Any] = Field(default_factory=dict)
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    deadline_at: float | None = None

    @classmethod
    def start(cls, request: TaskRequest, *, deadline_at: float | None) -> TaskState:
        """A fresh state for a new request."""
        return cls(
            task_id=request.task_id, trace_id=request.trace_id,
            conversation_id=request.conversation_id, user_id=request.user_id,
            role=request.role, permissions=sorted(request.permissions),
            instruction=request.text,
            workdir=str(request.workdir) if request.workdir else None,
            data_dir=str(request.data_dir) if request.data_dir else None,
            extra=dict(request.extra), deadline_at=deadline_at,
        )

    def calls(self) -> list[ToolCall]:
        """The tool calls of the current turn not yet executed."""
        return [ToolCall(**c) for c in self.pending_calls]

    def set_calls(self, calls: list[ToolCall]) -> None:
        """Replace the pending calls."""
        self.pending_calls = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                              for c in calls]


def queued_json(*, task_id: str, conversation_id: str, user_id: str, instruction: str,
                extra: dict[str, Any], now: float | None = None) -> bytes:
    """The JSON of a new task's "queued" state, as the gateway stores it for every message
    it queues: the TaskState (trace id: the task's id; no role or permissions yet, the
    worker decides them) that ``TaskState.model_validate_json`` reads back, written
    without building one (~0.5 against ~5 us: building the model and writing it)."""
    now = time.time() if now is None else now
    return dumps({"task_id": task_id, "trace_id": task_id, "conversation_id": conversation_id,
                  "user_id": user_id, "role": "", "permissions": [], "instruction": instruction,
                  "extra": extra, "status": "queued", "created_at": now, "updated_at": now})


@dataclass(slots=True)
class TaskResult:
    """How a task (or one resumption of it) ended."""

    task_id: str
    trace_id: str
    conversation_id: str
    outcome: TaskStatus
    #: The answer, the question, or a plain sentence saying what went wrong.
    text: str
    report: TaskReport
    question: Question | None = None
    approval: PendingApproval | None = None
    error: str | None = None
    #: See ``TaskState.superseded``.
    superseded: bool = False
    #: See ``TaskState.budget``.
    budget: Overrun | None = None

    @property
    def finished(self) -> bool:
        """False while the task waits for a user reply or an approval."""
        return self.outcome in TERMINAL

    @classmethod
    def from_state(cls, state: TaskState, report: TaskReport | None = None) -> TaskResult:
        """The result a stored task ended (or paused) with (``report``: its report as a
        run has it, instead of the stored one)."""
        if report is None:
            report = TaskReport.from_dict(state.report) if state.report else TaskReport()
        return cls(state.task_id, state.trace_id, state.conversation_id, state.status,
                   state.result_text or state.answer or "", report, question=state.question,
                   approval=state.approval, error=state.error, superseded=state.superseded,
                   budget=state.budget)


@dataclass(slots=True)
class RuntimeState:
    """Per-process companions of a TaskState that are not persisted."""

    failures: TaskFailures = field(default_factory=TaskFailures)
    started: float = field(default_factory=time.perf_counter)

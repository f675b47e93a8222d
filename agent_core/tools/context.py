"""ToolContext: who is asking and where, passed to every tool that declares it.

It is all a tool knows: the caller, the task's sandbox, the deployment's data directory,
the conversation's own memory and the live services a deployment offers, each behind a
small Protocol so that tools never import the store, the gateway or the hub.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from .sandbox import Sandbox, SandboxLimits

ALL_PERMISSIONS = "*"


class RecalledMessage(Protocol):
    """One archived message recall found."""

    role: str
    content: str
    ts: float
    round: int

    def excerpt(self, query: str, size: int = 320) -> str:
        """The part of the message around the first query term."""
        ...


class ConversationMemory(Protocol):
    """The caller's own conversation memory: it can only ever search that conversation."""

    async def recall(self, query: str, limit: int) -> list[Any]:
        """Archived messages (``RecalledMessage``) matching ``query``, best first."""
        ...


class ScheduledJob(Protocol):
    """A job the scheduler created."""

    id: str
    name: str
    next_run_at: float | None


class Scheduling(Protocol):
    """The deployment's scheduler, as a tool may use it."""

    async def create(self, *, prompt: str, trigger: dict[str, Any], channel: str,
                     reply_target: dict[str, Any], run_as: str,
                     name: str = "scheduled report", role: str | None = None) -> Any:
        """A new job (a ``ScheduledJob``) posting its answers where the task's message came
        from, run as ``run_as`` in ``role`` (the asking task's own); raises ValueError
        naming what is wrong."""
        ...


@dataclass(frozen=True, slots=True)
class Delegated:
    """How a delegated task ended: ``status`` is success, failed or partial (then
    ``next_steps`` says how to continue); ``agent_id`` is who answered."""

    status: Literal["success", "failed", "partial"]
    agent_id: str
    result: Mapping[str, Any] = field(default_factory=dict)
    error_code: str | None = None
    next_steps: list[Any] = field(default_factory=list)


class Delegation(Protocol):
    """Hands a task to another agent that has a capability (the hub implements it)."""

    async def delegate(self, capability: str, text: str, *, arguments: Mapping[str, Any],
                       deadline_ms: int, correlation_id: str,
                       on_chosen: Callable[[str], None] | None = None) -> Delegated:
        """Send the task to an agent with ``capability`` and wait for its answer;
        ``on_chosen`` hears the chosen agent's id before the task is sent."""
        ...


@dataclass(frozen=True, slots=True)
class Services:
    """Live services of the deployment a tool may use; never persisted. Each is None
    where the deployment does not offer it."""

    scheduler: Scheduling | None = None
    delegation: Delegation | None = None


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The caller of a tool. There is no global session: this is all a tool knows."""

    user_id: str
    conversation_id: str
    trace_id: str
    created_at: float = field(default_factory=time.time)
    role: str = "user"
    permissions: frozenset[str] = frozenset({"read"})
    #: The task's sandbox directory; file tools resolve every path inside it.
    workdir: Path | None = None
    task_id: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: The deployment's data directory (shared files: reports, sample data); None outside
    #: a deployment.
    data_dir: Path | None = None
    #: Search of this conversation's archive (the recall tool uses it); None outside a task.
    memory: ConversationMemory | None = None
    #: Live services of the deployment (e.g. the scheduler); never persisted.
    services: Services = field(default_factory=Services)
    #: Tells whoever watches the task what the tool is doing now (one short line); None
    #: where nobody watches. Never persisted.
    progress: Callable[[str], None] | None = None
    #: The tools tagged ``private`` whose results the task has read so far.
    private_reads: frozenset[str] = frozenset()
    #: Hears each file the call produced for the person (name, MIME type, size, and its
    #: path in the sandbox when it was kept); None where nobody watches.
    attachments: Callable[[str, str, int, str | None], None] | None = None

    def report(self, note: str) -> None:
        """Show ``note`` as this call's progress, where anyone watches."""
        if self.progress is not None:
            self.progress(note)

    def attach(self, name: str, mime_type: str, size: int, *, path: str | None) -> None:
        """Tell whoever watches that the call produced a file for the person."""
        if self.attachments is not None:
            self.attachments(name, mime_type, size, path)

    def allows(self, permission: str | None) -> bool:
        """Whether this caller holds ``permission`` (None means no permission is needed)."""
        return (
            permission is None
            or ALL_PERMISSIONS in self.permissions
            or permission in self.permissions
        )

    @property
    def sandbox(self) -> Sandbox | None:
        """The task's sandbox (its directory and the deployment's quotas), or None."""
        if self.workdir is None:
            return None
        raw = self.extra.get("sandbox") or {}
        inbox = self.extra.get("inbox")
        return Sandbox(self.workdir, SandboxLimits(**raw) if isinstance(raw, Mapping)
                       else SandboxLimits(), inbox=Path(inbox) if isinstance(inbox, str)
                       else None)

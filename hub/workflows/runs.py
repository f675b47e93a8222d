"""A workflow run as the store keeps it: the definition it runs, every step's state, the
document so far, and the view the API shows."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from .definition import Workflow

StepStatus = Literal["pending", "running", "success", "failed", "partial", "skipped",
                     "cancelled"]
RunStatus = Literal["running", "success", "failed", "cancelled"]


class Sent(BaseModel):
    """One task_request a step sent: to whom, with which ids, until when."""

    task_id: str
    agent: str
    intent: str
    arguments: dict[str, Any]
    timestamp: float
    deadline_ms: int
    sender_id: str
    #: Its answer, once it came.
    status: str | None = None
    error_code: str | None = None
    result: dict[str, Any] | None = None


class StepState(BaseModel):
    """Where one step of a run is."""

    status: StepStatus = "pending"
    agent: str | None = None
    error_code: str | None = None
    result: dict[str, Any] = Field(default_factory=dict)
    #: Its requests: the first, then one per followed next step.
    sent: list[Sent] = Field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None

    @property
    def done(self) -> bool:
        """Whether the step has ended (one way or another)."""
        return self.status not in ("pending", "running")


class Run(BaseModel):
    """A run's state: all another copy needs to continue it."""

    run_id: str
    workflow_id: str
    version: int
    definition: Workflow
    status: RunStatus = "running"
    correlation_id: str
    #: Who asked (the run's task_response goes to them) and the request's task id.
    sender_id: str
    task_id: str
    document: dict[str, Any]
    steps: dict[str, StepState]
    cancel_requested: bool = False
    error_code: str | None = None
    failed_step: str | None = None
    created_at: float = Field(default_factory=time.time)
    finished_at: float | None = None

    def view(self) -> dict[str, Any]:
        """What the API and ``hub show`` say of the run: its ids, status, every step's
        status and the document so far."""
        return {"run_id": self.run_id, "workflow_id": self.workflow_id,
                "version": self.version, "status": self.status,
                "error_code": self.error_code, "failed_step": self.failed_step,
                "correlation_id": self.correlation_id,
                "cancel_requested": self.cancel_requested, "created_at": self.created_at,
                "finished_at": self.finished_at, "steps": self.summary(),
                "document": self.document}

    def summary(self) -> list[dict[str, Any]]:
        """Every step's status, in the definition's order."""
        return [{"id": step.id, "status": self.steps[step.id].status,
                 "agent": self.steps[step.id].agent,
                 "error_code": self.steps[step.id].error_code,
                 "follow_ups": max(0, len(self.steps[step.id].sent) - 1),
                 # The steps it waits for (the graph's edges) and when it ran.
                 "needs": sorted(self.definition.needs(step)),
                 "started_at": self.steps[step.id].started_at,
                 "finished_at": self.steps[step.id].finished_at,
                 **({"reason": self.steps[step.id].reason} if self.steps[step.id].reason
                    else {})}
                for step in self.definition.steps]


def run_id_of(sender_id: str, task_id: str) -> str:
    """The run a request starts: the same request (a redelivery) finds the same run."""
    digest = hashlib.sha256(f"{sender_id}\0{task_id}".encode()).hexdigest()[:20]
    return f"run-{digest}"

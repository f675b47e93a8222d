"""A run being driven by one copy of the executor, and how its state is kept: every change
written to the run's entry (compare-and-set), every step's start and end told as a
``log_event`` on ``log.<the run request's task id>``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..bus import Bus, Headers
from ..messages import LogEvent
from ..subjects import log_subject
from .definition import Step
from .runs import Run
from .store import WorkflowStore

log = logging.getLogger(__name__)


@dataclass
class LiveRun:
    """A run this copy drives: its state, its entry's revision, its deadline."""

    run: Run
    revision: int
    deadline: float
    headers: Headers
    bus: Bus
    store: WorkflowStore
    agent_id: str
    #: The conversation the run acts for, as the bus proved it of the run's request
    #: (``TaskRequest.conversation``): each step's request carries it on.
    conversation: str | None = None
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Changes (a step's end) not yet written to the run's entry.
    unsaved: bool = False

    async def end_step(self, step: Step, status: str, *, error_code: str | None = None,
                       result: dict[str, Any] | None = None, reason: str | None = None,
                       keep: bool = True) -> None:
        """End ``step`` (its outcome in the document too), kept and told. ``keep=False``:
        an end that came with an answer, which HMP_REPLIES keeps anyway (a continuing copy
        reads it back): kept with the next save (the next step's send, or the run's end)
        instead of a write of its own."""
        state = self.run.steps[step.id]
        async with self.lock:
            state.status = status  # type: ignore[assignment]
            state.error_code, state.reason = error_code, reason
            state.result = result or {}
            state.finished_at = time.time()
            self.run.document[step.id] = {"status": status, "result": state.result,
                                          "error_code": error_code, "agent": state.agent}
            self.unsaved = True
        if keep:
            await self.save()
        await self.note("step_finished", step=step.id, status=status,
                        error_code=error_code, agent=state.agent)

    async def finish(self, status: str, error_code: str | None, *,
                     failed_step: str | None = None) -> None:
        """End the run (steps still running end "cancelled"), kept and told."""
        async with self.lock:
            for state in self.run.steps.values():
                if state.status == "running" and status != "success":
                    state.status, state.finished_at = "cancelled", time.time()
                    state.reason = "the run ended first"
            self.run.status = status  # type: ignore[assignment]
            self.run.error_code, self.run.failed_step = error_code, failed_step
            self.run.finished_at = time.time()
        await self.save()
        await self.note("run_finished", status=status, error_code=error_code,
                        failed_step=failed_step)
        log.info("workflow %s v%d: run %s %s%s", self.run.workflow_id, self.run.version,
                 self.run.run_id, status, f" at {failed_step}" if failed_step else "")

    async def save(self) -> None:
        """Write the run's state over its entry (a cancel written meanwhile is kept and
        heard)."""
        async with self.lock:
            self.unsaved = False
            run, self.revision = await self.store.save(self.run, self.revision)
            if run.cancel_requested and not self.run.cancel_requested:
                self.run.cancel_requested = True
                self.cancelled.set()

    async def note(self, event: str, **details: Any) -> None:
        """A log_event about the run, on ``log.<the run request's task id>``."""
        with contextlib.suppress(Exception):  # progress is best effort: not awaited
            await self.bus.tell(log_subject(self.run.task_id), LogEvent(
                sender_id=self.agent_id, correlation_id=self.run.correlation_id,
                level="warn" if details.get("status") in ("failed", "partial") else "info",
                event_type=event, details={"run_id": self.run.run_id, **{
                    k: v for k, v in details.items() if v is not None}}), self.headers)


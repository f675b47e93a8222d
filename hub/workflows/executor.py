"""The workflow executor: a hub agent that runs workflows, one ``task_request`` per step.

A run is a ``task_request`` with intent ``run_workflow`` and arguments ``{workflow_id,
version?, input}`` (or with a workflow's own ``capability`` as intent, the arguments being
the input). The executor keeps the run's state on the hub (``WorkflowStore``) before each
step's request is sent and after each answer, sends every step whose inputs are ready (side
by side when they do not depend on each other), follows a ``partial`` answer's next steps
(up to the step's ``max_follow_ups``), evaluates conditions, and answers with one
``task_response`` for the whole run.

How a step is sent and awaited is ``steps``; how a run's state is kept, ``live``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from nats.aio.msg import Msg

from ..agent import Agent
from ..bus import Bus, Headers
from ..deadlines import deadline_of
from ..messages import TaskRequest, TaskResponse
from .definition import Step, Workflow
from .document import MissingInput, holds, resolve
from .live import LiveRun
from .runs import Run, StepState, run_id_of
from .steps import run_step
from .store import CANCEL, WorkflowStore

log = logging.getLogger(__name__)

EXECUTOR_ID = "workflow-executor"
RUN_WORKFLOW = "run_workflow"


class RunRefused(ValueError):
    """A run request that names no runnable workflow: the error code and why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class WorkflowExecutor(Agent):
    """Runs workflows kept in ``store``; offers ``run_workflow`` and each workflow's own
    capability."""

    concurrency = 64
    version = "1"
    #: A run's state is kept after every step: a stopping copy hands its runs to another
    #: at once instead of waiting for them.
    stop_grace = 0.5

    def __init__(self, bus: Bus, store: WorkflowStore | None = None, *,
                 agent_id: str = EXECUTOR_ID) -> None:
        super().__init__()
        self.bus = bus
        self.store = store or WorkflowStore(bus)
        self.agent_id = agent_id
        self.capabilities: tuple[str, ...] = (RUN_WORKFLOW,)
        self._live: dict[str, LiveRun] = {}
        self._subscription: Any = None
        self._refreshing: asyncio.Task[None] | None = None
        self._stale = False

    async def start(self) -> None:
        """Listen for cancels and offer the kept workflows' capabilities (call before the
        runner starts)."""
        self._subscription = await self.bus.nc.subscribe(f"{CANCEL}.*", cb=self._on_cancel)
        self.store.changed = self._versions_changed
        await self.store.follow()
        await self.refresh()

    async def stop(self) -> None:
        """Stop listening for cancels and versions."""
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
        await self.store.unfollow()
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refreshing

    def _versions_changed(self) -> None:
        """A workflow's newest version changed: offer its capability from now on."""
        self._stale = True
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh_now(),
                                                   name="workflow capabilities")

    async def _refresh_now(self) -> None:
        while self._stale:  # a change during a refresh is refreshed for too
            self._stale = False
            try:
                await self.refresh()
            except Exception as exc:  # the periodic refresh tries again
                log.warning("workflow capabilities not refreshed: %s", exc)

    async def refresh(self) -> tuple[str, ...]:
        """Offer ``run_workflow`` and every kept workflow's capability (the heartbeats read
        this tuple at each beat). From the versions the store follows: no listing of the
        bucket, and a kept version is read once."""
        named = sorted({w.capability for w in await self.store.latest() if w.capability})
        self.capabilities = (RUN_WORKFLOW, *named)
        return self.capabilities

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        try:
            live = await self._open(request)
        except RunRefused as exc:
            return self.respond(request, "failed", {"error": str(exc)}, error_code=exc.code)
        self._live[live.run.run_id] = live
        try:
            if live.run.status == "running":
                await self._drive(live)
        except asyncio.CancelledError:
            if time.time() >= live.deadline and live.run.status == "running":
                # The hub answers TIMEOUT for the run; its state says so too.
                await asyncio.shield(live.finish("failed", "TIMEOUT"))
            raise
        finally:
            self._live.pop(live.run.run_id, None)
        return self._answer(request, live.run)

    # -- opening a run -------------------------------------------------------------------

    async def _open(self, request: TaskRequest) -> LiveRun:
        """The run ``request`` starts, or continues (a redelivered request: the run it
        created before, on the definition it started with)."""
        run_id = run_id_of(request.sender_id, request.task_id)
        workflow, given = await self._workflow_of(request)
        run, revision, fresh = await self.store.create(Run(
            run_id=run_id, workflow_id=workflow.workflow_id, version=workflow.version,
            definition=workflow, correlation_id=request.correlation_id,
            sender_id=request.sender_id, task_id=request.task_id,
            document={"input": {**workflow.defaults, **given},
                      "run": {"run_id": run_id, "workflow_id": workflow.workflow_id,
                              "version": workflow.version}},
            steps={s.id: StepState() for s in workflow.steps}))
        log.info("workflow %s v%d: run %s %s", run.workflow_id, run.version, run_id,
                 "started" if fresh else "continues")
        headers = Headers(request.correlation_id, request.correlation_id)
        return LiveRun(run, revision, deadline_of(request), headers, self.bus, self.store,
                       self.agent_id, conversation=request.conversation)

    async def _workflow_of(self, request: TaskRequest) -> tuple[Workflow, dict[str, Any]]:
        args = request.arguments
        if request.intent == RUN_WORKFLOW:
            workflow_id, version, given = args.get("workflow_id"), args.get("version"), \
                args.get("input", {})
            if not isinstance(workflow_id, str) or not workflow_id:
                raise RunRefused("INVALID_ARGUMENTS", "run_workflow needs arguments "
                                 "{workflow_id, version?, input}")
            if version is not None and (not isinstance(version, int) or version < 1):
                raise RunRefused("INVALID_ARGUMENTS", "version: a whole number from 1")
            if not isinstance(given, dict):
                raise RunRefused("INVALID_ARGUMENTS", "input: an object")
            workflow = await self.store.get(workflow_id, version)
            if workflow is None:
                raise RunRefused("UNKNOWN_WORKFLOW", f"no workflow {workflow_id!r}"
                                 + (f" version {version}" if version else ""))
            return workflow, given
        for workflow in await self.store.latest():
            if workflow.capability == request.intent:
                return workflow, dict(args)
        raise RunRefused("UNKNOWN_WORKFLOW", f"no workflow offers {request.intent!r}")

    # -- driving it --------------------------------------------------------------------

    async def _drive(self, live: LiveRun) -> None:
        """Run every step that can run until the run ends."""
        workflow = live.run.definition
        order = workflow.order()
        running: dict[str, asyncio.Task[None]] = {}
        try:
            while live.run.status == "running":
                if live.run.cancel_requested or live.cancelled.is_set():
                    await live.finish("cancelled", "CANCELLED")
                    return
                stopped = self._stopping_step(live)
                if stopped is not None:
                    await live.finish("failed", self._code_of(live, stopped),
                                       failed_step=stopped)
                    return
                started = False
                for step_id in order:
                    state = live.run.steps[step_id]
                    if state.done or step_id in running:
                        continue
                    step = workflow.step(step_id)
                    if not all(live.run.steps[n].done for n in workflow.needs(step)):
                        continue
                    if state.status == "pending" and await self._skipped(live, step):
                        continue
                    running[step_id] = asyncio.create_task(run_step(live, step))
                    started = True
                if live.unsaved and running and not started:
                    # A step's end not kept yet (no new step's send keeps it): kept now.
                    await live.save()
                if not running:
                    # Steps run in an order that puts each after what it needs, and a
                    # step that cannot run is skipped: nothing is left waiting.
                    await live.finish("success", None)
                    return
                cancel = asyncio.ensure_future(live.cancelled.wait())
                try:
                    done, _ = await asyncio.wait([*running.values(), cancel],
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:
                    cancel.cancel()
                for step_id, task in list(running.items()):
                    if task in done:
                        del running[step_id]
                        task.result()
        finally:
            for task in running.values():
                task.cancel()
            if running:
                await asyncio.wait(running.values())

    async def _skipped(self, live: LiveRun, step: Step) -> bool:
        """Skip ``step`` when its condition is false, or (with none) when a step it
        needs was skipped; True when skipped."""
        reason = None
        if step.when:
            if not holds(step.when, live.run.document):
                reason = f"if {step.when} is false"
        else:
            skipped = [n for n in sorted(live.run.definition.needs(step))
                       if live.run.steps[n].status == "skipped"]
            if skipped:
                reason = f"{', '.join(skipped)} was skipped"
        if reason is None:
            return False
        await live.end_step(step, "skipped", reason=reason)
        return True

    def _stopping_step(self, live: LiveRun) -> str | None:
        """The step whose failure ends the run, if one has."""
        for step in live.run.definition.steps:
            state = live.run.steps[step.id]
            if state.status in ("failed", "partial") and step.on_failure == "stop":
                return step.id
        return None

    @staticmethod
    def _code_of(live: LiveRun, step_id: str) -> str:
        return "STEP_TIMEOUT" if live.run.steps[step_id].error_code == "TIMEOUT" \
            else "STEP_FAILED"

    async def _on_cancel(self, msg: Msg) -> None:
        live = self._live.get(msg.subject.rsplit(".", 1)[-1])
        if live is not None:
            live.run.cancel_requested = True
            live.cancelled.set()

    # -- answering -----------------------------------------------------------------------

    def _answer(self, request: TaskRequest, run: Run) -> TaskResponse:
        steps = run.summary()
        head = {"run_id": run.run_id, "workflow_id": run.workflow_id, "version": run.version,
                "status": run.status, "steps": steps}
        if run.status == "success":
            response = self.respond(request, "success", {**head, "output": _output(run)})
        else:
            failed = run.steps.get(run.failed_step or "")
            response = self.respond(request, "failed", {
                **head, "failed_step": run.failed_step,
                "error": (failed.reason or (failed.result or {}).get("error")) if failed
                else "cancelled" if run.status == "cancelled" else None},
                error_code=run.error_code or "FAILED")
        # The same answer for a redelivered request: JetStream keeps it once.
        return response.model_copy(update={"message_id": f"{run.run_id}-answer"})


def _output(run: Run) -> Any:
    workflow = run.definition
    if workflow.output is not None:
        try:
            return resolve(workflow.output, run.document)
        except MissingInput as exc:
            return {"error": str(exc)}
    for step_id in reversed(workflow.order()):
        if run.steps[step_id].status == "success":
            return run.steps[step_id].result
    return {}

"""The workflow executor: a hub agent that runs workflows, one ``task_request`` per step.

A run is a ``task_request`` with intent ``run_workflow`` and arguments ``{workflow_id,
version?, input}`` (or with a workflow's own ``capability`` as intent, the arguments being
the input). The executor keeps the run's state on the hub (``WorkflowStore``) before each
step's request is sent and after each answer, sends every step whose inputs are ready (side
by side when they do not depend on each other), follows a ``partial`` answer's next steps
(up to the step's ``max_follow_ups``), evaluates conditions, and answers with one
``task_response`` for the whole run.

Each request a step sends has its own sender id (``wf.<run>.<step>.<n>``), so its answer
stays findable in ``HMP_REPLIES`` by subject: a copy that continues a run after another
died reads an answer that came in between instead of sending the step again, and waits for
one still due. A step's request is sent again only within JetStream's duplicate window
(the same message id: stored once), so no step runs twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from ..agent import Agent
from ..bus import REPLIES, Bus, Headers, log_subject, reply_subject, request_subject
from ..deadlines import deadline_of
from ..discovery import choose, discover
from ..errors import BusOverloaded
from ..messages import LogEvent, TaskRequest, TaskResponse, Violation
from .definition import Step, Workflow
from .document import MissingInput, holds, resolve
from .store import CANCEL, Run, Sent, StepState, WorkflowStore, run_id_of

log = logging.getLogger(__name__)

EXECUTOR_ID = "workflow-executor"
RUN_WORKFLOW = "run_workflow"
#: A request is sent again (same message id) only this long after it was first sent: well
#: inside JetStream's two-minute duplicate window.
_RESEND_WINDOW = 90.0
#: Seconds past a step's deadline to wait for the hub's own TIMEOUT before deciding it.
_GRACE = 2.0
#: Kept from the end of the run's own deadline for its answer.
_MARGIN_MS = 250


class RunRefused(ValueError):
    """A run request that names no runnable workflow: the error code and why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Live:
    """A run being driven by this copy."""

    run: Run
    revision: int
    deadline: float
    headers: Headers
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class WorkflowExecutor(Agent):
    """Runs workflows kept in ``store``; offers ``run_workflow`` and each workflow's own
    capability."""

    concurrency = 64
    version = "1"

    def __init__(self, bus: Bus, store: WorkflowStore | None = None, *,
                 agent_id: str = EXECUTOR_ID) -> None:
        super().__init__()
        self.bus = bus
        self.store = store or WorkflowStore(bus)
        self.agent_id = agent_id
        self.capabilities: tuple[str, ...] = (RUN_WORKFLOW,)
        self._live: dict[str, _Live] = {}
        self._subscription: Any = None

    async def start(self) -> None:
        """Listen for cancels and offer the kept workflows' capabilities (call before the
        runner starts)."""
        self._subscription = await self.bus.nc.subscribe(f"{CANCEL}.*", cb=self._on_cancel)
        await self.refresh()

    async def stop(self) -> None:
        """Stop listening for cancels."""
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()

    async def refresh(self) -> tuple[str, ...]:
        """Offer ``run_workflow`` and every kept workflow's capability (the heartbeats read
        this tuple at each beat)."""
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
                await asyncio.shield(self._finish(live, "failed", "TIMEOUT"))
            raise
        finally:
            self._live.pop(live.run.run_id, None)
        return self._answer(request, live.run)

    # -- opening a run -------------------------------------------------------------------

    async def _open(self, request: TaskRequest) -> _Live:
        """The run ``request`` starts, or continues (a redelivered request)."""
        run_id = run_id_of(request.sender_id, request.task_id)
        run, revision = await self.store.load(run_id)
        if run is None or revision is None:
            workflow, given = await self._workflow_of(request)
            run, revision = await self.store.create(Run(
                run_id=run_id, workflow_id=workflow.workflow_id, version=workflow.version,
                definition=workflow, correlation_id=request.correlation_id,
                sender_id=request.sender_id, task_id=request.task_id,
                document={"input": {**workflow.defaults, **given}, "run": {"run_id": run_id,
                                                  "workflow_id": workflow.workflow_id,
                                                  "version": workflow.version}},
                steps={s.id: StepState() for s in workflow.steps}))
            log.info("workflow %s v%d: run %s started", workflow.workflow_id,
                     workflow.version, run_id)
        else:
            log.info("workflow %s v%d: run %s continues", run.workflow_id, run.version,
                     run_id)
        headers = Headers(request.correlation_id, request.correlation_id)
        return _Live(run, revision, deadline_of(request), headers)

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

    async def _drive(self, live: _Live) -> None:
        """Run every step that can run until the run ends."""
        workflow = live.run.definition
        order = workflow.order()
        running: dict[str, asyncio.Task[None]] = {}
        try:
            while live.run.status == "running":
                if live.run.cancel_requested or live.cancelled.is_set():
                    await self._finish(live, "cancelled", "CANCELLED")
                    return
                stopped = self._stopping_step(live)
                if stopped is not None:
                    await self._finish(live, "failed", self._code_of(live, stopped),
                                       failed_step=stopped)
                    return
                for step_id in order:
                    state = live.run.steps[step_id]
                    if state.done or step_id in running:
                        continue
                    step = workflow.step(step_id)
                    if not all(live.run.steps[n].done for n in workflow.needs(step)):
                        continue
                    if state.status == "pending" and await self._skipped(live, step):
                        continue
                    running[step_id] = asyncio.create_task(self._run_step(live, step))
                if not running:
                    # Steps run in an order that puts each after what it needs, and a
                    # step that cannot run is skipped: nothing is left waiting.
                    await self._finish(live, "success", None)
                    return
                cancel = asyncio.ensure_future(live.cancelled.wait())
                done, _ = await asyncio.wait([*running.values(), cancel],
                                             return_when=asyncio.FIRST_COMPLETED)
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

    async def _skipped(self, live: _Live, step: Step) -> bool:
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
        await self._end_step(live, step, "skipped", reason=reason)
        return True

    def _stopping_step(self, live: _Live) -> str | None:
        """The step whose failure ends the run, if one has."""
        for step in live.run.definition.steps:
            state = live.run.steps[step.id]
            if state.status in ("failed", "partial") and step.on_failure == "stop":
                return step.id
        return None

    @staticmethod
    def _code_of(live: _Live, step_id: str) -> str:
        return "STEP_TIMEOUT" if live.run.steps[step_id].error_code == "TIMEOUT" \
            else "STEP_FAILED"

    async def _run_step(self, live: _Live, step: Step) -> None:
        """Send the step's request (and its follow-ups), wait for each answer, keep the
        step's outcome."""
        state = live.run.steps[step.id]
        resumed = state.status == "running" and bool(state.sent)
        if not resumed:
            try:
                arguments = resolve(step.input, live.run.document)
            except MissingInput as exc:
                await self._end_step(live, step, "failed", error_code="INPUT_MISSING",
                                     reason=str(exc))
                return
            if not isinstance(arguments, dict):
                arguments = {"input": arguments}
            async with live.lock:
                state.status, state.started_at = "running", time.time()
            await self._note(live, "step_started", step=step.id)
            sent = await self._send(live, step, agent=step.agent, capability=step.capability,
                                    intent=step.asked, arguments=arguments)
            if sent is None:
                return
        while True:
            last = state.sent[-1]
            if last.status is None:
                answer = await self._await(live, last, resend=resumed)
                resumed = False
                if answer is None:
                    return  # cancelled
                async with live.lock:
                    last.status, last.error_code, last.result = \
                        answer.status, answer.error_code, answer.result
                await self._save(live)
            if last.status != "partial":
                await self._end_step(live, step, "success" if last.status == "success"
                                     else "failed", error_code=last.error_code,
                                     result=last.result or {})
                return
            follow = _next_step(last.result or {})
            if follow is None or len(state.sent) > step.max_follow_ups:
                await self._end_step(live, step, "partial", error_code="UNFINISHED",
                                     result=last.result or {},
                                     reason=f"still partial after {len(state.sent) - 1} "
                                     "follow-ups" if follow else "partial, with no next step")
                return
            intent = str(follow.get("intent") or step.asked)
            agent = follow.get("agent") if isinstance(follow.get("agent"), str) else None
            given = follow.get("arguments")
            arguments = {**resolve(step.input, live.run.document),
                         **(given if isinstance(given, dict) else {}),
                         **{k: v for k, v in follow.items()
                            if k not in ("intent", "agent", "arguments")}}
            capability = None if agent else intent
            if agent is None and follow.get("intent") in (None, step.asked):
                agent = last.agent  # "continue with me"
                capability = None
            if await self._send(live, step, agent=agent, capability=capability,
                                intent=intent, arguments=arguments) is None:
                return

    async def _send(self, live: _Live, step: Step, *, agent: str | None,
                    capability: str | None, intent: str,
                    arguments: dict[str, Any]) -> Sent | None:
        """Choose the agent, keep the request in the run's state, then send it; None when
        the step ended instead (no agent, an overloaded one)."""
        state = live.run.steps[step.id]
        if agent is None:
            assert capability is not None
            try:
                chosen = choose(await discover(self.bus, capability),
                                self.bus.settings.hub_traffic.get(capability))
            except Exception as exc:
                log.warning("discovery of %r failed: %s", capability, exc)
                chosen = None
            if chosen is None:
                await self._end_step(live, step, "failed", error_code="NO_AGENT",
                                     reason=f"no live agent offers {capability!r}")
                return None
            agent = chosen.agent_id
        left_ms = int((live.deadline - time.time()) * 1000) - _MARGIN_MS
        if left_ms < 1:
            await self._end_step(live, step, "failed", error_code="TIMEOUT",
                                 reason="the run's deadline left no time for this step")
            return None
        n = len(state.sent)
        sent = Sent(task_id=f"{live.run.run_id}-{step.id}-{n}", agent=agent, intent=intent,
                    arguments=arguments, timestamp=time.time(),
                    deadline_ms=min(step.deadline_ms, left_ms),
                    sender_id=f"wf.{live.run.run_id}.{step.id}.{n}")
        async with live.lock:
            state.sent.append(sent)
            state.agent = agent
        await self._save(live)  # kept before it is sent: a continuing copy knows of it
        try:
            await self._publish_request(sent, live)
        except BusOverloaded as exc:
            async with live.lock:
                sent.status, sent.error_code, sent.result = "failed", "OVERLOADED", {
                    "error": str(exc)}
            await self._end_step(live, step, "failed", error_code="OVERLOADED",
                                 reason=str(exc))
            return None
        return sent

    async def _publish_request(self, sent: Sent, live: _Live) -> None:
        pause = await self.bus.admit(sent.agent)
        if pause:
            await asyncio.sleep(pause)
        await self.bus.publish(request_subject(sent.agent), self._request_of(sent, live),
                               live.headers)

    def _request_of(self, sent: Sent, live: _Live) -> TaskRequest:
        return TaskRequest(message_id=sent.task_id, sender_id=sent.sender_id,
                           receiver_id=sent.agent, correlation_id=live.run.correlation_id,
                           task_id=sent.task_id, intent=sent.intent,
                           arguments=sent.arguments, deadline_ms=sent.deadline_ms,
                           timestamp=sent.timestamp)

    async def _await(self, live: _Live, sent: Sent, *, resend: bool) -> TaskResponse | None:
        """The answer to ``sent``: one already kept in HMP_REPLIES (it came while no copy
        listened), or the one that comes; TIMEOUT past its deadline; None if the run is
        cancelled first. ``resend``: the request was kept by a copy that may have died
        before sending it."""
        answered: asyncio.Future[TaskResponse] = asyncio.get_running_loop().create_future()

        async def on_reply(msg: Msg) -> None:
            answer = self._answer_in(msg.data, sent)
            if answer is not None and not answered.done():
                answered.set_result(answer)

        subscription = await self.bus.nc.subscribe(reply_subject(sent.sender_id),
                                                   cb=on_reply)
        try:
            kept = await self._kept_answer(sent)
            if kept is not None:
                return kept
            if resend and not answered.done() and \
                    time.time() - sent.timestamp < _RESEND_WINDOW:
                # A copy that died may have kept the request and not sent it: sent again
                # with the same message id, JetStream stores it once.
                await self._publish_request(sent, live)
            cancel: asyncio.Future[Any] = asyncio.ensure_future(live.cancelled.wait())
            left = sent.timestamp + sent.deadline_ms / 1000 + _GRACE - time.time()
            waits: list[asyncio.Future[Any]] = [answered, cancel]
            done, _ = await asyncio.wait(waits, timeout=max(0.0, left),
                                         return_when=asyncio.FIRST_COMPLETED)
            cancel.cancel()
            if answered in done:
                return answered.result()
            if cancel in done:
                return None
            return TaskResponse(sender_id=self.agent_id, correlation_id=live.run.correlation_id,
                                task_id=sent.task_id, status="failed", error_code="TIMEOUT",
                                result={"error": f"no answer within {sent.deadline_ms} ms"})
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def _kept_answer(self, sent: Sent) -> TaskResponse | None:
        try:
            msg = await self.bus.js.get_last_msg(REPLIES, reply_subject(sent.sender_id))
        except NotFoundError:
            return None
        return self._answer_in(msg.data or b"", sent)

    def _answer_in(self, raw: bytes, sent: Sent) -> TaskResponse | None:
        try:
            message = self.bus.parse(raw)
        except Violation as exc:
            log.warning("unreadable answer for %s: %s", sent.task_id, exc)
            return None
        if isinstance(message, TaskResponse) and message.task_id == sent.task_id:
            return message
        return None

    # -- keeping state -----------------------------------------------------------------

    async def _end_step(self, live: _Live, step: Step, status: str, *,
                        error_code: str | None = None, result: dict[str, Any] | None = None,
                        reason: str | None = None) -> None:
        state = live.run.steps[step.id]
        async with live.lock:
            state.status = status  # type: ignore[assignment]
            state.error_code, state.reason = error_code, reason
            state.result = result or {}
            state.finished_at = time.time()
            live.run.document[step.id] = {"status": status, "result": state.result,
                                          "error_code": error_code, "agent": state.agent}
        await self._save(live)
        await self._note(live, "step_finished", step=step.id, status=status,
                         error_code=error_code, agent=state.agent)

    async def _finish(self, live: _Live, status: str, error_code: str | None, *,
                      failed_step: str | None = None) -> None:
        async with live.lock:
            for state in live.run.steps.values():
                if state.status == "running" and status != "success":
                    state.status, state.finished_at = "cancelled", time.time()
                    state.reason = "the run ended first"
            live.run.status = status  # type: ignore[assignment]
            live.run.error_code, live.run.failed_step = error_code, failed_step
            live.run.finished_at = time.time()
        await self._save(live)
        await self._note(live, "run_finished", status=status, error_code=error_code,
                         failed_step=failed_step)
        log.info("workflow %s v%d: run %s %s%s", live.run.workflow_id, live.run.version,
                 live.run.run_id, status, f" at {failed_step}" if failed_step else "")

    async def _save(self, live: _Live) -> None:
        async with live.lock:
            run, live.revision = await self.store.save(live.run, live.revision)
            if run.cancel_requested and not live.run.cancel_requested:
                live.run.cancel_requested = True
                live.cancelled.set()

    async def _note(self, live: _Live, event: str, **details: Any) -> None:
        """A log_event about the run, on ``log.<the run request's task id>``."""
        with contextlib.suppress(Exception):  # progress is best effort
            await self.bus.publish(log_subject(live.run.task_id), LogEvent(
                sender_id=self.agent_id, correlation_id=live.run.correlation_id,
                level="warn" if details.get("status") in ("failed", "partial") else "info",
                event_type=event, details={"run_id": live.run.run_id, **{
                    k: v for k, v in details.items() if v is not None}}), live.headers)

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


def _next_step(result: dict[str, Any]) -> dict[str, Any] | None:
    steps = result.get("next_steps")
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        return steps[0]
    return None


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

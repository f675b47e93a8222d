"""One step of a run: its request sent (and its follow-ups, when it answers ``partial``),
its answer awaited, its outcome kept.

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
from typing import Any

from nats.aio.msg import Msg

from ..bus import RESEND_WINDOW
from ..discovery import choose, discover
from ..errors import BusOverloaded
from ..messages import TaskRequest, TaskResponse, Violation
from ..subjects import answers_for, replies_to
from .definition import Step
from .document import MissingInput, resolve
from .live import LiveRun
from .runs import Sent

log = logging.getLogger(__name__)

#: Seconds past a step's deadline to wait for the hub's own TIMEOUT before deciding it.
_GRACE = 2.0
#: Kept from the end of the run's own deadline for its answer.
_MARGIN_MS = 250


async def run_step(live: LiveRun, step: Step) -> None:
    """Send the step's request (and its follow-ups), wait for each answer, keep the
    step's outcome."""
    state = live.run.steps[step.id]
    resumed = state.status == "running" and bool(state.sent)
    if not resumed:
        try:
            arguments = resolve(step.input, live.run.document)
        except MissingInput as exc:
            await live.end_step(step, "failed", error_code="INPUT_MISSING",
                                reason=str(exc))
            return
        if not isinstance(arguments, dict):
            arguments = {"input": arguments}
        async with live.lock:
            state.status, state.started_at = "running", time.time()
        await live.note("step_started", step=step.id)
        sent = await _send(live, step, agent=step.agent, capability=step.capability,
                           intent=step.asked, arguments=arguments)
        if sent is None:
            return
    while True:
        last = state.sent[-1]
        if last.status is None:
            answer = await _await(live, last, resend=resumed)
            resumed = False
            if answer is None:
                return  # cancelled
            async with live.lock:
                last.status, last.error_code, last.result = \
                    answer.status, answer.error_code, answer.result
            if last.status == "partial":  # kept now; an end is kept by end_step below
                await live.save()
        if last.status != "partial":
            await live.end_step(step, "success" if last.status == "success"
                                else "failed", error_code=last.error_code,
                                result=last.result or {}, keep=not _kept_elsewhere(last))
            return
        follow = _next_step(last.result or {})
        if follow is None or len(state.sent) > step.max_follow_ups:
            await live.end_step(step, "partial", error_code="UNFINISHED",
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
        if await _send(live, step, agent=agent, capability=capability,
                       intent=intent, arguments=arguments) is None:
            return


async def _send(live: LiveRun, step: Step, *, agent: str | None,
                capability: str | None, intent: str,
                arguments: dict[str, Any]) -> Sent | None:
    """Choose the agent, keep the request in the run's state, then send it; None when
    the step ended instead (no agent, an overloaded one)."""
    state = live.run.steps[step.id]
    if agent is None:
        assert capability is not None
        try:
            chosen = choose(await discover(live.bus, capability),
                            live.bus.settings.hub_traffic.get(capability))
        except Exception as exc:
            log.warning("discovery of %r failed: %s", capability, exc)
            chosen = None
        if chosen is None:
            await live.end_step(step, "failed", error_code="NO_AGENT",
                                reason=f"no live agent offers {capability!r}")
            return None
        agent = chosen.agent_id
    left_ms = int((live.deadline - time.time()) * 1000) - _MARGIN_MS
    if left_ms < 1:
        await live.end_step(step, "failed", error_code="TIMEOUT",
                            reason="the run's deadline left no time for this step")
        return None
    n = len(state.sent)
    sent = Sent(task_id=f"{live.run.run_id}-{step.id}-{n}", agent=agent, intent=intent,
                arguments=arguments, timestamp=time.time(),
                deadline_ms=min(step.deadline_ms, left_ms),
                sender_id=f"wf.{live.run.run_id}.{step.id}.{n}")
    try:
        pause = await live.bus.admit(agent)  # before it is kept: refused, not lost
    except BusOverloaded as exc:
        await live.end_step(step, "failed", error_code="OVERLOADED", reason=str(exc))
        return None
    if pause:
        await asyncio.sleep(pause)
    async with live.lock:
        state.sent.append(sent)
        state.agent = agent
    await live.save()  # kept before it is sent (by _await): a continuing copy knows of it
    return sent


async def _publish(live: LiveRun, sent: Sent) -> None:
    await live.bus.publish(live.bus.request_subject(sent.agent), request_of(live, sent),
                           live.headers)


def request_of(live: LiveRun, sent: Sent) -> TaskRequest:
    """The task_request ``sent`` stands for (the same message each time it is built), for
    the run's conversation (a run started for a chat reads that chat's data, and none
    other; one started from outside, none)."""
    return TaskRequest(message_id=sent.task_id, sender_id=sent.sender_id,
                       receiver_id=sent.agent, correlation_id=live.run.correlation_id,
                       task_id=sent.task_id, intent=sent.intent,
                       arguments=sent.arguments, deadline_ms=sent.deadline_ms,
                       timestamp=sent.timestamp).for_conversation(live.conversation)


async def _await(live: LiveRun, sent: Sent, *, resend: bool) -> TaskResponse | None:
    """Send ``sent`` (listening first) and wait for its answer; TIMEOUT past its deadline;
    None if the run is cancelled first. ``resend``: a copy before this one kept the request
    and may or may not have sent it: an answer already kept in HMP_REPLIES is taken, and
    the request is sent again only inside the duplicate window."""
    answered: asyncio.Future[TaskResponse] = asyncio.get_running_loop().create_future()

    async def on_reply(msg: Msg) -> None:
        if not answers_for(msg, sent.agent, sent.task_id):
            return
        answer = _answer_in(live, msg.data, sent)
        if answer is not None and not answered.done():
            answered.set_result(answer)

    subscription = await live.bus.nc.subscribe(replies_to(sent.sender_id), cb=on_reply)
    try:
        if not resend:
            await _publish(live, sent)
        else:  # its answer may have come while no copy listened
            kept = await live.bus.kept_answer(request_of(live, sent), sent.agent)
            if kept is not None:
                return kept
            if not answered.done() and time.time() - sent.timestamp < RESEND_WINDOW:
                # That copy may have kept the request and died before sending it: sent
                # again with the same message id, JetStream stores it once.
                await _publish(live, sent)
        cancel: asyncio.Future[Any] = asyncio.ensure_future(live.cancelled.wait())
        left = sent.timestamp + sent.deadline_ms / 1000 + _GRACE - time.time()
        waits: list[asyncio.Future[Any]] = [answered, cancel]
        try:
            done, _ = await asyncio.wait(waits, timeout=max(0.0, left),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel.cancel()
        if answered in done:
            return answered.result()
        if cancel in done:
            return None
        return TaskResponse(sender_id=live.agent_id, correlation_id=live.run.correlation_id,
                            task_id=sent.task_id, status="failed", error_code="TIMEOUT",
                            result={"error": f"no answer within {sent.deadline_ms} ms"})
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()


def _answer_in(live: LiveRun, raw: bytes, sent: Sent) -> TaskResponse | None:
    try:
        message = live.bus.parse(raw)
    except Violation as exc:
        log.warning("unreadable answer for %s: %s", sent.task_id, exc)
        return None
    if isinstance(message, TaskResponse) and message.task_id == sent.task_id:
        return message
    return None


def _kept_elsewhere(sent: Sent) -> bool:
    """Whether HMP_REPLIES keeps the answer ``sent`` got, for a continuing copy to read
    back (not so a TIMEOUT, which this copy may have decided itself)."""
    return sent.error_code != "TIMEOUT"


def _next_step(result: dict[str, Any]) -> dict[str, Any] | None:
    steps = result.get("next_steps")
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        return steps[0]
    return None

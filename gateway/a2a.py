"""The A2A edge: every hub agent, the workflow executor and the gateway's own agent
(``gateway``) as A2A servers at ``/a2a/<agent_id>``.

An A2A message to a hub agent becomes a ``task_request`` on the bus (the context id is the
correlation id; the intent is ``metadata.skill`` or the agent's first capability; text parts
are ``arguments.text``, data parts the other arguments), and its ``task_response`` the
task's state (``adapters.a2a.finish``). A message to ``gateway`` is routed like an API
message in the conversation ``api:a2a-<context id>``. A message naming an input-required
task continues it (the same correlation id, or the gateway's waiting question). Tasks are
kept in the store (``<prefix>:a2a:<task id>``) for as long as tasks are, so GetTask answers
from any gateway process; a task runs on in the background when its client goes away.
Cancelling ends the A2A task at once; a workflow run is cancelled with it and a gateway task
stopped, while a plain hub agent (HMP has no cancel message) finishes and its answer is
dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters import a2a
from adapters.base import InboundMessage
from agent_core import PAUSED, TERMINAL
from agent_core.ids import new_id

from . import a2a_files
from .a2a_push import PushConfigs
from .a2a_tasks import A2ATasks, Record, correlation_of, gateway_events

if TYPE_CHECKING:
    from .service import Gateway

log = logging.getLogger(__name__)

GATEWAY_AGENT = "gateway"
_MAX_DEADLINE_MS = 300_000
_POLL = 0.2
#: Seconds the live agents discovery named are trusted (a card or a call per message
#: would otherwise ask it each time).
_DISCOVERY_TTL = 1.0


@dataclass
class _Live:
    """A task running in this process: its events for the stream that started it and for
    those that follow it (SubscribeToTask), and how to stop it."""

    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    followers: list[asyncio.Queue[Any]] = field(default_factory=list)

    def put(self, event: Any) -> None:
        """An event of the task, for every stream of it."""
        for queue in (self.events, *self.followers):
            queue.put_nowait(event)


class A2AEdge:
    """Serves A2A calls against the hub and the gateway's own agent."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        settings = gateway.settings
        self.prefix = settings.redis_prefix
        self.sender = "a2a-" + "".join(c if c.isalnum() or c in "-_" else "_"
                                       for c in self.prefix)
        self._live: dict[str, _Live] = {}
        redis = lambda: gateway.parts.opened.store.redis  # noqa: E731
        self.tasks = A2ATasks(redis, self.prefix, retention=settings.task_retention)
        self.push = PushConfigs(redis, self.tasks.keys, retention=settings.task_retention,
                                callback_hosts=settings.hermes_webhook_callback_hosts)
        self._agents: list[Any] = []
        self._agents_at = -1e9

    @property
    def _bus(self) -> Any:
        return self.gateway.parts.bus

    # -- cards ---------------------------------------------------------------------------

    async def info(self, agent_id: str) -> a2a.CardInfo | None:
        """What the card of ``agent_id`` says; None when no such agent is live."""
        if agent_id == GATEWAY_AGENT:
            return a2a.CardInfo(GATEWAY_AGENT, "The gateway's own agent: it plans, calls its "
                                "tools step by step (asking a person's approval for "
                                "writes) and answers; file parts (bytes or a URL) are read "
                                "like the files people send.", (a2a.Skill(
                                    "chat", "ask anything its tools can answer"),),
                                input_modes=a2a_files.INPUT_MODES)
        if self._bus is None:
            return None
        found = next((c for c in await self._live_agents() if c.agent_id == agent_id), None)
        if found is None:
            return None
        skills = [a2a.Skill(c) for c in found.capabilities]
        workflows = self.gateway.parts.workflows
        if "run_workflow" in found.capabilities and workflows is not None:
            described = {w.capability: w.description for w in await workflows.latest()
                         if w.capability}
            skills = [a2a.Skill(s.id, described.get(s.id, "") or (
                "run a workflow: data {workflow_id, version?, input}"
                if s.id == "run_workflow" else "")) for s in skills]
        return a2a.CardInfo(agent_id, f"Hub agent {agent_id} ({found.copies} running): "
                            f"{', '.join(found.capabilities)}.", tuple(skills),
                            found.version or "1")

    async def _live_agents(self) -> list[Any]:
        """The hub's live agents, asked of discovery at most once a second."""
        from hub.discovery import discover

        now = time.monotonic()
        if now - self._agents_at > _DISCOVERY_TTL:
            self._agents = await discover(self._bus, "*")
            self._agents_at = now
        return self._agents

    # -- calls ---------------------------------------------------------------------------

    def live(self, task_id: str) -> _Live | None:
        """The task, when it runs in this process."""
        return self._live.get(task_id)

    async def get(self, agent_id: str, params: dict[str, Any], principal: str
                  ) -> dict[str, Any]:
        request = a2a.parse(params, a2a.pb.GetTaskRequest())
        record = await self.tasks.of(agent_id, request.id, principal)
        if record.state == a2a.pb.TASK_STATE_WORKING and record.task.id not in self._live:
            await self.catch_up(record)
        length = request.history_length if request.HasField("history_length") else None
        return a2a.task_json(record.task, length)

    async def cancel(self, agent_id: str, params: dict[str, Any], principal: str
                     ) -> dict[str, Any]:
        request = a2a.parse(params, a2a.pb.CancelTaskRequest())
        record = await self.tasks.of(agent_id, request.id, principal)
        if record.state in a2a.TERMINAL:
            raise a2a.RpcError(a2a.TASK_NOT_CANCELABLE, f"task {request.id} has ended "
                               f"({a2a.pb.TaskState.Name(record.state)})")
        event = a2a.set_state(record.task, a2a.pb.TASK_STATE_CANCELED, "Cancelled.")
        await self.tasks.save(record)
        await self._stop_remote(record)
        live = self._live.get(record.task.id)
        if live is not None:
            live.put(event)
            if live.runner is not None:
                live.runner.cancel()
        self.push.notify(record, [event])
        return a2a.task_json(record.task)

    async def send(self, agent_id: str, params: dict[str, Any], principal: str, *,
                   stream: bool = False) -> AsyncIterator[dict[str, Any]]:
        """Start (or continue) a task of ``principal``'s; yields the task when done (or at
        once with returnImmediately), or, streaming, the task and then each event."""
        inbound = a2a.read_send(params)
        if inbound.files:
            await a2a_files.check(inbound, self.gateway.settings,
                                  to_gateway=agent_id == GATEWAY_AGENT)
        record = await self._open(agent_id, inbound, principal)
        if inbound.push is not None:  # refused (a URL inside) before anything runs
            await self.push.create(record, inbound.push)
        live = _Live()
        self._live[record.task.id] = live
        submitted = a2a.task_json(record.task)
        started = a2a.set_state(record.task, a2a.pb.TASK_STATE_WORKING)
        await self.tasks.save(record)
        live.runner = asyncio.create_task(self._run(record, inbound, live),
                                          name=f"a2a-{record.task.id}")
        if stream:
            yield {"task": submitted}
            yield a2a.event_json(started)
            while True:
                waiting = asyncio.ensure_future(live.events.get())
                finished = asyncio.ensure_future(live.done.wait())
                try:
                    done, _ = await asyncio.wait([waiting, finished],
                                                 return_when=asyncio.FIRST_COMPLETED)
                except BaseException:  # the client went away: the task goes on
                    waiting.cancel()
                    finished.cancel()
                    raise
                if waiting in done:
                    finished.cancel()
                    event = waiting.result()
                    yield a2a.event_json(event)
                    if event.HasField("status_update") and (
                            event.status_update.status.state in a2a.TERMINAL | a2a.INTERRUPTED):
                        return
                    continue
                waiting.cancel()
                while not live.events.empty():
                    yield a2a.event_json(live.events.get_nowait())
                return
        if not inbound.return_immediately:
            await live.done.wait()
        yield {"task": a2a.task_json(record.task, inbound.history_length)}

    # -- running -------------------------------------------------------------------------

    async def _open(self, agent_id: str, inbound: a2a.Inbound, principal: str) -> Record:
        message = inbound.message
        if message.task_id:
            record = await self.tasks.of(agent_id, message.task_id, principal)
            if record.state not in a2a.INTERRUPTED:
                raise a2a.RpcError(a2a.INVALID_PARAMS, f"task {message.task_id} is "
                                   f"{a2a.pb.TaskState.Name(record.state)}: only an "
                                   "input-required task takes another message")
            stored = a2a.pb.Message()
            stored.CopyFrom(message)
            stored.context_id = record.task.context_id
            record.task.history.append(stored)
            record.round += 1
            if agent_id != GATEWAY_AGENT:
                record.hmp_task_id = f"{record.task.id}-{record.round}"
            return record
        if await self.info(agent_id) is None:
            raise a2a.RpcError(a2a.INVALID_PARAMS, f"no live agent {agent_id!r}")
        task_id = new_id()
        context = message.context_id or new_id()
        intent = inbound.skill or await self._default_skill(agent_id)
        task = a2a.new_task(task_id, context, message)
        return Record(task, agent_id, correlation_of(context), intent, task_id,
                      principal=principal)

    async def _default_skill(self, agent_id: str) -> str:
        info = await self.info(agent_id)
        return info.skills[0].id if info and info.skills else "chat"

    async def _run(self, record: Record, inbound: a2a.Inbound, live: _Live) -> None:
        try:
            if record.agent == GATEWAY_AGENT:
                await self._run_gateway(record, inbound, live)
            else:
                await self._run_hub(record, inbound, live)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # the task fails, with a reason; never a traceback
            log.warning("A2A task %s failed: %s: %s", record.task.id, type(exc).__name__, exc)
            await self._end(record, live, a2a.finish(record.task, "failed", {
                "error": f"{type(exc).__name__}"}, "EDGE_ERROR"))
        finally:
            live.done.set()
            self._live.pop(record.task.id, None)

    async def _run_hub(self, record: Record, inbound: a2a.Inbound, live: _Live) -> None:
        from hub import LogEvent, TaskRequest
        from hub.errors import BusOverloaded
        from hub.subjects import log_subject

        bus = self._bus
        deadline = inbound.deadline_ms or min(
            _MAX_DEADLINE_MS, int(self.gateway.settings.hermes_run_timeout * 1000))
        # An A2A caller acts for no conversation: the request names none, so no agent
        # reads any chat's data for it (the retriever refuses conversation:<id>).
        request = TaskRequest(sender_id=self._sender_of(record), task_id=record.hmp_task_id,
                              message_id=record.hmp_task_id, intent=record.intent,
                              correlation_id=record.correlation_id, deadline_ms=deadline,
                              arguments={"text": inbound.text, **inbound.data})

        async def relay(msg: Any) -> None:
            try:
                note = bus.parse(msg.data)
            except Exception:
                return
            if not isinstance(note, LogEvent):
                return
            details = note.details
            said = " ".join(f"{k}={v}" for k, v in details.items() if k != "run_id")
            live.put(a2a.progress(record.task, f"{note.event_type}: {said}"
                                  if said else note.event_type))

        subscription = await bus.nc.subscribe(log_subject(record.hmp_task_id), cb=relay)
        try:
            try:
                response = await bus.request(record.agent, request)
            except BusOverloaded as exc:
                await self._end(record, live, a2a.finish(record.task, "failed",
                                                         {"error": str(exc)}, "OVERLOADED"))
                return
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        await self._end(record, live, a2a.finish(record.task, response.status,
                                                 response.result, response.error_code))

    async def _run_gateway(self, record: Record, inbound: a2a.Inbound, live: _Live) -> None:
        parts = self.gateway.parts
        text = inbound.text or (json.dumps(inbound.data, ensure_ascii=False)
                                if inbound.data else "")
        cid = f"api:a2a-{record.correlation_id}"
        msg = InboundMessage(channel="api", conversation_id=cid, user_id="a2a-client",
                             text=text, is_direct=True, mentions_bot=True,
                             platform_message_id=f"a2a:{inbound.message.message_id}",
                             attachments=await a2a_files.attachments(
                                 inbound, parts.inbox.stash, cid))
        since = time.time()
        routed = await parts.router.ingest(msg)
        if routed.status == "command":
            await self._end(record, live, a2a.finish(record.task, "success",
                                                     {"answer": routed.reply or ""}, None))
            return
        if routed.task_id is None:
            await self._end(record, live, a2a.finish(record.task, "failed", {
                "error": f"{routed.status}: {routed.reason}"}, "REFUSED"))
            return
        if record.round == 0:
            record.hmp_task_id = routed.task_id
            await self.tasks.save(record)
        store = parts.opened.store
        limit = since + (inbound.deadline_ms or self.gateway.settings.hermes_run_timeout
                         * 1000) / 1000
        while True:
            state = await store.load_task(record.hmp_task_id)
            if state is not None and state.updated_at >= since and (
                    state.status in TERMINAL or state.status in PAUSED):
                break
            if time.time() > limit:
                await self._end(record, live, a2a.finish(record.task, "failed", {
                    "error": "no answer in time"}, "TIMEOUT"))
                return
            await asyncio.sleep(_POLL)
        await self._end(record, live, gateway_events(record, state))

    async def _end(self, record: Record, live: _Live, events: list[Any]) -> None:
        """Keep the task's outcome (unless it was cancelled meanwhile) and stream it."""
        current = await self.tasks.load(record.task.id)
        if current is not None and current.state == a2a.pb.TASK_STATE_CANCELED:
            log.info("A2A task %s: an answer after its cancel was dropped", record.task.id)
            return
        await self.tasks.save(record)
        for event in events:
            live.put(event)
        self.push.notify(record, events)

    async def catch_up(self, record: Record) -> None:
        """A working task no process here follows (the one that did stopped): its outcome
        read from where it is kept, the gateway task's state or the agent's answer in
        HMP_REPLIES (the same outcome its own process would have written)."""
        events: list[Any] = []
        if record.agent == GATEWAY_AGENT:
            state = await self.gateway.parts.opened.store.load_task(record.hmp_task_id)
            if state is not None and (state.status in TERMINAL or state.status in PAUSED):
                events = gateway_events(record, state)
        elif self._bus is not None:
            from hub import TaskRequest

            kept = await self._bus.kept_answer(TaskRequest(
                sender_id=self._sender_of(record), task_id=record.hmp_task_id,
                intent=record.intent, deadline_ms=1), record.agent)
            if kept is not None:
                events = a2a.finish(record.task, kept.status, kept.result, kept.error_code)
        if events:
            await self.tasks.save(record)
            self.push.notify(record, events)

    def _sender_of(self, record: Record) -> str:
        """The sender id of a task's requests: its own, so its answers stay findable."""
        return f"{self.sender}.{record.task.id}"

    async def _stop_remote(self, record: Record) -> None:
        """What stops the work behind a cancelled task, where there is a way."""
        with contextlib.suppress(Exception):
            if record.agent == GATEWAY_AGENT:
                state = await self.gateway.parts.opened.store.load_task(record.hmp_task_id)
                if state is not None and state.status == "running":
                    await self.gateway.parts.queue.signal(state.conversation_id, "stop",
                                                          state.task_id)
            elif self.gateway.parts.workflows is not None:  # a run started by this task
                from hub.workflows.runs import run_id_of

                await self.gateway.parts.workflows.cancel(
                    run_id_of(self._sender_of(record), record.hmp_task_id))

    async def aclose(self) -> None:
        """Stop the tasks running here (their clients read them with GetTask later) and
        the push notifications still being sent."""
        for live in list(self._live.values()):
            if live.runner is not None:
                live.runner.cancel()
        await self.push.aclose()

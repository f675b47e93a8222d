"""Agents as plugins: a small base that knows nothing of NATS, and the runner that puts
one on the bus.

An ``Agent`` answers ``on_message(request)`` with a ``TaskResponse`` and may ``publish``
other messages (a log event, a context update). ``AgentRunner`` pulls the agent's requests
from its durable consumer (every running copy of one agent id pulls from the same one; the
hub's core makes it: ``enrolment``), tells the agent who sent each request and for which
conversation, as the bus proved it (``TaskRequest.requester``, ``.conversation``),
answers a request that breaks a rule with a failed response naming the field and the rule,
publishes the agent's answer, and only then acknowledges the request. A handler that
fails has its request redelivered with backoff; after the last delivery the request goes
to the dead-letter stream and the caller gets a failed response. A request whose copy died
before acknowledging is redelivered (to another copy) when its ack wait runs out.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout

from agent_core import tracing
from agent_core.background import Background

from .bus import TASKS, Bus, Headers, traceparent_of
from .deadlines import deadline_of
from .discovery import Heartbeats
from .enrolment import consumer_for
from .identity import check_agent_id
from .messages import Envelope, TaskRequest, TaskResponse, Violation
from .subjects import addressee_of, conversation_of, reply_subject, requester_of

log = logging.getLogger(__name__)

Publish = Callable[[str, Envelope], Awaitable[bool]]


class Agent(abc.ABC):
    """A hub agent: an id, the capabilities it offers (nouns), and how it answers."""

    agent_id: str
    capabilities: tuple[str, ...] = ()
    version: str = "0"
    #: Requests one copy handles at once (a TaskLoop agent: one; an agent that mostly
    #: waits on others, like the workflow executor: many).
    concurrency: int = 1
    #: Seconds a stopping copy lets its requests finish before it hands them back (they
    #: are redelivered to another copy at once).
    stop_grace: float = 10.0

    def __init__(self) -> None:
        #: How the request being handled (in this task) publishes.
        self._publish: contextvars.ContextVar[Publish] = contextvars.ContextVar(
            f"publish-{id(self)}")

    @abc.abstractmethod
    async def on_message(self, request: TaskRequest) -> TaskResponse:
        """Answer one request (``respond`` builds the response for it)."""

    async def publish(self, subject: str, message: Envelope) -> bool:
        """Send another message on the hub (the runner adds the request's headers)."""
        publish = self._publish.get(None)
        if publish is None:
            raise RuntimeError(f"agent {self.agent_id!r} is not handling a request on a hub")
        return await publish(subject, message)

    def respond(self, request: TaskRequest, status: str, result: dict[str, object] | None
                = None, *, error_code: str | None = None) -> TaskResponse:
        """The response to ``request`` from this agent."""
        return TaskResponse.model_validate({
            "sender_id": self.agent_id, "receiver_id": request.sender_id,
            "correlation_id": request.correlation_id, "task_id": request.task_id,
            "status": status, "result": result or {}, "error_code": error_code})


class AgentRunner:
    """Runs one copy of an agent on the bus until stopped."""

    def __init__(self, bus: Bus, agent: Agent) -> None:
        self.bus = bus
        self.agent = agent
        self.handled = 0
        #: Requests being handled now.
        self.in_hand = 0
        self.heartbeats = Heartbeats(bus, agent.agent_id, lambda: agent.capabilities,
                                     version=agent.version,
                                     load=lambda: 100.0 * self.in_hand / agent.concurrency)
        self._service: Any = None
        self._loop = Background()
        self._slots = asyncio.Semaphore(max(1, agent.concurrency))
        self._handlers: set[asyncio.Task[None]] = set()
        self._handing_back = False
        #: The consumer's (the core made it with its settings).
        self._ack_wait = bus.settings.hub_ack_wait
        self._max_deliver = bus.settings.hub_max_deliver

    @property
    def busy(self) -> bool:
        """Whether every slot of this copy is taken."""
        return self.in_hand >= self.agent.concurrency

    async def start(self) -> None:
        """Bind to the agent's durable consumer and start pulling."""
        consumer = await consumer_for(self.bus, check_agent_id(self.agent.agent_id))
        self._ack_wait = float(consumer.get("ack_wait") or self._ack_wait)
        self._max_deliver = int(consumer.get("max_deliver") or self._max_deliver)
        self._subscription = await self.bus.js.pull_subscribe_bind(
            durable=str(consumer["durable"]), stream=TASKS)
        self._loop.start(self._pull(), name=f"agent-{self.agent.agent_id}")
        self.heartbeats.start()
        self._service = await self._serve_status()

    def abandon(self) -> None:
        """Stop pulling at once, leaving the requests in hand unanswered and
        unacknowledged (what a crash does: they are redelivered after the ack wait)."""
        self._loop.cancel()
        for handler in list(self._handlers):
            handler.cancel()
        self.heartbeats.abandon()

    async def _serve_status(self) -> Any:
        """This copy in the NATS service API: ``$SRV.PING``, ``$SRV.INFO`` and
        ``$SRV.STATS`` find it by its agent id, and its ``status`` endpoint
        (``hermes.agent.<id>.status``) says what it has handled."""
        from nats import micro
        from nats.micro.request import Request
        from nats.micro.service import ServiceConfig

        agent = self.agent
        service = await micro.add_service(self.bus.nc, ServiceConfig(
            name=service_name(agent.agent_id), version=_semver(agent.version),
            description=f"hermes hub agent {agent.agent_id}",
            metadata={"agent_id": agent.agent_id,
                      "capabilities": ",".join(agent.capabilities)}))

        async def status(request: Request) -> None:
            await request.respond(json.dumps({
                "agent_id": agent.agent_id, "handled": self.handled, "busy": self.busy,
                "instance": self.heartbeats.instance}).encode())

        await service.add_endpoint(name="status", subject=f"hermes.agent.{agent.agent_id}"
                                   ".status", handler=status)
        return service

    async def stop(self) -> None:
        """Stop pulling; a request being handled finishes first."""
        await self.heartbeats.stop()
        if self._service is not None:
            with contextlib.suppress(Exception):  # its connection may be gone already
                await self._service.stop()
        await self._loop.stop(grace=10)
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=self.agent.stop_grace)
            self._handing_back = True
            for handler in list(self._handlers):  # handed back: redelivered elsewhere
                handler.cancel()
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=5)
        with contextlib.suppress(Exception):  # its connection may be gone already
            await self._subscription.unsubscribe()

    async def _pull(self) -> None:
        while self._loop.running:
            await self._slots.acquire()
            try:
                messages = await self._subscription.fetch(1, timeout=1.0)
            except Exception as exc:
                self._slots.release()
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # nats-py turns a cancellation inside fetch into its own timeout.
                    raise asyncio.CancelledError from exc
                if not isinstance(exc, NatsTimeout):  # the server is away: keep trying
                    log.warning("agent %s cannot pull: %s", self.agent.agent_id, exc)
                    await self._loop.pause(1.0)
                continue
            for msg in messages:
                handler = asyncio.create_task(self._hold(msg),
                                              name=f"{self.agent.agent_id}-request")
                self._handlers.add(handler)
                handler.add_done_callback(self._handlers.discard)

    async def _hold(self, msg: Msg) -> None:
        """Handle one request, telling JetStream it is in progress every third of the ack
        wait: a long task is not redelivered while this copy lives."""
        self.in_hand += 1
        keep = asyncio.create_task(self._in_progress(msg))
        try:
            await self._handle(msg)
        except asyncio.CancelledError:
            if self._handing_back:  # a stop, not a crash: another copy takes it now
                with contextlib.suppress(Exception):
                    await msg.nak()
            raise
        except Exception:
            log.exception("agent %s: a request's handling failed", self.agent.agent_id)
        finally:
            keep.cancel()
            self.in_hand -= 1
            self._slots.release()

    async def _in_progress(self, msg: Msg) -> None:
        every = max(0.2, self._ack_wait / 3)
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    async def _handle(self, msg: Msg) -> None:
        try:
            message = await self.bus.read(msg)
        except Violation as exc:
            await self._refuse(msg, exc)
            return
        headers = Headers.of(msg, message)
        if not isinstance(message, TaskRequest):
            await self._refuse(msg, Violation("type", f"{self.agent.agent_id!r} takes "
                                              "task_request messages only",
                                              message_id=message.message_id,
                                              sender_id=message.sender_id))
            return
        message.received(requester_of(msg.subject), conversation_of(msg),
                         addressee_of(msg.subject))

        async def publish(subject: str, envelope: Envelope) -> bool:
            return await self.bus.publish(subject, envelope, headers)

        self.agent._publish.set(publish)  # this handler's task only
        try:
            with tracing.span(f"hub task_request {self.agent.agent_id}", {
                    "hmp.intent": message.intent, "hmp.correlation_id": headers.correlation_id,
                    "hmp.sender_id": message.sender_id, "hmp.task_id": message.task_id,
                    "hmp.delivery": msg.metadata.num_delivered}, parent=traceparent_of(msg),
                    kind="consumer") as span:
                async with asyncio.timeout(max(0.0, deadline_of(message) - time.time())):
                    response = await self.agent.on_message(message)
                span.set_attribute("hmp.status", response.status)
        except TimeoutError:
            # The hub has answered TIMEOUT; an answer now would contradict it.
            log.info("agent %s dropped task %s: its deadline passed", self.agent.agent_id,
                     message.task_id)
            await msg.ack()
            return
        except Exception as exc:
            await self._failed(msg, message, headers, exc)
            return
        await self._answer(reply_subject(self.agent.agent_id, message.sender_id), response,
                           headers, deadline_of(message))
        await msg.ack()
        self.handled += 1

    async def _answer(self, subject: str, response: TaskResponse, headers: Headers,
                      deadline: float) -> None:
        """Publish the answer, tried again until the request's deadline while the bus
        cannot take it (on a NATS cluster, the server this copy talks to was lost and the
        client is moving to another; nats-py cancels the publishes it had in flight): the
        same message id is kept once, and the answer is not lost to a redelivery after the
        ack wait, past the deadline."""
        pause = 0.05
        while True:
            try:
                await self.bus.publish(subject, response, headers)
                return
            except (Exception, asyncio.CancelledError) as exc:
                task = asyncio.current_task()
                if isinstance(exc, asyncio.CancelledError) and task is not None \
                        and task.cancelling():
                    raise  # this handler itself is cancelled
                if time.time() + pause > deadline:
                    raise
                log.info("agent %s: answer to %s not published yet (%s); again",
                         self.agent.agent_id, response.task_id, type(exc).__name__)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def _failed(self, msg: Msg, request: TaskRequest, headers: Headers,
                      exc: Exception) -> None:
        delivered = msg.metadata.num_delivered
        log.warning("agent %s failed on %s (delivery %d): %s: %s", self.agent.agent_id,
                    request.task_id, delivered, type(exc).__name__, exc)
        if delivered < self._max_deliver:
            await msg.nak(delay=min(30.0, 0.5 * 2 ** (delivered - 1)))
            return
        await self.bus.publish(f"dead.{self.agent.agent_id}", request, headers)
        failed = self.agent.respond(request, "failed", {
            "error": f"{type(exc).__name__} on every delivery", "deliveries": delivered},
            error_code="AGENT_FAILED")
        await self.bus.publish(reply_subject(self.agent.agent_id, request.sender_id), failed,
                               headers)
        await msg.term()

    async def _refuse(self, msg: Msg, violation: Violation) -> None:
        """A request that breaks a rule: answered failed (the field and the rule), not
        redelivered."""
        sender = violation.sender_id
        if sender:
            correlation = (msg.headers or {}).get("Correlation-ID") or violation.message_id \
                or "unknown"
            await self.bus.publish(reply_subject(self.agent.agent_id, sender), TaskResponse(
                sender_id=self.agent.agent_id, receiver_id=sender, correlation_id=correlation,
                task_id=_task_id(msg.data) or violation.message_id or "unknown", status="failed",
                error_code="INVALID_MESSAGE",
                result={"field": violation.field, "rule": violation.rule}),
                Headers(correlation, correlation))
        else:
            log.warning("agent %s dropped a message with no sender: %s", self.agent.agent_id,
                        violation)
        await msg.term()


def service_name(agent_id: str) -> str:
    """``agent_id`` as a NATS service name (letters, digits, - and _)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in agent_id)


def _semver(version: str) -> str:
    """A version as the service API wants it (semantic: 1.2 becomes 1.2.0)."""
    parts = [p for p in version.split(".") if p.isdigit()][:3]
    return ".".join([*parts, *["0"] * (3 - len(parts))])


def _task_id(raw: bytes) -> str | None:
    """The task id a message that broke a rule still names, if any."""
    with contextlib.suppress(ValueError, AttributeError):
        value = json.loads(raw).get("task_id")
        return value if isinstance(value, str) and value else None
    return None

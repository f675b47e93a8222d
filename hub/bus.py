"""The bus: HMP messages on NATS JetStream.

Subjects: ``task.request.<agent_id>.<sender identity>`` (stream ``HMP_TASKS``: persisted,
explicit ack, one durable consumer per agent id, which every running copy of the agent pulls
from, so a second copy scales it out), answers on ``reply.<responder>.<sender_id>`` (stream
``HMP_REPLIES``, also delivered to the waiting caller), requests that failed every delivery
on ``dead.<agent_id>`` (stream ``HMP_DEAD``). The identity tokens are what the server
enforces (``identity``): a requester takes an answer only from the agent it asked (or the
hub's own TIMEOUT), whatever the body's ``sender_id`` says. Every publish carries
``Nats-Msg-Id`` (the message id: JetStream drops a second publish of it within the duplicate
window) and the ``Correlation-ID`` and ``Trace-ID`` headers, which every hop copies onto what
it sends; a request the core sends for a conversation carries ``Hmp-Conversation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from agent_core import tracing
from agent_core.ids import new_id

from .connection import open_connection, shared_identity
from .errors import BusOverloaded
from .identity import CORE, durable_of
from .messages import Envelope, Message, TaskRequest, TaskResponse, Violation, parse
from .schemas import SchemaRegistry, seed_embedded
from .server import EmbeddedNats
from .settings import HubSettings
from .subjects import (
    CONVERSATION,
    answers_for,
    replies_to,
    reply_subject,
    request_subject,
    responders,
)

log = logging.getLogger(__name__)

TASKS, REPLIES, DEAD, BAD_JSON = "HMP_TASKS", "HMP_REPLIES", "HMP_DEAD", "HMP_BAD_JSON"
#: Tool calls as the tool service received them (calls are request-reply on tool.call.*).
TOOLS = "HMP_TOOLS"
#: log_event messages about a task as it runs (``log.<task_id>``): a workflow's steps, an
#: agent's tool calls; what the A2A edge streams.
LOG = "HMP_LOG"
#: Each stream's subjects.
SUBJECTS = {TASKS: "task.request.>", REPLIES: "reply.>", DEAD: "dead.>",
            BAD_JSON: "bad_json_log.>", TOOLS: "tool.kept.>", LOG: "log.>"}
CORRELATION, TRACE, MSG_ID = "Correlation-ID", "Trace-ID", "Nats-Msg-Id"
_DUPLICATE_WINDOW = 120.0
#: A request is sent again (the same message id) only this long after it was first sent:
#: well inside the duplicate window, so JetStream stores it once.
RESEND_WINDOW = 90.0
#: Seconds past a deadline a caller waits for the hub's own TIMEOUT.
_GRACE = 2.0
#: Seconds between looks for an answer missed while the connection moved (``request``).
_RECHECK = 1.0
#: Seconds a known request-stream depth is trusted while it is far below the soft limit.
_DEPTH_TTL = 0.5


@dataclass(frozen=True, slots=True)
class Headers:
    """The headers a hop copies onto everything it sends."""

    correlation_id: str
    trace_id: str

    @classmethod
    def of(cls, msg: Msg, envelope: Envelope | None = None) -> Headers:
        """Those of a received message (falling back to its envelope)."""
        headers = msg.headers or {}
        correlation = headers.get(CORRELATION) or (envelope.correlation_id if envelope
                                                   else new_id())
        return cls(correlation, headers.get(TRACE) or correlation)


def with_trace(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` and, when traces are exported, the current span's traceparent: the
    receiver's spans continue the sender's trace."""
    parent = tracing.traceparent()
    return {**headers, tracing.TRACEPARENT: parent} if parent else headers


def traceparent_of(msg: Msg) -> str | None:
    """The sender's span, as the message's headers carry it."""
    return (msg.headers or {}).get(tracing.TRACEPARENT)


class Bus:
    """A connection to the hub: publish HMP messages, wait for answers."""

    def __init__(self, nc: Client, settings: HubSettings,
                 embedded: EmbeddedNats | None = None, *, identity: str = CORE) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.settings = settings
        self.embedded = embedded
        #: Who this connection is on the hub (``identity``).
        self.identity = identity
        #: agent id -> (requests waiting when last asked, when, published here since)
        self._depths: dict[str, tuple[int, float, int]] = {}
        #: The published schemas, once ``connect`` has opened them.
        self.schemas: SchemaRegistry | None = None

    @property
    def core(self) -> bool:
        """Whether this is the hub's core (which keeps the streams and runs the services)."""
        return self.identity == CORE

    @classmethod
    async def connect(cls, settings: HubSettings, *, identity: str = CORE) -> Bus:
        """Connect as ``identity`` to NATS_URL, or start (or reuse) the embedded server;
        as the core, the streams ready."""
        nc, embedded = await open_connection(settings, identity)
        bus = cls(nc, settings, embedded, identity=identity)
        try:
            shared = shared_identity(settings)
            if bus.core:
                await bus.ensure_streams()
                if shared:
                    log.warning("NATS_URL without NATS_CREDS_FILE: every client holding this "
                                "login acts as the hub's core (no agent identities; see "
                                "docs/hub.md, Identities)")
                elif embedded is not None:
                    await seed_embedded(bus.js, settings)
            bus.schemas = await SchemaRegistry.open(bus.js, seed=shared and bus.core,
                                                     replicas=settings.hub_replicas)
        except BaseException:
            await bus.close()
            raise
        return bus

    def request_subject(self, agent_id: str) -> str:
        """Where this connection sends requests for ``agent_id``."""
        return request_subject(agent_id, self.identity)

    async def ensure_streams(self) -> None:
        """The hub's streams, created or brought to this configuration."""
        retention = self.settings.hub_request_retention
        for name, subject in SUBJECTS.items():
            config = StreamConfig(name=name, subjects=[subject],
                                  retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                                  max_age=retention if name in (TASKS, REPLIES, TOOLS, LOG)
                                  else None,
                                  duplicate_window=_DUPLICATE_WINDOW,
                                  num_replicas=self.settings.hub_replicas)
            try:
                await self.js.add_stream(config)
            except BadRequestError:
                await self.js.update_stream(config)

    async def pending(self, agent_id: str) -> int:
        """Requests waiting for ``agent_id``: not yet delivered, or delivered and not yet
        acknowledged (0 before its first copy ever started)."""
        try:
            info = await self.js.consumer_info(TASKS, durable_of(agent_id))
        except NotFoundError:
            return 0
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    async def admit(self, agent_id: str) -> float:
        """Backpressure before a request to ``agent_id``: the seconds to slow down by
        (above HUB_SOFT_LIMIT waiting requests, growing to a second at the hard limit);
        BusOverloaded above HUB_HARD_LIMIT."""
        soft, hard = self.settings.hub_soft_limit, self.settings.hub_hard_limit
        known, at, since = self._depths.get(agent_id, (0, -1.0, 0))
        # The depth is asked again (a round trip) when it is old, or when it may be near
        # the soft limit counting what this process published since.
        if at < 0 or time.monotonic() - at > _DEPTH_TTL or known + since >= soft:
            known, since = await self.pending(agent_id), 0
            at = time.monotonic()
        waiting = known + since
        self._depths[agent_id] = (known, at, since + 1)
        if waiting >= hard:
            raise BusOverloaded(agent_id, waiting, hard)
        if waiting < soft:
            return 0.0
        return min(1.0, (waiting - soft + 1) / max(1, hard - soft))

    async def publish(self, subject: str, message: Envelope, headers: Headers) -> bool:
        """Persist ``message`` on ``subject``; False when JetStream already had it (the
        same message id within the duplicate window)."""
        sent = {MSG_ID: message.message_id, CORRELATION: headers.correlation_id,
                TRACE: headers.trace_id}
        if isinstance(message, TaskRequest) and message.conversation:
            sent[CONVERSATION] = quote(message.conversation, safe="")
        ack = await self.js.publish(subject, message.to_json(), headers=with_trace(sent))
        if ack.duplicate:
            log.info("duplicate publish of %s on %s dropped", message.message_id, subject)
        return not ack.duplicate

    async def tell(self, subject: str, message: Envelope, headers: Headers) -> None:
        """Publish ``message`` without waiting for JetStream's acknowledgement (a stream on
        ``subject`` still keeps it; a lost one is not retried): for progress notes, whose
        sender must not wait on them."""
        await self.nc.publish(subject, message.to_json(), headers=with_trace({
            MSG_ID: message.message_id, CORRELATION: headers.correlation_id,
            TRACE: headers.trace_id}))

    def parse(self, raw: bytes) -> Message:
        """``raw`` read as an HMP message, against the latest published schemas."""
        return parse(raw, self.schemas.check if self.schemas is not None else None)

    async def read(self, msg: Msg) -> Message:
        """The HMP message ``msg`` carries. JSON an agent broke (a missing brace, single
        quotes) is repaired when json-repair can read it; the original is kept in the
        bad_json_log stream with who sent it. Raises Violation for what stays unreadable
        or breaks a rule."""
        check = self.schemas.check if self.schemas is not None else None
        try:
            return parse(msg.data, check)
        except Violation as exc:
            if exc.field != "body" or not exc.rule.startswith("is not JSON"):
                raise
            repaired = _repair(msg.data)
            if repaired is None:
                raise
        sender = str(repaired.get("sender_id") or (msg.headers or {}).get(CORRELATION, "?"))
        await self.nc.publish(f"bad_json_log.{_token(sender)}", msg.data, headers={
            "Sender": sender, "Subject": msg.subject, **{
                k: v for k, v in (msg.headers or {}).items() if k in (CORRELATION, TRACE)}})
        await self.nc.flush()
        log.warning("repaired broken JSON from %s on %s", sender, msg.subject)
        return parse(repaired, check)

    async def kept_answer(self, request: TaskRequest, agent: str) -> TaskResponse | None:
        """The answer of ``agent`` (or the hub's TIMEOUT) to ``request`` already kept in
        HMP_REPLIES, when its sender id is its own (one per request) and the answer is the
        last there."""
        msg = None
        for responder in responders(agent):
            try:
                found = await self.js.get_last_msg(REPLIES, reply_subject(
                    responder, request.sender_id))
            except NotFoundError:
                continue
            if msg is None or (found.seq or 0) > (msg.seq or 0):
                msg = found
        if msg is None:
            return None
        try:
            answer = self.parse(msg.data or b"")
        except Violation:
            return None
        return answer if isinstance(answer, TaskResponse) and \
            answer.task_id == request.task_id else None

    async def request(self, receiver: str, request: TaskRequest, *,
                      resume: bool = False) -> TaskResponse:
        """Send ``request`` to agent ``receiver`` and wait for its answer until the
        request's deadline; then the answer is a failed response with TIMEOUT.
        ``resume``: the same request was sent before by a process that died waiting (its
        sender id is its own): an answer that came meanwhile is read back from the stream,
        and the request is sent again only inside JetStream's duplicate window (the same
        message id is stored once), so it is never handled twice."""
        headers = Headers(request.correlation_id, request.correlation_id)
        answered: asyncio.Future[TaskResponse] = asyncio.get_running_loop().create_future()

        async def on_reply(msg: Msg) -> None:
            if not answers_for(msg, receiver, request.task_id):
                return
            try:
                message = await self.read(msg)
            except Violation as exc:
                log.warning("unreadable answer for %s: %s", request.sender_id, exc)
                return
            if isinstance(message, TaskResponse) and message.task_id == request.task_id \
                    and not answered.done():
                answered.set_result(message)

        pause = 0.0 if resume else await self.admit(receiver)  # before anything is sent
        if pause:
            await asyncio.sleep(pause)
        subscription = await self.nc.subscribe(replies_to(request.sender_id), cb=on_reply)
        try:
            kept = await self.kept_answer(request, receiver) if resume else None
            if kept is not None:
                return kept
            if not resume or time.time() - request.timestamp < RESEND_WINDOW:
                await self.publish(self.request_subject(receiver), request.model_copy(
                    update={"receiver_id": receiver}), headers)
            # The hub's deadline watch answers TIMEOUT at the deadline; this wait is the
            # fallback for a hub without one.
            left = request.timestamp + request.deadline_ms / 1000 + _GRACE - time.time()
            async with asyncio.timeout(max(0.0, left) if resume else
                                       request.deadline_ms / 1000 + _GRACE):
                return await self._answer_of(answered, request, receiver)
        except TimeoutError:
            return TaskResponse(sender_id="hub-client", receiver_id=request.sender_id,
                                correlation_id=request.correlation_id,
                                task_id=request.task_id, status="failed", error_code="TIMEOUT",
                                result={"error": f"no answer within {request.deadline_ms} ms"})
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def _answer_of(self, answered: asyncio.Future[TaskResponse], request: TaskRequest,
                         receiver: str) -> TaskResponse:
        """The answer, as the subscription hands it over; after this connection moved to
        another server (a server of a cluster lost), read back from HMP_REPLIES too: an
        answer published while it reconnected never reached the subscription."""
        seen = self.nc.stats["reconnects"]
        while True:
            done, _ = await asyncio.wait({answered}, timeout=_RECHECK)
            if done:
                return answered.result()
            if self.nc.stats["reconnects"] != seen and self.nc.is_connected:
                seen = self.nc.stats["reconnects"]
                with contextlib.suppress(Exception):
                    kept = await self.kept_answer(request, receiver)
                    if kept is not None:
                        return kept

    async def close(self) -> None:
        """Close the connection (every publish was acknowledged when it returned); stop
        the embedded server if this process started it."""
        if self.schemas is not None:
            await self.schemas.close()
        with contextlib.suppress(Exception):
            await self.nc.close()
        if self.embedded is not None:
            await self.embedded.stop()


def _repair(raw: bytes) -> dict[str, Any] | None:
    """``raw`` read by json-repair, when that gives an object."""
    import json_repair

    try:
        value = json_repair.loads(raw.decode("utf-8", errors="replace"))
    except Exception:
        return None
    return value if isinstance(value, dict) and value else None


def _token(value: str) -> str:
    """``value`` as one subject token."""
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in value)[:64] or "unknown"

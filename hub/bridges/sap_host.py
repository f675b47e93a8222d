"""Our agents as agents of the Synadia Agent Protocol: every live hub agent (the workflow
executor and the remote A2A agents the hub fronts included) is registered in the ``agents``
micro service with the stock host SDK (``synadia-ai-agent-service``), as
``agents.prompt.<agent>.<owner>.default`` (``names.protocol_agent``; the owner is
HUB_AGENT_PROTOCOL_OWNER), with its heartbeats and ``status`` endpoint, its metadata naming
its hub id and capabilities.

A prompt becomes a ``task_request`` from the bridge (never the core: it acts for no
conversation): the prompt is ``arguments.text``, its attachments ``arguments.attachments``,
and the envelope's extension fields ``intent`` (default: the agent's first capability),
``arguments`` (more arguments) and ``deadline_ms`` (default HERMES_RUN_TIMEOUT, at most
300 s) say the rest; one that is malformed is refused with 400 before the ack. The
answer streams back: the ack first, each progress note of the task as a status chunk, the
answer as a response chunk (``result.answer``, or the result as JSON), the terminator. A
``partial`` answer asks the caller its question mid-stream (the protocol's query) and the
reply continues the task; a ``failed`` one is an error frame (``Nats-Service-Error-Code``:
400 for bad arguments, 403, 404, 429, else 500; ``<error_code>: <error>``). Who sent a
prompt is verified where the protocol defines it (a signed ``Agent-Sender``); an unsigned
prompt is refused (401) unless HUB_AGENT_PROTOCOL_UNSIGNED.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from nats.aio.msg import Msg
from synadia_ai.agent_service import (
    AgentService,
    CallNext,
    PromptStream,
    RequestInterceptorContext,
    RequestRejectedError,
    ServiceIdentity,
)
from synadia_ai.agents import (
    Attachment,
    Envelope,
    QueryTimeout,
    ResponseChunk,
    SenderSigner,
    StatusChunk,
    VerifiedSender,
    format_sender,
)

from agent_core.background import Background, repeating
from agent_core.ids import new_id

from ..bus import Bus
from ..discovery import discover
from ..errors import BusOverloaded
from ..identity import BRIDGE
from ..messages import MAX_DEADLINE_MS, LogEvent, TaskRequest, TaskResponse
from ..subjects import log_subject
from .names import SAP, protocol_agent

log = logging.getLogger(__name__)

SESSION = "default"
#: Questions a prompt may answer before its task must end.
MAX_FOLLOW_UPS = 3
#: HMP error codes and the protocol's (§9) codes for them; anything else is 500.
_CODES = {"INVALID_MESSAGE": 400, "INVALID_ARGUMENTS": 400, "PERMISSION": 403,
          "NO_AGENT": 404, "UNKNOWN_WORKFLOW": 404, "OVERLOADED": 429}


@dataclass(frozen=True, slots=True)
class Answer:
    """How a local agent's task ended (as an HMP answer would say it)."""

    status: Literal["success", "partial", "failed"]
    result: dict[str, Any]
    error_code: str | None = None


class LocalAgent(Protocol):
    """An agent of this process that is no hub agent on the bus (the gateway's own),
    registered in the protocol too. ``answer`` runs one prompt (and, with the same
    ``thread``, each reply to a question it asked); ``sender`` is the verified sender's
    NATS user key, None for an unsigned prompt; ``progress`` streams a note of what it
    does to the caller (a status chunk)."""

    agent_id: str
    capabilities: tuple[str, ...]

    async def answer(self, text: str, *, attachments: list[dict[str, str]], thread: str,
                     sender: str | None, deadline_ms: int,
                     progress: Callable[[str], Awaitable[None]]) -> Answer: ...


@dataclass(frozen=True, slots=True)
class HostOptions:
    """How our agents appear in the protocol."""

    owner: str
    unsigned: bool
    heartbeat: int
    default_deadline_ms: int
    signer: SenderSigner | None = None


class _Checked:
    """Refuses (400, before the ack) a prompt whose extension fields are malformed."""

    async def around_request(self, ctx: RequestInterceptorContext, call_next: CallNext
                             ) -> None:
        extras = ctx.envelope.extras
        intent, arguments = extras.get("intent"), extras.get("arguments")
        deadline = extras.get("deadline_ms")
        if intent is not None and (not isinstance(intent, str) or not 0 < len(intent) <= 200):
            raise RequestRejectedError(400, "intent must be a capability's name")
        if arguments is not None and not isinstance(arguments, dict):
            raise RequestRejectedError(400, "arguments must be an object")
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(
                deadline, int) or not 1000 <= deadline <= MAX_DEADLINE_MS):
            raise RequestRejectedError(400, f"deadline_ms must be 1000 to {MAX_DEADLINE_MS}")
        if log.isEnabledFor(logging.INFO):
            log.info("protocol prompt on %s from %s", ctx.subject, format_sender(ctx.sender))
        await call_next()


def answer_text(result: dict[str, Any]) -> str:
    """What an answer says: its ``answer`` (or its output's), else the result as JSON."""
    for holder in (result, result.get("output")):
        if isinstance(holder, dict) and isinstance(holder.get("answer"), str):
            return str(holder["answer"])
    return json.dumps(result, ensure_ascii=False, default=str)


class ProtocolHost:
    """Registers each live hub agent in the protocol, and serves its prompts."""

    def __init__(self, bus: Bus, options: HostOptions, *, every: float,
                 local: Sequence[LocalAgent] = ()) -> None:
        self.bus = bus
        self.options = options
        self.every = every
        self.local = {agent.agent_id: agent for agent in local}
        #: hub agent id -> its registration
        self.hosted: dict[str, AgentService] = {}
        self._capabilities: dict[str, tuple[str, ...]] = {}
        self._loop: Background | None = None

    async def start(self) -> None:
        for agent in self.local.values():
            await self._host(agent.agent_id, agent.capabilities)
        with contextlib.suppress(Exception):  # discovery may not answer yet
            await self.scan()
        self._loop = repeating(self.scan, self.every, "protocol-host")

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()
        for agent_id in list(self.hosted):
            await self._drop(agent_id)

    async def scan(self) -> None:
        """Register the live agents not yet registered; drop those gone."""
        live = {c.agent_id: c for c in await discover(self.bus, "*")
                if not c.agent_id.startswith(SAP) and c.agent_id not in self.local}
        for agent_id, candidate in live.items():
            if self._capabilities.get(agent_id) == candidate.capabilities:
                continue
            if agent_id in self.hosted:  # its capabilities changed: registered again
                await self._drop(agent_id)
            try:
                await self._host(agent_id, candidate.capabilities)
            except Exception as exc:
                log.warning("%s not registered in the protocol: %s: %s", agent_id,
                            type(exc).__name__, exc)
        for agent_id in set(self.hosted) - set(live) - set(self.local):
            await self._drop(agent_id)

    async def _host(self, agent_id: str, capabilities: tuple[str, ...]) -> None:
        options = self.options
        token = protocol_agent(agent_id)
        if any(protocol_agent(other) == token for other in self.hosted):
            log.warning("%s is not registered in the protocol: another agent has the token "
                        "%r", agent_id, token)
            return
        service = AgentService(
            agent=token, owner=options.owner, session_name=SESSION, nc=self.bus.nc,
            description=f"hermes hub agent {agent_id}: {', '.join(capabilities)}",
            heartbeat_interval_s=options.heartbeat,
            extra_metadata={"hmp_agent_id": agent_id, "capabilities": ",".join(capabilities)},
            identity=ServiceIdentity(signer=options.signer) if options.signer else None,
            min_sender_trust="any" if options.unsigned else "signed",
            interceptors=[_Checked()], max_concurrent_prompts=32)
        service.on_prompt(functools.partial(self.serve, agent_id, capabilities))
        await service.start()
        self.hosted[agent_id] = service
        self._capabilities[agent_id] = capabilities
        log.info("%s is the protocol agent %s", agent_id, service.subject.prompt)

    async def _drop(self, agent_id: str) -> None:
        service = self.hosted.pop(agent_id, None)
        self._capabilities.pop(agent_id, None)
        if service is not None:
            with contextlib.suppress(Exception):
                await service.stop()

    async def serve(self, agent_id: str, capabilities: tuple[str, ...], envelope: Envelope,
                    stream: PromptStream) -> None:
        """One prompt: the task's requests (a follow-up for each question answered),
        progress as status chunks, the answer or an error frame."""
        extras = envelope.extras  # checked before the ack (_Checked)
        intent = str(extras.get("intent") or (capabilities[0] if capabilities else "chat"))
        deadline = extras.get("deadline_ms")
        limit = time.time() + (deadline if isinstance(deadline, int)
                               else self.options.default_deadline_ms) / 1000
        given = extras.get("arguments")
        arguments: dict[str, Any] = {**(given if isinstance(given, dict) else {}),
                                     "text": envelope.prompt}
        if envelope.attachments:
            arguments["attachments"] = [a.model_dump() for a in envelope.attachments]
        sender_id, correlation = f"{BRIDGE}.{new_id()}", new_id()
        for _ in range(MAX_FOLLOW_UPS + 1):
            left = limit - time.time()
            if left < 0.001:
                break
            response = await self._ask(agent_id, stream, TaskRequest(
                sender_id=sender_id, intent=intent, arguments=arguments,
                deadline_ms=max(1, int(left * 1000)), correlation_id=correlation))
            result = response.result
            if response.status == "success":
                files = result.get("attachments")
                await stream.send(ResponseChunk(text=answer_text(result), attachments=[
                    Attachment.model_validate(f) for f in files] if isinstance(
                        files, list) and files else None))
                return
            if response.status == "failed":
                error = result.get("error") or result.get("rule") or ""
                raise RequestRejectedError(_CODES.get(response.error_code or "", 500),
                                           f"{response.error_code}: {error}")
            question = str(result.get("question") or result.get("ask")
                           or "More input is needed.")
            try:
                reply = await stream.ask(question, timeout=max(0.1, limit - time.time()))
            except QueryTimeout:
                raise RequestRejectedError(500, "TIMEOUT: the question was not answered "
                                           "in time") from None
            steps = result.get("next_steps") or [{}]
            step = steps[0] if isinstance(steps[0], dict) else {}
            intent = str(step.get("intent") or intent)
            more = step.get("arguments")
            arguments = {**(more if isinstance(more, dict) else {}), "text": reply.prompt}
        raise RequestRejectedError(500, "TIMEOUT: no answer within the deadline")

    async def _ask(self, agent_id: str, stream: PromptStream, request: TaskRequest
                   ) -> TaskResponse:
        """One request to ``agent_id``; its progress notes streamed as status chunks (a
        local agent runs it here)."""
        local = self.local.get(agent_id)
        if local is not None:
            sender = stream.sender
            answer = await local.answer(
                str(request.arguments.get("text", "")),
                attachments=list(request.arguments.get("attachments") or []),
                thread=request.sender_id.rsplit(".", 1)[-1],
                sender=sender.id.user if isinstance(sender, VerifiedSender) else None,
                deadline_ms=request.deadline_ms, progress=_progress(stream))
            return TaskResponse(sender_id=agent_id, task_id=request.task_id,
                                status=answer.status, result=answer.result,
                                error_code=answer.error_code)
        relay = _relay(self.bus, stream)
        notes = await self.bus.nc.subscribe(log_subject(request.task_id), cb=relay)
        try:
            return await self.bus.request(agent_id, request)
        except BusOverloaded as exc:
            raise RequestRejectedError(429, f"OVERLOADED: {exc}") from None
        finally:
            with contextlib.suppress(Exception):
                await notes.unsubscribe()


def _progress(stream: PromptStream) -> Callable[[str], Awaitable[None]]:
    """A local agent's progress notes, as status chunks (a caller gone is no error)."""

    async def progress(note: str) -> None:
        with contextlib.suppress(Exception):
            await stream.send(StatusChunk(status=note))

    return progress


def _relay(bus: Bus, stream: PromptStream) -> Callable[[Msg], Awaitable[None]]:
    """A subscriber that streams a task's progress notes as status chunks."""

    async def relay(msg: Msg) -> None:
        try:
            note = bus.parse(msg.data)
        except Exception:
            return
        if isinstance(note, LogEvent):
            said = " ".join(f"{k}={v}" for k, v in note.details.items() if k != "run_id")
            with contextlib.suppress(Exception):
                await stream.send(StatusChunk(status=f"{note.event_type}: {said}"
                                              if said else note.event_type))

    return relay

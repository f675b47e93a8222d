"""What the hub answers itself: ``tool_call`` (its allowlisted tools) and ``context_update``.

Both are request-reply on core NATS, in a queue group, so any copy of the hub's services
answers (``hermes-gateway hub``, or the gateway with ``HERMES_HUB``); a caller with no
service running gets a clear error at once (NATS says there are no responders). Every
answer is a ``task_response`` whose ``task_id`` is the call's ``message_id``, sent to the
caller and kept in ``HMP_REPLIES``; a call that breaks a rule is answered ``failed`` with
``INVALID_MESSAGE`` and the field and the rule, like a request to an agent.

- ``tool.call.<tool_name>``: the call is kept in ``HMP_TOOLS`` (``tool.kept.<name>``); a
  tool not on the allowlist (``HUB_TOOLS``) is refused with ``TOOL_NOT_ALLOWED``; an
  allowlisted one runs through the runtime's tool executor (schema, timeout, breaker), unattended
  (a tool that needs a human's approval is refused) in a sandbox of the caller's. The same
  message id within two minutes runs once: a second delivery gets the first one's answer.
- ``context.update.<context_id>``: kept in ``HMP_CONTEXT`` unless a newer version is
  (``Contexts``); the answer says whether it was kept and which version is stored.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
from pathlib import Path
from typing import Any, ClassVar

from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from agent_core import tracing
from agent_core.tools import ToolContext, ToolExecutor, ToolRegistry

from .bus import Bus, Headers, traceparent_of, with_trace
from .contexts import Contexts
from .messages import ContextUpdate, Envelope, TaskResponse, ToolCall, Violation
from .subjects import reply_subject

log = logging.getLogger(__name__)

TOOL_CALLS, CONTEXT_UPDATES = "tool.call", "context.update"
#: Tool calls answered lately, by message id (the duplicate window of the streams).
ANSWERED = "HMP_TOOL_ANSWERS"
_WINDOW = 120.0
_RUNNING = b"running"
#: Error codes of the executor's failure types.
_CODES = {"validation": "INVALID_ARGUMENTS", "timeout": "TIMEOUT", "permission": "PERMISSION",
          "unavailable": "UNAVAILABLE", "not_found": "TOOL_NOT_ALLOWED"}


class HubCalls(abc.ABC):
    """A request-reply service of the hub for one message type."""

    #: The subject prefix it answers under (``<prefix>.<name>``).
    prefix: ClassVar[str]
    kind: ClassVar[type[Envelope]]
    name: ClassVar[str] = "hub"

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._subscription: Any = None

    async def start(self) -> None:
        """Answer calls (one copy of the queue group answers each)."""
        self._subscription = await self.bus.nc.subscribe(
            f"{self.prefix}.*", queue=f"hub-{self.prefix}", cb=self._on_call)

    async def stop(self) -> None:
        """Stop answering."""
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()

    @abc.abstractmethod
    async def handle(self, message: Any, headers: Headers) -> TaskResponse:
        """The answer to one valid call."""

    async def _on_call(self, msg: Msg) -> None:
        try:
            message = await self.bus.read(msg)
            if not isinstance(message, self.kind):
                raise Violation("type", f"{msg.subject} takes {self.kind.__name__} messages "
                                "only", message_id=message.message_id,
                                sender_id=message.sender_id)
        except Violation as exc:
            headers = Headers.of(msg)
            await self._answer(msg, headers, TaskResponse(
                sender_id=self.name, receiver_id=exc.sender_id,
                correlation_id=headers.correlation_id,
                task_id=exc.message_id or "unknown", status="failed",
                error_code="INVALID_MESSAGE", result={"field": exc.field, "rule": exc.rule}))
            return
        headers = Headers.of(msg, message)
        with tracing.span(f"hub {self.prefix}", {"hmp.correlation_id": headers.correlation_id,
                                                 "hmp.sender_id": message.sender_id},
                          parent=traceparent_of(msg), kind="server") as span:
            try:
                response = await self.handle(message, headers)
            except Exception:
                log.exception("%s %s failed", self.prefix, message.message_id)
                response = self.failed(message, headers, "HUB_ERROR",
                                       "the hub could not handle this call; see its log")
            span.set_attribute("hmp.status", response.status)
            await self._answer(msg, headers, response)

    def failed(self, message: Envelope, headers: Headers, code: str, error: str,
               **details: Any) -> TaskResponse:
        """A failed answer to ``message``."""
        return TaskResponse(sender_id=self.name, receiver_id=message.sender_id,
                            correlation_id=headers.correlation_id, task_id=message.message_id,
                            status="failed", error_code=code, result={"error": error, **details})

    async def _answer(self, msg: Msg, headers: Headers, response: TaskResponse) -> None:
        if response.receiver_id:  # kept for replay (and for a caller that stopped waiting)
            try:
                await self.bus.publish(reply_subject(self.name, response.receiver_id),
                                       response, headers)
            except Exception as exc:
                log.warning("answer %s not kept: %s", response.message_id, exc)
        if msg.reply:
            await self.bus.nc.publish(msg.reply, response.to_json(), headers={
                "Correlation-ID": headers.correlation_id, "Trace-ID": headers.trace_id})


class ToolService(HubCalls):
    """Runs the allowlisted tools for agents' ``tool_call`` messages."""

    prefix, kind = TOOL_CALLS, ToolCall

    def __init__(self, bus: Bus, registry: ToolRegistry, executor: ToolExecutor, *,
                 allowlist: tuple[str, ...], data_dir: Path,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(bus)
        self.registry = registry
        self.executor = executor
        self.allowlist = tuple(name for name in allowlist if name)
        self.data_dir = data_dir
        self.extra = extra or {}
        self._answers: KeyValue | None = None

    async def start(self) -> None:
        self._answers = await self.bus.js.create_key_value(KeyValueConfig(
            bucket=ANSWERED, history=1, ttl=_WINDOW, storage=StorageType.FILE,
            replicas=self.bus.settings.hub_replicas))
        await super().start()

    async def handle(self, message: Any, headers: Headers) -> TaskResponse:
        call: ToolCall = message
        await self.bus.publish(f"tool.kept.{call.tool_name}", call, headers)  # for replay
        if call.tool_name not in self.allowlist or call.tool_name not in self.registry:
            allowed = ", ".join(n for n in self.allowlist if n in self.registry) or "none"
            return self.failed(call, headers, "TOOL_NOT_ALLOWED",
                               f"{call.tool_name} is not on the hub's tool allowlist",
                               field="tool_name",
                               rule=f"one of the allowlisted tools (HUB_TOOLS): {allowed}")
        assert self._answers is not None, "start() first"
        try:
            await self._answers.create(call.message_id, _RUNNING)
        except KeyWrongLastSequenceError:
            return await self._earlier(call, headers)
        response = await self._run(call, headers)
        with contextlib.suppress(Exception):
            await self._answers.put(call.message_id, response.to_json())
        return response

    async def _earlier(self, call: ToolCall, headers: Headers) -> TaskResponse:
        """The answer to a call already made (a duplicate delivery)."""
        assert self._answers is not None
        with contextlib.suppress(KeyNotFoundError):
            entry = await self._answers.get(call.message_id)
            if entry.value and entry.value != _RUNNING:
                earlier = self.bus.parse(entry.value)
                if isinstance(earlier, TaskResponse):
                    return earlier
        return self.failed(call, headers, "DUPLICATE",
                           f"call {call.message_id} is already running; it runs once")

    async def _run(self, call: ToolCall, headers: Headers) -> TaskResponse:
        sandbox = self.data_dir / "hub" / "tools" / _safe(call.caller_id)
        sandbox.mkdir(parents=True, exist_ok=True)
        ctx = ToolContext(user_id=f"hub:{call.caller_id}",
                          conversation_id=f"hub:tools:{call.caller_id}",
                          trace_id=headers.trace_id, role="agent", workdir=sandbox,
                          task_id=call.message_id, data_dir=self.data_dir,
                          extra={**self.extra, "unattended": True})
        result = await self.executor.execute(call.tool_name, call.parameters, ctx,
                                             call_id=call.message_id)
        if result.ok:
            return TaskResponse(sender_id=self.name, receiver_id=call.sender_id,
                                correlation_id=headers.correlation_id,
                                task_id=call.message_id, status="success",
                                result={"output": _jsonable(result.output),
                                        "seconds": round(result.duration, 4)})
        assert result.error is not None
        return self.failed(call, headers, _CODES.get(result.error.type, "TOOL_ERROR"),
                           result.error.message, retryable=result.error.retryable)


class ContextService(HubCalls):
    """Keeps ``context_update`` messages in the context store."""

    prefix, kind = CONTEXT_UPDATES, ContextUpdate

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus)
        self.contexts = Contexts(bus)

    async def handle(self, message: Any, headers: Headers) -> TaskResponse:
        update: ContextUpdate = message
        kept, version = await self.contexts.offer(update)
        if version is None:  # not known (lost every race, or expired on arrival): look
            stored = await self.contexts.get(update.context_id)
            version = stored.version if stored else None
        return TaskResponse(sender_id=self.name, receiver_id=update.sender_id,
                            correlation_id=headers.correlation_id, task_id=update.message_id,
                            status="success", result={"kept": kept, "stored_version": version})


async def call_tool(bus: Bus, call: ToolCall, *, wait: float = 60.0) -> TaskResponse:
    """Ask the hub to run ``call``; its answer (failed ``NO_HUB`` when no hub runs)."""
    return await _call(bus, f"{TOOL_CALLS}.{call.tool_name}", call, wait)


async def share_context(bus: Bus, update: ContextUpdate, *,
                        wait: float = 30.0) -> TaskResponse:
    """Send ``update`` to the hub's context store; its answer says whether it was kept."""
    return await _call(bus, f"{CONTEXT_UPDATES}.{update.context_id}", update, wait)


async def _call(bus: Bus, subject: str, message: Envelope, wait: float) -> TaskResponse:
    try:
        reply = await bus.nc.request(subject, message.to_json(), timeout=wait,
                                     headers=with_trace({
                                         "Correlation-ID": message.correlation_id,
                                         "Trace-ID": message.correlation_id,
                                         "Nats-Msg-Id": message.message_id}))
    except NoRespondersError:
        return _local_failure(message, "NO_HUB", "no hub service answers on "
                              f"{subject.rsplit('.', 1)[0]} (start hermes-gateway hub)")
    except TimeoutError:
        return _local_failure(message, "TIMEOUT", f"no answer within {wait:g} s")
    answer = bus.parse(reply.data)
    if not isinstance(answer, TaskResponse):
        return _local_failure(message, "INVALID_MESSAGE", "the hub answered with a "
                              f"{answer.type}, not a task_response")
    return answer


def _local_failure(message: Envelope, code: str, error: str) -> TaskResponse:
    return TaskResponse(sender_id="hub-client", receiver_id=message.sender_id,
                        correlation_id=message.correlation_id, task_id=message.message_id,
                        status="failed", error_code=code, result={"error": error})


def _safe(value: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in value).strip(".") or "_"


def _jsonable(value: Any) -> Any:
    """``value`` as JSON can carry it (what is not JSON becomes its text)."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)

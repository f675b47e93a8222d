"""HMP v1: the six message types agents exchange on the hub, and their rules.

Every message is one JSON object: the envelope (``type``, ``message_id``, ``sender_id``,
``receiver_id``, ``correlation_id``, ``timestamp``, ``content_type``) and the type's own
fields at the top level. ``parse`` reads one and raises ``Violation`` naming the field and
the rule it breaks; a caller is always answered with that, never silence.

=================  ==========================================================================
task_request       task_id, intent, arguments, deadline_ms (required, 1..300000)
task_response      task_id, status (success / failed / partial), result, error_code;
                   partial: result.next_steps is a list of how to continue
context_update     context_id, version, data (gzip then base64, at most 2 MB decoded),
                   expires_at
tool_call          tool_name, parameters, caller_id
heartbeat          agent_id, load_percent, memory_used_mb, capabilities (nouns), version,
                   endpoint
log_event          level (info / warn / error), event_type, details (flat key-value only)
=================  ==========================================================================
"""

from __future__ import annotations

import binascii
import gzip
import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

import pybase64
from isal import igzip, isal_zlib
from isal.igzip_lib import IsalError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from agent_core.ids import new_id

#: ISA-L's inflate error (its stubs declare it an instance, not a class).
_INFLATE_ERROR = cast(type[Exception], IsalError)

VERSION = "1"
MAX_DEADLINE_MS = 300_000
MAX_CONTEXT_BYTES = 2 * 1024 * 1024
_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
_CAPABILITY = r"^[a-z][a-z0-9_]{0,63}$"
#: Capabilities are nouns: ``validate_claim``, not ``can_validate_claim``.
_VERB_PREFIXES = ("can_", "is_", "has_", "does_")

Scalar = str | int | float | bool | None


class Violation(ValueError):
    """A message breaks a rule of HMP v1: which field, and which rule."""

    def __init__(self, field: str, rule: str, *, message_id: str | None = None,
                 sender_id: str | None = None) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule
        self.message_id = message_id
        self.sender_id = sender_id


class Envelope(BaseModel):
    """What every HMP message carries."""

    model_config = ConfigDict(extra="forbid")

    message_id: str = Field(default_factory=new_id, pattern=_ID)
    sender_id: str = Field(pattern=_ID)
    receiver_id: str | None = Field(None, pattern=_ID)
    correlation_id: str = Field(default_factory=new_id, pattern=_ID)
    timestamp: float = Field(default_factory=time.time, ge=0)
    content_type: Literal["application/json"] = "application/json"

    def to_json(self) -> bytes:
        """The message on the wire."""
        return self.__pydantic_serializer__.to_json(self, exclude_none=True)


class TaskRequest(Envelope):
    """Asks an agent to do something before a deadline."""

    type: Literal["task_request"] = "task_request"
    task_id: str = Field(default_factory=new_id, pattern=_ID)
    intent: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    deadline_ms: int = Field(ge=1, le=MAX_DEADLINE_MS)
    # Not in the body (nothing a sender writes there sets them): the bus carries them.
    _conversation: str | None = PrivateAttr(None)
    _requester: str | None = PrivateAttr(None)
    _addressee: str | None = PrivateAttr(None)

    @property
    def conversation(self) -> str | None:
        """The conversation whose data this request may read: asserted by the hub's core
        (the ``Hmp-Conversation`` header of a request whose subject names the core as its
        sender), taken from the authenticated origin of the work (a chat task's own
        conversation), never from a model's arguments. None: no conversation."""
        return self._conversation

    @property
    def requester(self) -> str | None:
        """Who sent this request, as the server proved it (its subject's last token);
        None for a request not received from the bus."""
        return self._requester

    @property
    def addressee(self) -> str | None:
        """The agent this request was sent to (its subject's agent token; for the bridge,
        which agent of another protocol it is for); None for a request not received from
        the bus."""
        return self._addressee

    def for_conversation(self, conversation_id: str | None) -> TaskRequest:
        """This request, sent on behalf of ``conversation_id`` (only the core's assertion
        counts: ``conversation``)."""
        copy = self.model_copy()
        copy._conversation = conversation_id or None
        return copy

    def received(self, requester: str, conversation: str | None,
                 addressee: str | None = None) -> TaskRequest:
        """This request as its receiver knows it: from ``requester``, for
        ``conversation``, sent to ``addressee`` (what the bus proved, not what the body
        says)."""
        self._requester = requester
        self._conversation = conversation
        self._addressee = addressee
        return self


class TaskResponse(Envelope):
    """How a task ended (or how to continue it, when partial)."""

    type: Literal["task_response"] = "task_response"
    task_id: str = Field(pattern=_ID)
    status: Literal["success", "failed", "partial"]
    result: dict[str, Any] = Field(default_factory=dict)
    error_code: str | None = Field(None, max_length=64)

    @model_validator(mode="after")
    def _rules(self) -> TaskResponse:
        if self.status == "partial" and not isinstance(self.result.get("next_steps"), list):
            raise ValueError("result.next_steps: a partial response needs a list of how "
                             "to continue")
        if self.status == "failed" and not self.error_code:
            raise ValueError("error_code: a failed response needs one")
        return self


class ContextUpdate(Envelope):
    """A versioned piece of shared context (gzip, then base64)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["context_update"] = "context_update"
    context_id: str = Field(pattern=_ID)
    version: int = Field(ge=0)
    data: str
    expires_at: float = Field(ge=0)

    @field_validator("data")
    @classmethod
    def _gzip_base64(cls, value: str) -> str:
        try:
            packed = pybase64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("must be base64 (of gzip-compressed data)") from None
        # Decompressed up to one byte past the limit, never further (a gzip bomb stops there).
        unpacking = isal_zlib.decompressobj(wbits=31)
        try:
            size = len(unpacking.decompress(packed, MAX_CONTEXT_BYTES + 1))
        except _INFLATE_ERROR:
            raise ValueError("must be gzip-compressed data, base64-encoded") from None
        if size <= MAX_CONTEXT_BYTES and not unpacking.eof:
            raise ValueError("must be gzip-compressed data, base64-encoded (it is cut short)")
        if size > MAX_CONTEXT_BYTES:
            raise ValueError(f"holds more than {MAX_CONTEXT_BYTES} bytes once decompressed")
        return value

    @classmethod
    def pack(cls, data: bytes) -> str:
        """``data`` as the ``data`` field carries it: gzip, then base64. ISA-L's fastest
        level packs 1 MiB of JSON in ~1 ms here (~14 ms at zlib's default, for 7% less);
        data it cannot shrink is stored instead, which every reader checks fastest."""
        packed = igzip.compress(data, compresslevel=1)
        if len(packed) > len(data) * 0.97:
            packed = gzip.compress(data, compresslevel=0)
        return pybase64.b64encode(packed).decode()

    def to_json(self) -> bytes:
        """The message on the wire. ``data`` is checked base64, which JSON never escapes,
        so it is spliced in as it is instead of being encoded again (2 ms of 1.4 MB here)."""
        head = self.__pydantic_serializer__.to_json(self, exclude={"data"}, exclude_none=True)
        return b"".join((head[:-1], b',"data":"', self.data.encode("ascii"), b'"}'))


class ToolCall(Envelope):
    """Asks the hub to run one of its allowlisted tools."""

    type: Literal["tool_call"] = "tool_call"
    tool_name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    parameters: dict[str, Any] = Field(default_factory=dict)
    caller_id: str = Field(pattern=_ID)


class Heartbeat(Envelope):
    """An agent is alive: what it can do and how busy it is."""

    type: Literal["heartbeat"] = "heartbeat"
    agent_id: str = Field(pattern=_ID)
    load_percent: float = Field(ge=0, le=100)
    memory_used_mb: float = Field(ge=0)
    capabilities: list[Annotated[str, Field(pattern=_CAPABILITY)]] = Field(
        default_factory=list)
    version: str = Field("0", max_length=64)
    endpoint: str | None = Field(None, max_length=500)

    @field_validator("capabilities")
    @classmethod
    def _nouns(cls, value: list[str]) -> list[str]:
        for capability in value:
            if capability.startswith(_VERB_PREFIXES):
                raise ValueError(f"capabilities are nouns (validate_claim, not "
                                 f"can_validate_claim): {capability!r}")
        return value


class LogEvent(Envelope):
    """Something an agent wants recorded."""

    type: Literal["log_event"] = "log_event"
    level: Literal["info", "warn", "error"]
    event_type: str = Field(min_length=1, max_length=100)
    details: dict[str, Scalar] = Field(default_factory=dict)

    @field_validator("details", mode="before")
    @classmethod
    def _flat(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, dict | list):
                    raise ValueError(f"details are flat key-value only; {key!r} holds a "
                                     f"{type(item).__name__}")
        return value


Message = Annotated[TaskRequest | TaskResponse | ContextUpdate | ToolCall | Heartbeat | LogEvent,
                    Field(discriminator="type")]
TYPES = ("task_request", "task_response", "context_update", "tool_call", "heartbeat",
         "log_event")
_MESSAGE: TypeAdapter[Any] = TypeAdapter(Message)


def parse(raw: bytes | str | dict[str, Any],
          check: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Message:
    """One HMP message, validated; Violation names the first field that breaks a rule.
    ``check``: the published schemas' check (``SchemaRegistry.check``), run first."""
    data: Any = raw
    if not isinstance(raw, dict):
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise Violation("body", f"is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Violation("body", "must be one JSON object")
    ids = {k: data.get(k) if isinstance(data.get(k), str) else None
           for k in ("message_id", "sender_id")}
    if data.get("type") not in TYPES:
        raise Violation("type", f"must be one of {', '.join(TYPES)}", **ids)
    if check is not None:
        data = check(data)
    try:
        message: Message = _MESSAGE.validate_python(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"][1:]) or "body"
        rule = error["msg"].removeprefix("Value error, ")
        if where == "body" and ": " in rule:  # a rule across fields names its field first
            where, rule = rule.split(": ", 1)
        raise Violation(where, rule, **ids) from None
    return message


def schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each message type, as published on the bus."""
    models: dict[str, type[Envelope]] = {"task_request": TaskRequest, "task_response": TaskResponse,
              "context_update": ContextUpdate, "tool_call": ToolCall,
              "heartbeat": Heartbeat, "log_event": LogEvent}
    return {name: model.model_json_schema() for name, model in models.items()}


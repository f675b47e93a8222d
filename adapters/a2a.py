"""The A2A protocol (v1.0, JSON-RPC binding) as the gateway speaks it: agent cards, reading
requests, and tasks built from what an agent answered. The wire format is the a2a-sdk's own
protobuf types (``a2a.types``) in ProtoJSON, so what goes out is what a stock A2A client
reads; this module knows nothing of the hub.

A message carries text, data and file parts (bytes, or a URL the gateway fetches under
its SSRF guard; only the gateway's own agent takes files). Methods: ``SendMessage``
(blocking unless ``configuration.returnImmediately``), ``SendStreamingMessage``
(server-sent events, one JSON-RPC response per event), ``GetTask``, ``CancelTask``,
``ListTasks``, ``SubscribeToTask`` (events again) and the push notification configs.
States: an answer (HMP ``success``) is COMPLETED with the result as an artifact; a
question back (``partial``) is INPUT_REQUIRED with its next steps; anything else
(``failed``: TIMEOUT, ...) is FAILED with the error code; a cancelled task is CANCELED.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.struct_pb2 import Value

from agent_core import new_id

__all__ = ["Call", "CardInfo", "FilePart", "Inbound", "RpcError", "Skill", "card", "error",
           "event_json", "finish", "load_task", "parse", "pb", "progress", "read_call",
           "read_send", "result", "set_state", "task_json"]

PROTOCOL_VERSION = "1.0"
#: JSON-RPC and A2A error codes.
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
TASK_NOT_FOUND, TASK_NOT_CANCELABLE, UNSUPPORTED = -32001, -32002, -32004
METHODS = ("SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "ListTasks",
           "SubscribeToTask", "CreateTaskPushNotificationConfig",
           "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
           "DeleteTaskPushNotificationConfig")
#: The methods that answer with a stream of events (server-sent events).
STREAMING = ("SendStreamingMessage", "SubscribeToTask")
TERMINAL = frozenset({pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED,
                      pb.TASK_STATE_REJECTED})
#: States a task waits in for the client (then a blocking send returns).
INTERRUPTED = frozenset({pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED})


class RpcError(Exception):
    """A JSON-RPC error answer: its code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill of an agent card (a hub capability)."""

    id: str
    description: str = ""
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CardInfo:
    """What a card says about one agent."""

    agent_id: str
    description: str
    skills: tuple[Skill, ...]
    version: str = "1"
    #: The media types its messages may carry (file parts of these types too, when they
    #: are more than text and JSON).
    input_modes: tuple[str, ...] = ("text/plain", "application/json")


def card(info: CardInfo, url: str, *, documentation_url: str | None = None) -> dict[str, Any]:
    """The agent card (ProtoJSON) of an agent served at ``url``: JSON-RPC, streaming, bearer
    tokens (the gateway's API keys)."""
    message = pb.AgentCard(
        name=info.agent_id, description=info.description, version=info.version,
        supported_interfaces=[pb.AgentInterface(url=url, protocol_binding="JSONRPC",
                                                protocol_version=PROTOCOL_VERSION)],
        provider=pb.AgentProvider(organization="hermes-gateway",
                                  url=documentation_url or url),
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes={"bearer": pb.SecurityScheme(
            http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                scheme="Bearer", description="a key of the gateway's HERMES_API_KEYS"))},
        security_requirements=[pb.SecurityRequirement(schemes={"bearer": pb.StringList()})],
        default_input_modes=list(info.input_modes),
        default_output_modes=["text/plain", "application/json"],
        skills=[pb.AgentSkill(id=s.id, name=s.id.replace("_", " "),
                              description=s.description or f"{info.agent_id}: {s.id}",
                              tags=[s.id], examples=list(s.examples)) for s in info.skills])
    if documentation_url:
        message.documentation_url = documentation_url
    return dict(MessageToDict(message))


@dataclass(frozen=True, slots=True)
class Call:
    """One JSON-RPC request."""

    id: str | int | None
    method: str
    params: dict[str, Any]


def read_call(raw: bytes) -> Call:
    """A JSON-RPC 2.0 request, or RpcError saying what is wrong with it."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RpcError(PARSE_ERROR, f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("jsonrpc") != "2.0" or \
            not isinstance(data.get("method"), str):
        raise RpcError(INVALID_REQUEST, "a JSON-RPC 2.0 request object: {jsonrpc: \"2.0\", "
                       "id, method, params}")
    call_id = data.get("id")
    if call_id is not None and not isinstance(call_id, str | int):
        raise RpcError(INVALID_REQUEST, "id must be a string or a number")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    if data["method"] not in METHODS:
        raise RpcError(METHOD_NOT_FOUND, f"no method {data['method']!r}; this server has "
                       f"{', '.join(METHODS)}")
    return Call(call_id, data["method"], params)


def parse(params: dict[str, Any], message: Any) -> Any:
    """``params`` as the protobuf ``message`` (unknown fields are refused)."""
    try:
        return ParseDict(params, message)
    except ParseError as exc:
        raise RpcError(INVALID_PARAMS, f"invalid params: {exc}") from None


@dataclass(frozen=True, slots=True)
class FilePart:
    """A file part of a message: its bytes (``raw``), or the URL to fetch it from, with
    the name and type the client gives (claims, checked once it is fetched)."""

    name: str
    media_type: str
    data: bytes | None = field(default=None, repr=False)
    url: str | None = None


@dataclass
class Inbound:
    """What a SendMessage asks, read from its message."""

    message: Any
    text: str
    data: dict[str, Any]
    skill: str | None
    deadline_ms: int | None
    return_immediately: bool
    history_length: int | None = None
    files: list[FilePart] = field(default_factory=list)
    #: A push notification config given with the message (``configuration``), as ProtoJSON.
    push: dict[str, Any] | None = None


def read_send(params: dict[str, Any]) -> Inbound:
    """A SendMessageRequest: the message's text parts joined, its data parts merged, its file
    parts (bytes, or an http(s) URL), and the skill (``metadata.skill``) and deadline
    (``metadata.deadline_ms``) it names."""
    request = parse(params, pb.SendMessageRequest())
    message = request.message
    if not message.message_id:
        raise RpcError(INVALID_PARAMS, "message.messageId is required")
    if message.role != pb.ROLE_USER:
        raise RpcError(INVALID_PARAMS, "message.role must be ROLE_USER")
    texts, data, files = [], {}, []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            value = MessageToDict(part.data)
            if not isinstance(value, dict):
                raise RpcError(INVALID_PARAMS, "a data part must hold an object")
            data.update(value)
        elif kind == "raw":
            files.append(FilePart(part.filename, part.media_type, data=part.raw))
        elif kind == "url":
            if urlsplit(part.url).scheme not in ("http", "https") or len(part.url) > 4096:
                raise RpcError(INVALID_PARAMS, "a url part must hold an http(s) URL")
            files.append(FilePart(part.filename or _last(part.url), part.media_type,
                                  url=part.url))
        else:
            raise RpcError(INVALID_PARAMS, "an empty part is not accepted: send text, data "
                           "or a file")
    if not texts and not data and not files:
        raise RpcError(INVALID_PARAMS, "message.parts: send at least one text, data or file "
                       "part")
    meta = MessageToDict(message.metadata) if message.HasField("metadata") else {}
    skill = meta.get("skill")
    deadline = meta.get("deadline_ms")
    if skill is not None and not isinstance(skill, str):
        raise RpcError(INVALID_PARAMS, "metadata.skill must be a string")
    if deadline is not None and (not isinstance(deadline, int | float)
                                 or not 1000 <= deadline <= 300_000):
        raise RpcError(INVALID_PARAMS, "metadata.deadline_ms must be 1000 to 300000")
    config = request.configuration
    push = dict(MessageToDict(config.task_push_notification_config)) \
        if config.HasField("task_push_notification_config") else None
    return Inbound(message, "\n".join(texts), data, skill,
                   int(deadline) if deadline is not None else None,
                   bool(config.return_immediately),
                   config.history_length if config.HasField("history_length") else None,
                   files, push)


def _last(url: str) -> str:
    """The last component of a URL's path (a file's name, when the part gives none)."""
    return unquote(urlsplit(url).path.rstrip("/").rpartition("/")[2])


def new_task(task_id: str, context_id: str, message: Any) -> Any:
    """A submitted task holding ``message`` as its history."""
    stored = pb.Message()
    stored.CopyFrom(message)
    stored.task_id, stored.context_id = task_id, context_id
    return pb.Task(id=task_id, context_id=context_id, history=[stored],
                   status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED, timestamp=_now()))


def agent_message(task: Any, text: str, data: dict[str, Any] | None = None) -> Any:
    """A message from the agent in ``task``."""
    parts = [pb.Part(text=text)] if text else []
    if data:
        parts.append(pb.Part(data=_value(data)))
    return pb.Message(message_id=new_id(), role=pb.ROLE_AGENT, parts=parts,
                      task_id=task.id, context_id=task.context_id)


def set_state(task: Any, state: int, text: str = "", data: dict[str, Any] | None = None,
              *, kept: bool = True) -> Any:
    """Move ``task`` to ``state`` (with a status message when there is something to say,
    also kept in its history unless ``kept`` is False); the status update event for it."""
    task.status.Clear()
    task.status.state = state
    task.status.timestamp.CopyFrom(_now())
    if text or data:
        note = agent_message(task, text, data)
        task.status.message.CopyFrom(note)
        if kept:
            task.history.append(note)
    return pb.StreamResponse(status_update=pb.TaskStatusUpdateEvent(
        task_id=task.id, context_id=task.context_id, status=task.status))


def finish(task: Any, status: str, result: dict[str, Any], error_code: str | None
           ) -> list[Any]:
    """Put an HMP answer into ``task``: the events it makes (an artifact, then the status)."""
    if status == "success":
        answer = _answer_text(result)
        parts = ([pb.Part(text=answer)] if answer else []) + [pb.Part(data=_value(result))]
        artifact = pb.Artifact(artifact_id=f"{task.id}-result-{len(task.artifacts) + 1}",
                               name="result", parts=parts)
        task.artifacts.append(artifact)
        return [pb.StreamResponse(artifact_update=pb.TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, artifact=artifact,
                    last_chunk=True)),
                set_state(task, pb.TASK_STATE_COMPLETED)]
    if status == "partial":
        question = result.get("question") or result.get("ask") or "More input is needed."
        return [set_state(task, pb.TASK_STATE_INPUT_REQUIRED, str(question),
                          {"next_steps": result.get("next_steps", [])})]
    error = result.get("error") or result.get("rule") or ""
    return [set_state(task, pb.TASK_STATE_FAILED, f"{error_code}: {error}" if error
                      else str(error_code), {"error_code": error_code, "result": result})]


def progress(task: Any, text: str) -> Any:
    """A working status update saying ``text`` (a step of the task; not kept in its
    history)."""
    return set_state(task, pb.TASK_STATE_WORKING, text, kept=False)


def task_json(task: Any, history_length: int | None = None) -> dict[str, Any]:
    """``task`` in ProtoJSON, with at most ``history_length`` messages of its history."""
    shown = pb.Task()
    shown.CopyFrom(task)
    if history_length is not None:
        keep = list(shown.history)[-history_length:] if history_length else []
        del shown.history[:]
        shown.history.extend(keep)
    return dict(MessageToDict(shown))


def event_json(event: Any) -> dict[str, Any]:
    """A StreamResponse in ProtoJSON."""
    return dict(MessageToDict(event))


def load_task(data: dict[str, Any]) -> Any:
    """A task kept as ProtoJSON."""
    return ParseDict(data, pb.Task())


def result(call: Call, value: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC success answer."""
    return {"jsonrpc": "2.0", "id": call.id, "result": value}


def error(call_id: str | int | None, exc: RpcError) -> dict[str, Any]:
    """A JSON-RPC error answer."""
    return {"jsonrpc": "2.0", "id": call_id, "error": {"code": exc.code,
                                                       "message": exc.message}}


def _answer_text(result: dict[str, Any]) -> str:
    for holder in (result, result.get("output")):
        if isinstance(holder, dict) and isinstance(holder.get("answer"), str):
            return str(holder["answer"])
    output = result.get("output")
    return output if isinstance(output, str) else ""


def _value(data: Any) -> Value:
    value = Value()
    ParseDict(json.loads(json.dumps(data, default=str)), value)
    return value


def _now() -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    stamp = Timestamp()
    stamp.FromDatetime(dt.datetime.now(dt.UTC))
    return stamp

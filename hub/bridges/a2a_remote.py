"""Remote A2A agents (HUB_A2A_AGENTS) as hub agents, called through the a2a-sdk's client.

Each entry's agent card is read (its skills become the agent's capabilities, with its name:
``a2a-<name>`` on the hub) and read again every minute; an agent whose card cannot be read
three times in a row is no longer fronted. Every connection, the card's and the one to the
interface URL the card names, goes through the SSRF guard (``agent_core.guarded_http``):
public addresses only, unless the host is in HUB_A2A_INTERNAL_HOSTS. An entry's
credentials (``bearer``, ``headers``) go to the host of its configured URL only, never to
another host a card names.

A ``task_request`` becomes a message: ``arguments.text`` a text part, the other arguments a
data part, the intent ``metadata.skill``, the correlation id the context id (or
``arguments.a2a_context_id``); ``arguments.a2a_task_id`` continues an input-required task.
Streaming when the card says so: a working status update with a message is a progress note
(``log.<task id>``). The task's end maps back: COMPLETED is ``success`` with ``answer`` (the
artifacts' text) and ``artifacts``, INPUT_REQUIRED or AUTH_REQUIRED ``partial`` (its
question, and a next step that continues the remote task), FAILED, REJECTED and CANCELED
``failed`` (``REMOTE_FAILED``, ...); a reply without a task is the answer itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from agent_core import guarded_client
from agent_core.background import Background, repeating
from agent_core.ids import new_id

from ..messages import TaskRequest, TaskResponse
from ..settings import A2ARemote
from .names import a2a_id, capabilities
from .runner import BridgeRunner, Fronted

log = logging.getLogger(__name__)

CARD_PATH = "/.well-known/agent-card.json"
#: Seconds between reads of a card, and failed reads before its agent is no longer fronted.
_REFRESH, _FAILURES = 60.0, 3
_ENDED = {pb.TASK_STATE_FAILED: "REMOTE_FAILED", pb.TASK_STATE_REJECTED: "REMOTE_REJECTED",
          pb.TASK_STATE_CANCELED: "REMOTE_CANCELED"}
_ASKING = (pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED)


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the port spelled out."""
    default = {"https": 443, "http": 80}.get(url.scheme)
    return url.scheme, url.host, url.port or default


class _HostScoped(httpx.Auth):
    """An entry's credentials, on requests to its own origin only (its scheme, host and
    port: not to another port of the host, nor over http when the entry says https)."""

    def __init__(self, headers: dict[str, str], url: str) -> None:
        self.headers = headers
        self.origin = _origin(httpx.URL(url))

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response,
                                                               None]:
        if _origin(request.url) == self.origin:
            request.headers.update(self.headers)
        yield request


def _card_location(url: str) -> tuple[str, str]:
    """(base URL, card path) of an entry's URL (a card's own URL, or its agent's)."""
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if path.endswith(".json"):
        return base, path
    return f"{base}{path}", CARD_PATH


def _text(parts: Any) -> str:
    return "\n".join(p.text for p in parts if p.WhichOneof("content") == "text")


def _struct(data: dict[str, Any]) -> Struct:
    struct = Struct()
    ParseDict(json.loads(json.dumps(data, default=str)), struct)
    return struct


class RemoteA2AAgent(Fronted):
    """One remote A2A agent on the hub."""

    concurrency = 16

    def __init__(self, entry: A2ARemote, card: pb.AgentCard, http: httpx.AsyncClient) -> None:
        super().__init__()
        self.entry = entry
        self.agent_id = a2a_id(entry.name or card.name)
        self.http = http
        self.failures = 0
        self.use(card)

    def use(self, card: pb.AgentCard) -> None:
        """Call the agent as ``card`` says (read again: its skills may have changed)."""
        self.card = card
        self.skills = {s.id for s in card.skills}
        self.capabilities = capabilities(*[s.id for s in card.skills],
                                         self.entry.name or card.name)
        self.version = (card.version or "0")[:64]
        self.client = ClientFactory(ClientConfig(
            httpx_client=self.http, streaming=card.capabilities.streaming)).create(card)

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        arguments = dict(request.arguments)
        text = arguments.pop("text", None)
        remote_task = str(arguments.pop("a2a_task_id", "") or "")
        context = str(arguments.pop("a2a_context_id", "") or request.correlation_id)
        parts = [pb.Part(text=text if isinstance(text, str) and text else json.dumps(
            arguments, ensure_ascii=False, default=str))]
        if arguments:
            parts.append(pb.Part(data=Value(struct_value=_struct(arguments))))
        message = pb.Message(message_id=new_id(), role=pb.ROLE_USER, parts=parts,
                             context_id=context, task_id=remote_task)
        if request.intent in self.skills:
            message.metadata.CopyFrom(_struct({"skill": request.intent}))
        task: pb.Task | None = None
        try:
            async for event in self.client.send_message(pb.SendMessageRequest(message=message)):
                kind = event.WhichOneof("payload")
                if kind == "message":
                    return self.respond(request, "success", {"answer": _text(
                        event.message.parts), "a2a_context_id": event.message.context_id})
                if kind == "task":
                    task = event.task
                    continue
                update = getattr(event, kind)
                if task is None:  # a task continued: its updates come without it first
                    task = pb.Task(id=update.task_id, context_id=update.context_id)
                if kind == "status_update":
                    task.status.CopyFrom(update.status)
                    said = _text(update.status.message.parts)
                    if said and task.status.state == pb.TASK_STATE_WORKING:
                        await self.note(request, "status", status=said[:500])
                else:
                    task.artifacts.append(update.artifact)
        except Exception as exc:  # the remote side's failure is the task's, never a retry
            log.warning("remote A2A agent %s failed: %s: %s", self.agent_id,
                        type(exc).__name__, exc)
            return self.respond(request, "failed", {"error": f"{type(exc).__name__}: {exc}"},
                                error_code="AGENT_ERROR")
        if task is None:
            return self.respond(request, "failed", {"error": "the agent sent no task"},
                                error_code="AGENT_ERROR")
        return self._outcome(request, task)

    def _outcome(self, request: TaskRequest, task: pb.Task) -> TaskResponse:
        state = task.status.state
        said = _text(task.status.message.parts)
        ids = {"a2a_task_id": task.id, "a2a_context_id": task.context_id}
        if state == pb.TASK_STATE_COMPLETED:
            answer = "\n".join(t for t in (_text(a.parts) for a in task.artifacts) if t)
            return self.respond(request, "success", {
                "answer": answer or said, **ids,
                "artifacts": [MessageToDict(a) for a in task.artifacts]})
        if state in _ASKING:
            return self.respond(request, "partial", {
                "question": said or "More input is needed.", **ids,
                "next_steps": [{"intent": request.intent, "agent": self.agent_id,
                                "arguments": ids}]})
        return self.respond(request, "failed", {"error": said, **ids},
                            error_code=_ENDED.get(state, "REMOTE_UNFINISHED"))


class RemoteA2A:
    """Fronts each remote A2A agent of HUB_A2A_AGENTS whose card can be read."""

    def __init__(self, runner: BridgeRunner, entries: list[A2ARemote], *,
                 internal_ok: list[str]) -> None:
        self.runner = runner
        self.entries = entries
        self.internal_ok = internal_ok
        self.agents: dict[str, RemoteA2AAgent] = {}
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._loop: Background | None = None

    def _client(self, entry: A2ARemote) -> httpx.AsyncClient:
        client = self._clients.get(entry.url)
        if client is None:
            headers = {k: v.get_secret_value() for k, v in entry.headers.items()}
            if entry.bearer is not None:
                headers["Authorization"] = f"Bearer {entry.bearer.get_secret_value()}"
            client = guarded_client(internal_ok=self.internal_ok,
                                    timeout=httpx.Timeout(10.0, read=300.0))
            client.auth = _HostScoped(headers, entry.url)
            self._clients[entry.url] = client
        return client

    async def start(self) -> None:
        await self.refresh()
        self._loop = repeating(self.refresh, _REFRESH, "remote-a2a")

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()
        for agent_id in list(self.agents):
            await self.runner.unfront(agent_id)
        for client in self._clients.values():
            await client.aclose()

    async def refresh(self) -> None:
        """Read every card; front an agent the first time, drop it after failures."""
        for entry in self.entries:
            known = next((a for a in self.agents.values() if a.entry is entry), None)
            http = self._client(entry)
            try:
                card = await A2ACardResolver(http, *_card_location(entry.url)).get_agent_card()
            except Exception as exc:
                log.warning("the card of %s cannot be read: %s: %s", entry.url,
                            type(exc).__name__, exc)
                if known is not None:
                    known.failures += 1
                    if known.failures >= _FAILURES:
                        del self.agents[known.agent_id]
                        await self.runner.unfront(known.agent_id)
                continue
            if known is not None:
                known.failures = 0
                known.use(card)
                continue
            agent = RemoteA2AAgent(entry, card, http)
            if not agent.capabilities:
                log.warning("remote A2A agent %s has no usable capability", entry.url)
                continue
            try:
                await self.runner.front(agent)
            except Exception as exc:  # the core did not enrol it: tried at the next read
                log.warning("remote A2A agent %s not fronted: %s: %s", agent.agent_id,
                            type(exc).__name__, exc)
                continue
            self.agents[agent.agent_id] = agent

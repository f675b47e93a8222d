"""A remote A2A agent for the tests: the a2a-sdk's own server (its request handler, task
store and Starlette routes) served by uvicorn on loopback, whose executor answers as a test
says, and which takes only calls that carry its bearer token."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_core.store.embedded import free_port

#: What the executor does with one request: (its updater, the user's text, its metadata,
#: the task as it stands).
Script = Callable[[TaskUpdater, str, dict[str, Any], pb.Task], Awaitable[None]]


async def answers(updater: TaskUpdater, text: str, metadata: dict[str, Any],
                  task: pb.Task) -> None:
    """Works a moment (saying so), then completes with an artifact."""
    await updater.start_work(new_text_message("looking it up", task_id=task.id,
                                              context_id=task.context_id))
    await updater.add_artifact([pb.Part(text=f"remote says: {text}")], name="answer")
    await updater.complete()


class _Executor(AgentExecutor):
    def __init__(self, script: Script, seen: list[tuple[str, dict[str, Any], str]]) -> None:
        self.script = script
        self.seen = seen

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        metadata = MessageToDict(context.message.metadata)
        self.seen.append((context.get_user_input(), metadata, task.id))
        await self.script(TaskUpdater(event_queue, task.id, task.context_id),
                          context.get_user_input(), metadata, task)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class _Bearer(BaseHTTPMiddleware):
    """The JSON-RPC route wants ``Authorization: Bearer <token>`` (the card is public)."""

    def __init__(self, app: Any, token: str, calls: list[str | None]) -> None:
        super().__init__(app)
        self.token = token
        self.calls = calls

    async def dispatch(self, request: Request, call_next: Any) -> Response:
        if request.method == "POST":
            given = request.headers.get("authorization")
            self.calls.append(given)
            if given != f"Bearer {self.token}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
        response: Response = await call_next(request)
        return response


@dataclass
class RemoteAgent:
    """A running remote A2A agent: its URL, what it was asked, the tokens it was sent."""

    url: str
    seen: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)


@contextlib.asynccontextmanager
async def remote_agent(script: Script = answers, *, name: str = "Claims Oracle",
                       skills: tuple[str, ...] = ("lookup_claim",), token: str = "remote-key",
                       streaming: bool = True) -> AsyncIterator[RemoteAgent]:
    """The agent served until the block ends."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    card = pb.AgentCard(
        name=name, description="a remote agent for the tests", version="2.1",
        supported_interfaces=[pb.AgentInterface(url=f"{url}/", protocol_binding="JSONRPC",
                                                protocol_version="1.0")],
        capabilities=pb.AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id=s, name=s, description=s, tags=[s]) for s in skills])
    remote = RemoteAgent(url)
    handler = DefaultRequestHandler(_Executor(script, remote.seen), InMemoryTaskStore(), card)
    app = Starlette(routes=[*create_agent_card_routes(card),
                            *create_jsonrpc_routes(handler, rpc_url="/")])
    app.add_middleware(_Bearer, token=token, calls=remote.authorizations)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           ws="none", log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.02)
        yield remote
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)

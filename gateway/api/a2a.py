"""The A2A edge's routes: ``GET /a2a/<agent_id>/.well-known/agent-card.json`` (public: it
says how to authenticate) and ``POST /a2a/<agent_id>`` (JSON-RPC; the API keys of
``/agent/*``: a task belongs to the principal whose key started it, and only that principal
reads, follows, lists, cancels it or has its pushes). The protocol's code is imported on the
first call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..fetching import FileLimits
from ._http import GATEWAY, body_within, caller_of

if TYPE_CHECKING:
    from ..a2a import A2AEdge

CARD_PATH = "/.well-known/agent-card.json"
_EDGE: web.AppKey[list[A2AEdge]] = web.AppKey("a2a_edge", list)


def _edge(request: web.Request) -> A2AEdge:
    from ..a2a import A2AEdge

    made = request.app[_EDGE]
    if not made:
        made.append(A2AEdge(request.app[GATEWAY]))
    return made[0]


def _base(request: web.Request) -> str:
    """This gateway's URL from its configuration (HERMES_PUBLIC_URL), else the address
    the connection came in on: never from the request's Host header."""
    public = request.app[GATEWAY].settings.hermes_public_url
    if public:
        return public.rstrip("/")
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    if not sock:
        return ""
    host = f"[{sock[0]}]" if ":" in str(sock[0]) else str(sock[0])
    return f"{request.scheme}://{host}:{sock[1]}"


async def agent_card(request: web.Request) -> web.Response:
    """An agent's A2A card, or 404."""
    from adapters import a2a

    agent_id = request.match_info["agent_id"]
    info = await _edge(request).info(agent_id)
    if info is None:
        return web.json_response({"error": f"no live agent {agent_id!r}"}, status=404)
    base = _base(request)
    return web.json_response(a2a.card(info, f"{base}/a2a/{agent_id}",
                                      documentation_url=f"{base}/openapi.json"))


async def rpc(request: web.Request) -> web.StreamResponse:
    """One JSON-RPC call, as the caller's principal."""
    from adapters import a2a

    from ..a2a_follow import list_tasks, subscribe

    edge = _edge(request)
    agent_id = request.match_info["agent_id"]
    principal = caller_of(request).principal.name
    call_id: Any = None
    try:
        call = a2a.read_call(await _body(request))
        call_id = call.id
        if call.method == "SendStreamingMessage":
            return await _stream(request, call, edge.send(agent_id, call.params, principal,
                                                          stream=True))
        if call.method == "SubscribeToTask":
            return await _stream(request, call, subscribe(edge, agent_id, call.params,
                                                          principal))
        if call.method == "SendMessage":
            value = [v async for v in edge.send(agent_id, call.params, principal)][-1]
        elif call.method == "GetTask":
            value = await edge.get(agent_id, call.params, principal)
        elif call.method == "CancelTask":
            value = await edge.cancel(agent_id, call.params, principal)
        elif call.method == "ListTasks":
            value = await list_tasks(edge, agent_id, call.params, principal)
        else:
            value = await _push(edge, agent_id, call, principal)
        return web.json_response(a2a.result(call, value))
    except a2a.RpcError as exc:
        return web.json_response(a2a.error(call_id, exc))


async def _push(edge: A2AEdge, agent_id: str, call: Any, principal: str) -> Any:
    """The push notification config methods, on a task of the caller's."""
    from adapters import a2a

    params = call.params
    if call.method == "CreateTaskPushNotificationConfig":
        record = await edge.tasks.of(agent_id, str(params.get("taskId", "")), principal)
        return await edge.push.create(record, params)
    named = a2a.parse(params, a2a.pb.GetTaskPushNotificationConfigRequest()
                      if call.method != "ListTaskPushNotificationConfigs"
                      else a2a.pb.ListTaskPushNotificationConfigsRequest())
    record = await edge.tasks.of(agent_id, named.task_id, principal)
    if call.method == "ListTaskPushNotificationConfigs":
        return {"configs": await edge.push.of(record)}
    if call.method == "GetTaskPushNotificationConfig":
        return await edge.push.get(record, named.id)
    await edge.push.delete(record, named.id)
    return None


async def _body(request: web.Request) -> bytes:
    """The request's body: up to 1 MB and one file's worth of base64 (a file part's bytes,
    HERMES_MAX_FILE_MB); past that a JSON-RPC error naming the limit."""
    from adapters import a2a

    limits = FileLimits(request.app[GATEWAY].settings)
    try:
        return await body_within(request, limits.json_body())
    except web.HTTPRequestEntityTooLarge:
        raise a2a.RpcError(a2a.INVALID_REQUEST, f"the request is over "
                           f"{limits.json_body()} bytes: a file part's bytes may be "
                           f"{limits.file_mb:g} MB (HERMES_MAX_FILE_MB); send a larger "
                           "file as a url part") from None


async def _stream(request: web.Request, call: Any, events: AsyncIterator[dict[str, Any]]
                  ) -> web.StreamResponse:
    """A method that answers with events: server-sent events, one JSON-RPC answer each."""
    from adapters import a2a

    try:
        first = await anext(events)  # a refusal is a plain JSON-RPC error, not a stream
    except a2a.RpcError as exc:
        return web.json_response(a2a.error(call.id, exc))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    try:
        await response.write(_sse(a2a.result(call, first)))
        async for event in events:
            await response.write(_sse(a2a.result(call, event)))
    except ConnectionResetError:  # the task goes on; GetTask reads it later
        return response
    await response.write_eof()
    return response


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


async def close_edge(app: web.Application) -> None:
    """Stop the edge's running tasks (on the gateway's cleanup)."""
    for edge in app[_EDGE]:
        await edge.aclose()


def setup(app: web.Application) -> None:
    """Register the A2A routes."""
    app[_EDGE] = []
    app.router.add_get("/a2a/{agent_id}" + CARD_PATH, agent_card)
    app.router.add_post("/a2a/{agent_id}", rpc)
    app.on_cleanup.insert(0, close_edge)

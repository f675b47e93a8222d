"""LLM_MAX_CONCURRENCY: at most so many model calls in flight at once, against a real local
HTTP server; the others wait their turn outside the call's timeout, and a turn comes back
however its call ended."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp import web

from agent_core.errors import ModelHTTPError, ModelUnreachableError
from agent_core.messages import Message
from agent_core.models import ModelRequest, build_model
from agent_core.models._http import ModelHTTP, Sleep
from agent_core.settings import Settings
from tests.integration.conftest import Handler, LocalHTTP

REQUEST = ModelRequest(messages=[Message(role="user", content="hi")])


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def limited(local_http: LocalHTTP, handler: Handler, *, limit: int,
                  timeout: float = 30.0, retries: int = 0,
                  sleep: Sleep = asyncio.sleep) -> ModelHTTP:
    url = await local_http("/v1/chat", handler) + "/v1"
    return ModelHTTP(provider="openai", base_url=url, headers={}, timeout=timeout,
                     max_retries=retries, max_concurrency=limit, sleep=sleep)


class Gate:
    """A model server that holds every call until let through, counting those it holds."""

    def __init__(self) -> None:
        self.held = 0
        self.most = 0
        self.open = asyncio.Event()

    async def handler(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.held += 1
        self.most = max(self.most, self.held)
        try:
            await self.open.wait()
        finally:
            self.held -= 1
        return web.json_response({"ok": True})


@pytest.mark.parametrize("limit", [2, 0])
async def test_no_more_calls_than_the_limit_reach_the_server(local_http: LocalHTTP,
                                                             limit: int) -> None:
    gate = Gate()
    http = await limited(local_http, gate.handler, limit=limit)
    try:
        calls = [asyncio.create_task(http.post_json("/chat", {}, REQUEST)) for _ in range(6)]
        at_once = limit or 6  # 0: no limit
        await until(lambda: gate.held == at_once and http.waiting == 6 - at_once)
        assert gate.held == at_once
        gate.open.set()
        assert [await c for c in calls] == [{"ok": True}] * 6
        assert gate.most == at_once and http.waiting == 0
    finally:
        await http.aclose()


def streaming(data: bytes, *, held: asyncio.Event | None = None) -> Handler:
    """A model server answering a body with "stream" by ``data`` as server-sent events, then
    ending the stream (or, with ``held``, keeping it open until that is set); any other body
    by ``{"ok": true}``."""
    async def handler(request: web.Request) -> web.StreamResponse:
        if not (await request.json()).get("stream"):
            return web.json_response({"ok": True})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(data)
        if held is not None:
            await held.wait()
        await response.write_eof()
        return response

    return handler


async def test_the_wait_for_a_turn_is_not_part_of_the_timeout(local_http: LocalHTTP) -> None:
    http = await limited(local_http, streaming(b"data: 1\n\ndata: 2\n\n"), limit=1,
                         timeout=1.0)
    try:
        lines = http.stream_lines("/chat", {"stream": True}, REQUEST)
        first = await anext(lines)  # the stream holds the only turn until it ends
        second = asyncio.create_task(http.post_json("/chat", {}, REQUEST))
        await until(lambda: http.waiting == 1)
        await asyncio.sleep(2.0)  # the second call waits twice its timeout for its turn
        assert not second.done() and http.waiting == 1
        rest = [line async for line in lines]
        assert [first, *rest] == ["data: 1", "", "data: 2", ""]
        assert await second == {"ok": True}
    finally:
        await http.aclose()


async def test_a_stream_left_half_read_gives_its_turn_back(local_http: LocalHTTP) -> None:
    done = asyncio.Event()  # the stream ends with the test, not before
    http = await limited(local_http, streaming(b"data: 1\n\n", held=done), limit=1)
    try:
        async for line in http.stream_lines("/chat", {"stream": True}, REQUEST):
            assert line == "data: 1"
            break  # as an adapter does at its last chunk, or on a bad one
        async with asyncio.timeout(20):
            assert await http.post_json("/chat", {}, REQUEST) == {"ok": True}
    finally:
        done.set()
        await http.aclose()


@pytest.mark.parametrize(("ending", "raised"), [("error", ModelHTTPError),
                                                 ("dropped", ModelUnreachableError),
                                                 ("cancelled", asyncio.CancelledError)])
async def test_a_turn_comes_back_however_the_call_ended(
        local_http: LocalHTTP, ending: str, raised: type[BaseException]) -> None:
    arrived, done = asyncio.Event(), asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if (await request.json()).get("then"):
            return web.json_response({"ok": True})
        arrived.set()
        if ending == "error":
            return web.json_response({"error": "down"}, status=500)
        if ending == "dropped":
            assert request.transport is not None
            request.transport.close()
        else:
            await done.wait()  # held until the caller gave up
        return web.json_response({})

    http = await limited(local_http, handler, limit=1)
    try:
        first = asyncio.create_task(http.post_json("/chat", {}, REQUEST))
        await arrived.wait()
        if ending == "cancelled":
            first.cancel()
        with pytest.raises(raised):
            await first
        async with asyncio.timeout(20):  # the only turn is free again
            assert await http.post_json("/chat", {"then": True}, REQUEST) == {"ok": True}
    finally:
        done.set()
        await http.aclose()


async def test_a_call_gives_its_turn_back_while_it_waits_to_retry(
        local_http: LocalHTTP) -> None:
    failed: set[str] = set()

    async def handler(request: web.Request) -> web.StreamResponse:
        who = (await request.json())["who"]
        if who == "retrying" and not failed:
            failed.add(who)
            return web.json_response({"error": "busy"}, status=503)
        return web.json_response({"ok": who})

    backing_off = asyncio.Event()
    may_retry = asyncio.Event()

    async def sleep(_: float) -> None:
        backing_off.set()
        await may_retry.wait()

    http = await limited(local_http, handler, limit=1, retries=1, sleep=sleep)
    try:
        retrying = asyncio.create_task(http.post_json("/chat", {"who": "retrying"}, REQUEST))
        await backing_off.wait()
        # Its turn is free while it backs off: another call goes through meanwhile.
        async with asyncio.timeout(20):
            assert await http.post_json("/chat", {"who": "other"}, REQUEST) == {"ok": "other"}
        may_retry.set()
        assert await retrying == {"ok": "retrying"}
    finally:
        await http.aclose()


async def test_the_setting_reaches_every_model_of_the_chain() -> None:
    settings = Settings(_env_file=None, llm_provider="openai",  # type: ignore[call-arg]
                        llm_model_name="m", llm_base_url="http://127.0.0.1:9/v1",
                        llm_max_concurrency=3,
                        llm_fallbacks=[{"provider": "ollama", "model_name": "small",
                                        "base_url": "http://127.0.0.1:9"}])
    model = build_model(settings)
    try:
        limits = [m.http.max_concurrency for m in model.models]  # type: ignore[attr-defined]
        assert limits == [3, 3]
    finally:
        await model.aclose()

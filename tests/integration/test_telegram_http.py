"""python-telegram-bot's Bot over our aiohttp request backend, against real local servers:
what reaches the Bot API (fields, uploads, PTB's User-Agent), and PTB's error contract
(timeouts are TimedOut, a refused connection NetworkError, API errors PTB's own)."""

from __future__ import annotations

import asyncio
import io
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trustme
from aiohttp import web
from telegram import Bot
from telegram.error import BadRequest, NetworkError, TimedOut

from adapters.telegram import TelegramChannel
from adapters.telegram_http import AiohttpRequest
from agent_core.store.embedded import free_port
from tests.integration.conftest import LocalHTTP
from tests.standins.telegram_api import TelegramAPI

TOKEN = "123456:test-token"


@pytest.fixture
async def api() -> AsyncIterator[TelegramAPI]:
    server = TelegramAPI(TOKEN)
    await server.start()
    yield server
    await server.stop()


def bot_for(url: str) -> Bot:
    request = AiohttpRequest(pool_size=4)
    return Bot(TOKEN, base_url=f"{url}/bot", base_file_url=f"{url}/file/bot", request=request,
               get_updates_request=AiohttpRequest(pool_size=1))


async def test_fields_and_uploads_reach_the_bot_api(api: TelegramAPI) -> None:
    bot = bot_for(api.url)
    async with bot:
        assert bot.username == "hermes_test_bot"
        await bot.send_message(chat_id=42, text="héllo <b>", parse_mode="HTML")
        await bot.send_document(chat_id=42, document=io.BytesIO(b"\x00report\xff"),
                                filename="report.bin", caption="weekly")
    [sent] = api.of("sendMessage")
    assert (sent["chat_id"], sent["text"], sent["parse_mode"]) == (42, "héllo <b>", "HTML")
    [document] = api.of("sendDocument")
    assert document["document"] == {"filename": "report.bin", "bytes": b"\x00report\xff"}
    assert (document["chat_id"], document["caption"]) == (42, "weekly")


async def test_the_bot_api_s_own_errors_are_ptb_s(api: TelegramAPI) -> None:
    api.fail("sendMessage", {"ok": False, "error_code": 400,
                             "description": "Bad Request: chat not found"})
    async with bot_for(api.url) as bot:
        with pytest.raises(BadRequest, match="Chat not found"):
            await bot.send_message(chat_id=1, text="x")


async def test_a_server_that_never_answers_is_timed_out(local_http: LocalHTTP) -> None:
    never = asyncio.Event()
    seen: list[str] = []

    async def hold(request: web.Request) -> web.Response:
        seen.append(request.headers.get("User-Agent", ""))
        await never.wait()
        return web.json_response({})

    bot = bot_for(await local_http("/bot{token}/{method}", hold))
    await bot._request[1].initialize()  # no getMe: the server never answers it
    try:
        with pytest.raises(TimedOut):
            await bot.send_message(chat_id=1, text="x", read_timeout=0.2)
        assert seen and seen[0].startswith("python-telegram-bot")
    finally:
        never.set()
        await bot._request[1].shutdown()


async def test_a_refused_connection_is_a_network_error() -> None:
    port = free_port()  # nothing listens there
    request = AiohttpRequest(pool_size=1)
    await request.initialize()
    try:
        with pytest.raises(NetworkError, match=r"aiohttp\.ClientConnectorError"):
            await request.post(f"http://127.0.0.1:{port}/bot{TOKEN}/getMe")
    finally:
        await request.shutdown()


async def username(request: AiohttpRequest, url: str) -> str:
    me = await request.post(url)
    assert isinstance(me, dict)
    return str(me["username"])


async def test_a_request_before_initialize_or_after_shutdown_says_so(api: TelegramAPI
                                                                     ) -> None:
    request = AiohttpRequest(pool_size=1)
    url = f"{api.url}/bot{TOKEN}/getMe"
    with pytest.raises(NetworkError, match="not initialized"):
        await request.post(url)
    await request.initialize()
    assert await username(request, url) == "hermes_test_bot"
    await request.shutdown()
    with pytest.raises(NetworkError, match="not initialized"):
        await request.post(url)
    await request.initialize()  # a shut-down backend opens again, as PTB's does
    assert await username(request, url) == "hermes_test_bot"
    await request.shutdown()
    await request.shutdown()  # twice is harmless


def test_the_channel_s_bot_has_the_pools_ptb_s_application_would_give_it() -> None:
    async def ingest(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")

    channel = TelegramChannel(token="1:x", webhook_secret=None, ingest=ingest)
    requests = channel.bot._request
    sizes = [r.pool_size for r in requests if isinstance(r, AiohttpRequest)]
    assert sizes == [1, 256]  # the long poll's, then sending's: all ours


async def test_a_bot_api_whose_certificate_is_not_trusted_is_refused(local_http: LocalHTTP
                                                                    ) -> None:
    unknown = trustme.CA()  # a CA in no trust store of this process
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    unknown.issue_cert("127.0.0.1").configure_cert(server_ctx)
    reached: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        reached.append(request.path)
        return web.json_response({"ok": True, "result": {}})

    url = await local_http("/bot{token}/{method}", answer, ssl_context=server_ctx)
    request = AiohttpRequest(pool_size=1)
    await request.initialize()
    try:
        with pytest.raises(NetworkError, match="Certificate"):
            await request.post(f"{url}/bot{TOKEN}/getMe")
        assert reached == [], "the request (and the token in its path) never left"
    finally:
        await request.shutdown()


async def test_the_proxy_the_environment_names_is_used(api: TelegramAPI,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY",
                 "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", api.url)  # the stand-in, as a forward proxy
    monkeypatch.setenv("http_proxy", api.url)
    port = free_port()  # nothing listens there: only the proxy can answer
    request = AiohttpRequest(pool_size=1)
    await request.initialize()
    try:
        assert await username(request, f"http://127.0.0.1:{port}/bot{TOKEN}/getMe") \
            == "hermes_test_bot"
    finally:
        await request.shutdown()
    assert [m for m, _ in api.calls] == ["getMe"]

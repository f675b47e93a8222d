"""The model adapters' HTTP (aiohttp's client under ModelHTTP): bodies, streamed lines,
and the way broken connections are reported, against real local HTTP servers."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trustme
from aiohttp import web

from agent_core.errors import ModelTimeoutError, ModelUnreachableError
from agent_core.messages import Message
from agent_core.models import ModelRequest
from agent_core.models._http import ModelHTTP
from tests.integration.conftest import Handler, LocalHTTP


@pytest.fixture
def serve(local_http: LocalHTTP) -> Callable[[Handler], Awaitable[str]]:
    async def start(handler: Handler) -> str:
        return await local_http("/v1/chat", handler) + "/v1"

    return start


def client(url: str, *, timeout: float = 5.0, retries: int = 0) -> ModelHTTP:
    async def no_sleep(_: float) -> None:
        return None

    return ModelHTTP(provider="openai", base_url=url, headers={"Authorization": "Bearer k"},
                     timeout=timeout, max_retries=retries, sleep=no_sleep)


REQUEST = ModelRequest(messages=[Message(role="user", content="hi")])


async def test_headers_and_json_body_arrive_and_a_gzip_answer_is_decoded(serve: Any) -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        seen["headers"] = dict(request.headers)
        seen["body"] = await request.json()
        response = web.json_response({"answer": "ø" * 5000})
        response.enable_compression()
        return response

    http = client(await serve(handler))
    try:
        data = await http.post_json("/chat", {"q": "ünïcode"}, REQUEST)
    finally:
        await http.aclose()
    assert data == {"answer": "ø" * 5000}
    assert seen["body"] == {"q": "ünïcode"}
    assert seen["headers"]["Authorization"] == "Bearer k"
    assert seen["headers"]["Content-Type"] == "application/json"
    assert "gzip" in seen["headers"]["Accept-Encoding"]


async def test_stream_lines_arrive_while_the_server_is_still_sending(serve: Any) -> None:
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: one\n\n")
        await asyncio.wait_for(release.wait(), 5)  # only after the client saw "one"
        await response.write(b"data: two\n\n")
        return response

    http = client(await serve(handler))
    lines = []
    try:
        async for line in http.stream_lines("/chat", {}, REQUEST):
            lines.append(line)
            if line == "data: one":
                release.set()
    finally:
        await http.aclose()
    assert [line for line in lines if line] == ["data: one", "data: two"]


async def test_streamed_lines_split_on_every_line_end_whatever_the_chunks(serve: Any) -> None:
    """LF, CRLF and lone CR end lines (SSE allows all three), also when a CRLF or a UTF-8
    character is split between writes; a line longer than aiohttp's 64 KiB readline limit
    arrives whole; an unterminated last line is not lost."""
    long = "x" * 200_000
    parts = [b"data: \xc3", b"\xb8\r", b"\ndata: b\rdata: c\n\n", f"data: {long}\n".encode(),
             b"tail"]

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for part in parts:
            await response.write(part)
            await asyncio.sleep(0)
        return response

    http = client(await serve(handler))
    try:
        lines = [line async for line in http.stream_lines("/chat", {}, REQUEST)]
    finally:
        await http.aclose()
    assert lines == ["data: ø", "data: b", "data: c", "", f"data: {long}", "tail"]


@pytest.mark.parametrize("url", ["localhost:1/v1", "ftp://127.0.0.1:1/v1", "http://[::1/v1"])
async def test_a_bad_url_is_unreachable_at_once_not_retried(url: str) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    http = ModelHTTP(provider="openai", base_url=url, headers={}, timeout=5, max_retries=3,
                     sleep=sleep)
    try:
        with pytest.raises(ModelUnreachableError, match="cannot reach the model"):
            await http.post_json("/chat", {}, REQUEST)
    finally:
        await http.aclose()
    assert waits == []


async def test_a_connection_dropped_mid_stream_is_reported_as_broken(serve: Any) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        response.content_length = 10_000  # promise more than is sent, then hang up
        await response.prepare(request)
        await response.write(b"data: partial\n\n")
        assert request.transport is not None
        request.transport.close()
        return response

    http = client(await serve(handler))
    lines = []
    try:
        with pytest.raises(ModelUnreachableError, match="stream broke"):
            async for line in http.stream_lines("/chat", {}, REQUEST):
                lines.append(line)
    finally:
        await http.aclose()
    assert "data: partial" in lines


async def test_a_server_that_hangs_up_before_answering_is_retried(serve: Any) -> None:
    calls = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(0.05)
        return web.json_response({"ok": calls})

    http = client(await serve(handler), retries=2)
    try:
        assert await http.post_json("/chat", {}, REQUEST) == {"ok": 2}
    finally:
        await http.aclose()


async def test_a_silent_server_is_a_timeout_not_a_hang(serve: Any) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.5)
        return web.json_response({})

    http = client(await serve(handler), timeout=0.3)
    try:
        with pytest.raises(ModelTimeoutError):
            await asyncio.wait_for(http.post_json("/chat", {}, REQUEST), 3)
    finally:
        await http.aclose()


async def test_the_pool_reuses_connections(serve: Any) -> None:
    peers: set[Any] = set()

    async def handler(request: web.Request) -> web.StreamResponse:
        peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        return web.json_response(json.loads(await request.text()))

    http = client(await serve(handler))
    try:
        for i in range(5):
            assert await http.post_json("/chat", {"i": i}, REQUEST) == {"i": i}
    finally:
        await http.aclose()
    assert len(peers) == 1, "sequential requests share one kept-alive connection"


CALL = """
import asyncio, sys
from agent_core.errors import ModelUnreachableError
from agent_core.messages import Message
from agent_core.models import ModelRequest
from agent_core.models._http import ModelHTTP

async def main():
    http = ModelHTTP(provider="openai", base_url=sys.argv[1], headers={}, timeout=10,
                     max_retries=2)
    from aiohttp import connector
    print("trust read:", connector._SSL_CONTEXT_VERIFIED._ready)  # at the first handshake
    try:
        print(await http.post_json("/chat", {}, ModelRequest(messages=[Message(role="user",
                                                                              content="x")])))
    except ModelUnreachableError as exc:
        print("unreachable:", exc)
    finally:
        await http.aclose()

asyncio.run(main())
"""


async def test_tls_is_verified_against_the_trust_store_ssl_cert_file_names(tmp_path: Any
                                                                           ) -> None:
    """A model behind a private CA: trusted once SSL_CERT_FILE names that CA, refused (not
    retried) with a certificate error otherwise; the trust store is read at the first
    handshake, not before."""
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ssl)
    app = web.Application()
    app.router.add_post("/v1/chat", _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}/v1"

    async def call(cafile: str) -> str:
        env = {**os.environ, "SSL_CERT_FILE": str(tmp_path / cafile)}
        env.pop("SSL_CERT_DIR", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CALL, url, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-2000:]
        return out.decode()

    try:
        assert (await call("ca.pem")).splitlines() == ["trust read: False", "{'ok': True}"]
        refused = await call("other.pem")
    finally:
        await runner.cleanup()
    refused = refused.splitlines()[-1]
    assert refused.startswith("unreachable:") and "certificate" in refused.lower(), refused


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def test_bodies_with_what_orjson_refuses_still_go_and_come_back(serve: Any) -> None:
    """Requests are encoded and answers decoded by orjson; an int key goes out as a string
    (as the standard library writes it) and an answer orjson refuses (an integer past 64
    bits, NaN) is read by the standard library."""
    seen: list[Any] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        return web.Response(text='{"big": 1180591620717411303424, "nan": NaN}',
                            content_type="application/json")

    http = client(await serve(handler))
    try:
        data = await http.post_json("/chat", {"q": "ünï", "counts": {1: 2}}, REQUEST)
    finally:
        await http.aclose()
    assert seen == [{"q": "ünï", "counts": {"1": 2}}]
    assert data["big"] == 2 ** 70 and data["nan"] != data["nan"]


async def test_a_request_holding_an_integer_past_64_bits_still_goes(serve: Any) -> None:
    """A tool call's arguments come back in every later request (Anthropic and Ollama send
    them as JSON objects): one the model gave with an integer orjson cannot write must not
    make the conversation's next model call fail."""
    seen: list[Any] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        return web.json_response({"ok": True})

    http = client(await serve(handler))
    try:
        await http.post_json("/chat", {"input": {"id": 2 ** 70, "name": "ünï"}}, REQUEST)
    finally:
        await http.aclose()
    assert seen == [{"input": {"id": 2 ** 70, "name": "ünï"}}]

"""A2A file parts with the real a2a-sdk client: a file's bytes, or a URL the gateway may
fetch, reach the gateway's own agent as the files people send do (a document's text, an
image part); a URL to an internal address (loopback, the cloud metadata address) is refused
unless the deployment names its host, and so is a redirect to one; the limits of a
message's files are said in the JSON-RPC error; a hub agent takes no files."""

from __future__ import annotations

import io
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from aiohttp import web

from agent_core.models.replay import Reply
from tests.integration import fixture_files as files
from tests.integration.conftest import GatewayFactory, Harness
from tests.integration.test_files import text_of, user_content

KEY = "a2a-files-key-0123456789abcdef"


@dataclass
class FileHost:
    """A local web server hosting files (and redirects); what it was asked."""

    url: str
    hostport: str
    seen: list[str]


FileHostFactory = Callable[[dict[str, Any]], Awaitable[FileHost]]


@pytest.fixture
def file_host(aiohttp_server: Any) -> FileHostFactory:
    """``await file_host({path: bytes, or ("redirect", url)})``: a server of those."""

    async def start(routes: dict[str, Any]) -> FileHost:
        seen: list[str] = []

        async def serve(request: web.Request) -> web.StreamResponse:
            seen.append(request.path)
            found = routes.get(request.path)
            if isinstance(found, tuple):
                raise web.HTTPFound(found[1])
            if found is None:
                raise web.HTTPNotFound()
            return web.Response(body=found)

        app = web.Application()
        app.router.add_get("/{tail:.*}", serve)
        server = await aiohttp_server(app)
        return FileHost(f"http://127.0.0.1:{server.port}", f"127.0.0.1:{server.port}", seen)

    return start


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=60) as client:
        yield client


async def gateway(make_gateway: GatewayFactory, **overrides: Any) -> Harness:
    return await make_gateway(hermes_api_keys=[{"key": KEY, "user": "a2a", "role": "admin"}],
                              **overrides)


async def client_of(h: Harness, http: httpx.AsyncClient, agent: str = "gateway") -> Any:
    base = str(h.client.make_url("")).rstrip("/")
    card = await A2ACardResolver(http, f"{base}/a2a/{agent}").get_agent_card()
    return ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)


def message(text: str, *parts: pb.Part) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(message=pb.Message(
        message_id=uuid.uuid4().hex, role=pb.ROLE_USER,
        parts=([pb.Part(text=text)] if text else []) + list(parts)))


async def answered(client: Any, request: pb.SendMessageRequest) -> Any:
    [event] = [e async for e in client.send_message(request)]
    assert event.task.status.state == pb.TASK_STATE_COMPLETED, event
    return event.task


async def test_file_parts_with_bytes_reach_the_gateways_agent(
        make_gateway: GatewayFactory, http: httpx.AsyncClient) -> None:
    h = await gateway(make_gateway)
    h.model.add(Reply("The term is 24 months."))
    client = await client_of(h, http)
    card = await A2ACardResolver(http, str(h.client.make_url("/a2a/gateway"))
                                 ).get_agent_card()
    assert "application/pdf" in card.default_input_modes
    task = await answered(client, message(
        "what does the contract say, and what is in the picture?",
        pb.Part(raw=files.pdf(["The term is 24 months"]), filename="contract.pdf",
                media_type="application/pdf"),
        pb.Part(raw=files.png(), filename="../../picture.png", media_type="image/png")))
    assert task.artifacts[0].parts[0].text == "The term is 24 months."
    content = user_content(h)
    said = text_of(content)
    assert "what does the contract say" in said and "--- page 1 of 1 ---" in said
    assert "The term is 24 months" in said and "inbox/contract.pdf" in said
    assert "[Attachment: picture.png (image/png" in said  # its name made safe
    assert [p["type"] for p in content if p["type"] == "image_url"] == ["image_url"]


async def test_a_file_url_the_gateway_may_fetch_is_read(
        make_gateway: GatewayFactory, http: httpx.AsyncClient,
        file_host: FileHostFactory) -> None:
    host = await file_host({"/share/notes.docx": files.docx(["Meet on Tuesday"])})
    h = await gateway(make_gateway, hermes_file_url_internal_hosts=[host.hostport])
    h.model.add(Reply("Tuesday."))
    client = await client_of(h, http)
    await answered(client, message("when do we meet?",
                                   pb.Part(url=f"{host.url}/share/notes.docx")))
    said = text_of(user_content(h))
    assert "Meet on Tuesday" in said and "[Attachment: notes.docx" in said
    assert host.seen == ["/share/notes.docx"]


async def test_file_urls_to_internal_addresses_are_refused(
        make_gateway: GatewayFactory, http: httpx.AsyncClient,
        file_host: FileHostFactory) -> None:
    """A client names the gateway's own loopback services and the cloud metadata address
    as file URLs: refused before the message is accepted, and nothing is fetched."""
    inside = await file_host({"/secret.txt": b"an internal secret"})
    h = await gateway(make_gateway)
    client = await client_of(h, http)
    for url in (f"{inside.url}/secret.txt", "http://169.254.169.254/latest/meta-data/",
                "http://[::1]:9/x", "http://localhost/admin"):
        with pytest.raises(InvalidParamsError, match="not allowed"):
            await answered(client, message("read it", pb.Part(url=url, filename="x.txt")))
    assert inside.seen == []
    assert h.model.requests == []


async def test_a_redirect_to_an_internal_address_is_not_followed(
        make_gateway: GatewayFactory, http: httpx.AsyncClient,
        file_host: FileHostFactory) -> None:
    """An allowed host answers with a redirect to an internal one the deployment did not
    name: every hop is vetted, so the second is refused when the worker fetches."""
    inside = await file_host({"/secret.txt": b"an internal secret"})
    allowed = await file_host({"/report.txt": ("redirect", f"{inside.url}/secret.txt")})
    h = await gateway(make_gateway, hermes_file_url_internal_hosts=[allowed.hostport])
    h.model.add(Reply("I could not read it."))
    client = await client_of(h, http)
    await answered(client, message("read it", pb.Part(url=f"{allowed.url}/report.txt")))
    assert allowed.seen == ["/report.txt"] and inside.seen == []
    said = text_of(user_content(h))
    assert "report.txt could not be fetched: the file's URL is not allowed" in said
    assert "an internal secret" not in said


async def test_the_limits_of_a_messages_files_are_named(
        make_gateway: GatewayFactory, http: httpx.AsyncClient) -> None:
    h = await gateway(make_gateway, hermes_max_file_mb=0.01, hermes_max_files_per_message=2)
    client = await client_of(h, http)
    with pytest.raises(InvalidParamsError, match="HERMES_MAX_FILE_MB"):
        await answered(client, message("", pb.Part(raw=bytes(20_000), filename="big.bin")))
    with pytest.raises(InvalidParamsError, match="HERMES_MAX_FILES_PER_MESSAGE"):
        await answered(client, message("three", *(pb.Part(raw=b"x", filename=f"{i}.txt")
                                                  for i in range(3))))
    raw = io.BytesIO()
    raw.write(b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
              b'{"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "' + b"A" * 2_000_000
              + b'"}]}}}')
    answer = await http.post(str(h.client.make_url("/a2a/gateway")), content=raw.getvalue(),
                             headers={"Content-Type": "application/json"})
    error = answer.json()["error"]
    assert error["code"] == -32600 and "HERMES_MAX_FILE_MB" in error["message"]
    assert h.model.requests == []

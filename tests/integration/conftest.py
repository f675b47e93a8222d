"""A running gateway over real HTTP, wired to the test Redis, the scripted model server and
local stand-ins of the Slack and Telegram APIs."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import shutil
import ssl
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from agent_core.models.replay import ReplayModelServer
from agent_core.store import connect
from agent_core.store.embedded import EmbeddedValkey, ServerInfo
from gateway.api import GATEWAY
from gateway.app import create_app
from gateway.auth import local_token
from gateway.service import Gateway
from gateway.settings import GatewaySettings
from tests.standins.slack_api import SlackAPI
from tests.standins.telegram_api import TelegramAPI

SLACK_SECRET = "slack-signing-secret-for-tests"
SLACK_TOKEN = "xoxb-test-token-1234567890"
TELEGRAM_TOKEN = "123456:TEST-telegram-token-abcdefghijklmnopqr"
TELEGRAM_SECRET = "telegram-webhook-secret"
WEBHOOK_SECRET = "crm-webhook-secret"


@dataclass
class Harness:
    """A started gateway and the servers around it."""

    client: TestClient
    gateway: Gateway
    model: ReplayModelServer
    settings: GatewaySettings
    slack: SlackAPI | None = None
    telegram: TelegramAPI | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    async def wait_idle(self, timeout: float = 15.0) -> None:
        """Until no conversation has queued work and no worker is busy."""
        assert self.gateway.parts.queue is not None and self.gateway.parts.workers is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            parts = self.gateway.parts
            if await parts.queue.waiting() == 0 and parts.workers.active == 0:
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the gateway did not go idle")

    async def wait_for(self, check: Callable[[], bool], timeout: float = 15.0) -> None:
        """Until ``check()`` is true."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
            await asyncio.sleep(0.02)

    async def task(self, task_id: str, headers: dict[str, str] | None = None
                   ) -> dict[str, Any]:
        """GET /agent/tasks/{id}."""
        response = await self.client.get(f"/agent/tasks/{task_id}", headers=headers)
        assert response.status == 200, await response.text()
        data: dict[str, Any] = await response.json()
        return data

    async def wait_task(self, task_id: str, *statuses: str, timeout: float = 15.0,
                        headers: dict[str, str] | None = None) -> dict[str, Any]:
        """Poll a task until it reaches one of ``statuses``."""
        deadline = time.monotonic() + timeout
        while True:
            view = await self.task(task_id, headers)
            if view["status"] in statuses:
                return view
            if time.monotonic() > deadline:
                raise AssertionError(f"task stayed {view['status']}")
            await asyncio.sleep(0.02)


GatewayFactory = Callable[..., Awaitable[Harness]]


def api_key(user: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    """A HERMES_API_KEYS entry for ``user`` (its token: ``bearer(user)``)."""
    return {"key": f"{user}-key-0123456789abcdef", "user": user, "role": role, **extra}


def bearer(user: str) -> dict[str, str]:
    """The Authorization header of ``api_key(user)``."""
    return {"Authorization": f"Bearer {user}-key-0123456789abcdef"}


def slack_headers(body: bytes, *, secret: str = SLACK_SECRET, timestamp: int | None = None,
                  retry: int | None = None) -> dict[str, str]:
    """Headers signed exactly as Slack signs a request."""
    ts = str(timestamp if timestamp is not None else int(time.time()))
    base = f"v0:{ts}:".encode() + body
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    headers = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature,
               "Content-Type": "application/json"}
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return headers


def answer_echo(path: str, body: dict[str, Any]) -> Any:
    """A model that answers each user message with "answer to: <text>"."""
    from agent_core.models.replay import Reply

    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    content = last["content"]
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content)
    return Reply(f"answer to: {content}")


@pytest.fixture
async def make_gateway(aiohttp_client: Callable[..., Awaitable[TestClient]], redis_url: str,
                       model_server: ReplayModelServer, tmp_path: Path
                       ) -> AsyncIterator[GatewayFactory]:
    """Start a gateway; ``slack=True`` / ``telegram=True`` add stand-ins of those APIs."""
    made: list[tuple[TestClient, str]] = []
    standins: list[Any] = []

    async def factory(*, slack: bool = False, telegram: bool = False, model: bool = True,
                      **overrides: Any) -> Harness:
        prefix = f"gw{uuid.uuid4().hex[:10]}"
        values: dict[str, Any] = {
            "redis_url": redis_url, "redis_prefix": prefix,
            "hermes_data_dir": tmp_path / prefix, "agent_replan_every": 0,
            "llm_max_retries": 0, "hermes_lease_seconds": 5,
            "hermes_webhook_secrets": {"crm": WEBHOOK_SECRET},
            # The callback servers of the tests listen on loopback, which the SSRF guard
            # refuses unless the deployment names it.
            "hermes_webhook_callback_hosts": ["127.0.0.1"],
        }
        if model:
            values.update(llm_provider="openai", llm_model_name="scripted",
                          llm_base_url=model_server.openai_url,
                          llm_api_key="sk-test-0123456789abcdefghij")
        slack_api = telegram_api = None
        if slack:
            slack_api = SlackAPI()
            await slack_api.start()
            standins.append(slack_api)
            values.update(slack_bot_token=SLACK_TOKEN, slack_signing_secret=SLACK_SECRET,
                          slack_api_url=slack_api.url)
        if telegram:
            telegram_api = TelegramAPI(TELEGRAM_TOKEN)
            await telegram_api.start()
            standins.append(telegram_api)
            values.update(telegram_bot_token=TELEGRAM_TOKEN,
                          telegram_webhook_secret=TELEGRAM_SECRET,
                          telegram_api_url=telegram_api.url, telegram_mode="webhook",
                          hermes_public_url="https://hermes.example.test")
        values.update(overrides)
        settings = GatewaySettings(_env_file=None, **values)  # type: ignore[call-arg]
        app = create_app(settings)
        # Without keys the API takes the gateway's local token (the operator's).
        headers = {} if settings.hermes_api_keys else {
            "Authorization": f"Bearer {local_token(settings.hermes_data_dir)}"}
        client = await aiohttp_client(app, headers=headers)
        made.append((client, prefix))
        gateway = app[GATEWAY]
        assert gateway.parts.workers is not None
        gateway.parts.deliverer.base_delay = 0.05
        return Harness(client, gateway, model_server, settings, slack_api, telegram_api)

    yield factory
    for client, prefix in made:
        await client.close()
        redis = connect(redis_url)
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.unlink(*keys)
        await redis.aclose()
    for standin in standins:
        await standin.stop()


@pytest.fixture
async def own_store() -> AsyncIterator[tuple[EmbeddedValkey, ServerInfo]]:
    """A server of the test's own, for it to stop (an outage) and start again: its data
    directory is short, so its URL is a Unix socket that stays the same across restarts."""
    data = Path(tempfile.mkdtemp(prefix="hg-"))
    server = EmbeddedValkey(data)
    info = await server.start()
    assert info.socket, "the URL must survive a restart"
    yield server, info
    await server.stop()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
async def callback_server() -> AsyncIterator[dict[str, Any]]:
    """Receives webhook answers: ``received`` lists (headers, body) of each POST;
    ``fail_next`` makes the next N calls answer 503."""
    state: dict[str, Any] = {"received": [], "fail_next": 0, "attempts": 0}

    async def handle(request: web.Request) -> web.Response:
        state["attempts"] += 1
        if state["fail_next"] > 0:
            state["fail_next"] -= 1
            return web.json_response({"error": "down"}, status=503)
        body = await request.read()
        state["received"].append((dict(request.headers), body, json.loads(body)))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    yield state
    await runner.cleanup()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LocalHTTP = Callable[..., Awaitable[str]]


@pytest.fixture
async def local_http() -> AsyncIterator[LocalHTTP]:
    """``await local_http(path, handler, ssl_context=None)``: a local server answering POSTs
    to ``path`` (a route pattern) with ``handler``; its base URL. Stopped with the test."""
    runners: list[web.AppRunner] = []

    async def start(path: str, handler: Handler, *,
                    ssl_context: ssl.SSLContext | None = None) -> str:
        app = web.Application()
        app.router.add_post(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
        scheme = "https" if ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()

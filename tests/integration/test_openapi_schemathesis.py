"""Every operation of the OpenAPI description, run by schemathesis against a live gateway
(real HTTP, the embedded store, the scripted model): no server error, every answer's status
documented and its body true to the schema, schema-violating requests refused.

A fixed number of examples per operation with a fixed seed (derandomised) in CI; set
HERMES_SCHEMATHESIS_EXAMPLES for a longer run by hand."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, settings
from schemathesis.checks import negative_data_rejection, positive_data_acceptance

from agent_core.models.replay import ReplayModelServer, Reply
from gateway import GatewaySettings
from gateway.app import create_app
from gateway.openapi import spec

API_KEY = "hermes-schemathesis-key-0123456789"
EXAMPLES = int(os.environ.get("HERMES_SCHEMATHESIS_EXAMPLES", "12"))

schema = schemathesis.openapi.from_dict(spec())


class LiveGateway:
    """The gateway and the scripted model on an event loop of their own thread (the
    schemathesis calls are synchronous)."""

    def __init__(self, redis_url: str, data_dir: Path, nats_url: str) -> None:
        self.redis_url, self.data_dir, self.nats_url = redis_url, data_dir, nats_url
        self.loop = asyncio.new_event_loop()
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._model = ReplayModelServer(responder=lambda _path, _body: Reply("ok"))

    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(60), "the gateway did not start"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        await self._model.start()
        values: dict[str, Any] = {
            "redis_url": self.redis_url, "redis_prefix": f"st{uuid.uuid4().hex[:8]}",
            "hermes_data_dir": self.data_dir,
            # An admin that may act for anyone: every operation answers for real.
            "hermes_api_keys": [{"key": API_KEY, "user": "fuzz", "role": "admin",
                                 "act_as": ["*"]}],
            "llm_provider": "openai", "llm_model_name": "scripted",
            "llm_base_url": self._model.openai_url, "llm_api_key": "sk-test-0123456789abcdef",
            "agent_replan_every": 0, "llm_max_retries": 0, "hermes_run_timeout": 20,
            # The hub too: the workflow routes answer for real.
            "hermes_hub": True, "nats_url": self.nats_url}
        app = create_app(GatewaySettings(_env_file=None, **values))  # type: ignore[call-arg]
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def stop(self) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            await self._model.stop()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module")
def live(redis_url: str, nats_url: str, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[LiveGateway]:
    gateway = LiveGateway(redis_url, tmp_path_factory.mktemp("schemathesis"), nats_url)
    gateway.start()
    yield gateway
    gateway.stop()


@schema.parametrize()
@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_its_contract(case: Any, live: LiveGateway) -> None:
    excluded = []
    if case.path.startswith("/agent/schedules"):
        # A crontab's and a time zone's validity are more than JSON Schema can say: a
        # schema-valid "cron": "0" is rightly refused. Every other check still runs.
        excluded.append(positive_data_acceptance)
    if case.path in ("/agent/run", "/agent/run-async") and (
            (isinstance(case.body, dict) and case.body.get("files")) or
            case.media_type == "multipart/form-data"):
        # The files of a message are held to the deployment's limits (how many, how large:
        # HERMES_MAX_FILE*), which a static schema cannot say: a schema-valid 11th file is
        # rightly refused with a 413 naming its limit.
        excluded.append(positive_data_acceptance)
    if case.media_type == "multipart/form-data":
        # A form field is text on the wire: a "text" generated as the boolean true arrives
        # as the string "true", which the schema allows.
        excluded.append(negative_data_rejection)
    if case.path == "/agent/workflows" and case.method == "POST":
        # So are a JSONPath query's, a condition's, the steps' graph and the live agents.
        excluded.append(positive_data_acceptance)
    case.call_and_validate(base_url=live.url, headers={"Authorization": f"Bearer {API_KEY}"},
                           excluded_checks=excluded, timeout=30)

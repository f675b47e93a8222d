"""``hermes-gateway serve`` as people start it: its own process, its own embedded Valkey, on
each event loop it can run on; a signed message in, the answer at the callback, a clean
stop on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapters.webhook import signed_headers
from agent_core.models.replay import ReplayModelServer
from tests.integration.conftest import answer_echo

ROOT = Path(__file__).resolve().parents[2]
SECRET = "serve-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
async def test_serve_answers_a_webhook_message_and_stops_cleanly(
        event_loop: str, tmp_path: Path, callback_server: dict[str, Any]) -> None:
    if event_loop == "uvloop":
        pytest.importorskip("uvloop")
    model = ReplayModelServer(responder=answer_echo)
    await model.start()
    port = free_port()
    env = {**os.environ, "HERMES_DATA_DIR": str(tmp_path), "HERMES_EVENT_LOOP": event_loop,
           "LLM_PROVIDER": "openai", "LLM_MODEL_NAME": "scripted",
           "LLM_BASE_URL": model.openai_url, "LLM_API_KEY": "sk-test-0123456789abcdef",
           "HERMES_WEBHOOK_SECRETS": json.dumps({"crm": SECRET}), "REDIS_URL": "",
           "SLACK_BOT_TOKEN": "", "TELEGRAM_BOT_TOKEN": "", "LOG_LEVEL": "INFO"}
    log = tmp_path / "serve.log"
    with log.open("wb") as errors:
        gateway = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=errors)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                assert gateway.poll() is None, log.read_text()
                try:
                    async with http.get(f"{base}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            else:
                pytest.fail("serve did not become ready:\n" + log.read_text())
            body = json.dumps({"conversation_id": "t1", "user_id": "u1", "text": "ping?",
                               "callback_url": callback_server["url"]}).encode()
            async with http.post(f"{base}/webhook/crm", data=body,
                                 headers=signed_headers(SECRET, body)) as r:
                assert r.status == 202, await r.text()
            for _ in range(200):
                if callback_server["received"]:
                    break
                await asyncio.sleep(0.05)
            assert [p["text"] for _, _, p in callback_server["received"]] == \
                ["answer to: ping?"], log.read_text()
        gateway.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(gateway.wait, 30) == 0, log.read_text()
    finally:
        if gateway.poll() is None:
            gateway.kill()
        await model.stop()
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text
    assert not (tmp_path / "valkey" / "server.json").exists(), "its Valkey was stopped too"

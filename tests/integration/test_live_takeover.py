"""A replica killed in the middle of streaming an answer: another one, sharing the store,
takes the task over once the dead one's lease runs out, finishes the reply it left, and the
person sees the answer once, complete (a gateway process SIGKILLed mid-stream; the real
slack-bolt and python-telegram-bot against the stand-ins)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_core.models.replay import ReplayModelServer, Reply
from tests.integration.conftest import (
    SLACK_SECRET,
    SLACK_TOKEN,
    TELEGRAM_SECRET,
    TELEGRAM_TOKEN,
    GatewayFactory,
    slack_headers,
)
from tests.integration.test_slack import event_body, mention
from tests.integration.test_telegram import GROUP
from tests.integration.test_telegram import mention as group_mention
from tests.standins.slack_api import SlackAPI
from tests.standins.telegram_api import TelegramAPI

ROOT = Path(__file__).resolve().parents[2]
ANSWER = " ".join(f"Point {i}: sales in region {i} grew by {i + 3}%." for i in range(12))

Victim = Callable[..., Any]


@pytest.fixture
async def victim(redis_url: str, model_server: ReplayModelServer, tmp_path: Path
                 ) -> AsyncIterator[Victim]:
    """``await victim(prefix, **env)``: a gateway in its own process, (its port, the
    process); its first model call streams ANSWER slowly, later ones fast."""
    started: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []
    calls = {"n": 0}

    def streaming(path: str, body: dict[str, Any]) -> Reply:
        calls["n"] += 1
        return Reply(ANSWER, pace=0.15 if calls["n"] == 1 else 0.0)

    model_server.responder = streaming

    async def start(prefix: str, **env: str) -> tuple[int, subprocess.Popen[bytes]]:
        values = {**os.environ, "REDIS_URL": redis_url, "REDIS_PREFIX": prefix,
                  "HERMES_DATA_DIR": str(tmp_path / "victim"), "LLM_PROVIDER": "openai",
                  "LLM_MODEL_NAME": "scripted", "LLM_BASE_URL": model_server.openai_url,
                  "LLM_API_KEY": "sk-test-0123456789abcdef", "LLM_MAX_RETRIES": "0",
                  "LLM_STREAM": "true", "HERMES_LEASE_SECONDS": "3",
                  "AGENT_REPLAN_EVERY": "0", "PYTHONPATH": str(ROOT), **env}
        log = (tmp_path / "victim.log").open("wb")
        logs.append(log)
        process = subprocess.Popen([sys.executable, "-m", "tests.integration.victim"],
                                   env=values, cwd=ROOT, stdout=subprocess.PIPE, stderr=log)
        started.append(process)
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
        assert line.strip(), (tmp_path / "victim.log").read_text()[-2000:]
        return int(line), process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
    for log in logs:
        log.close()


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the victim (it dies holding its lease, mid-request)."""
    process.send_signal(signal.SIGKILL)
    process.wait(10)


async def until(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_slack_stream_cut_off_by_a_dead_replica_is_finished_by_another(
        make_gateway: GatewayFactory, victim: Victim) -> None:
    slack = SlackAPI()
    await slack.start()
    prefix = f"take{os.getpid()}{int(time.time() * 1000) % 10**8}"
    try:
        port, process = await victim(prefix, SLACK_BOT_TOKEN=SLACK_TOKEN,
                            SLACK_SIGNING_SECRET=SLACK_SECRET, SLACK_API_URL=slack.url)
        event = mention("summarise the regions")
        body = event_body(event)
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/slack/events", data=body,
                headers=slack_headers(body)) as response:
            assert response.status == 200
        await until(lambda: len(slack.of("chat.appendStream")) >= 2)
        kill(process)  # mid-stream: the stream is open, half written
        [cut] = slack.thread("C9", event["ts"])
        assert cut.streaming and 0 < len(cut.text) < len(ANSWER)

        h = await make_gateway(slack=True, slack_api_url=slack.url, redis_prefix=prefix,
                               llm_stream=True, hermes_lease_seconds=3)
        await until(lambda: any(m.shown() == ANSWER and not m.streaming
                                for m in slack.thread("C9", event["ts"])))
        await h.wait_idle()
        [message] = slack.thread("C9", event["ts"])
        assert message.ts == cut.ts, "the dead replica's stream was finished, not replaced"
        assert message.shown() == ANSWER and not message.streaming
        assert len(slack.of("chat.startStream")) == 1
    finally:
        await slack.stop()


async def test_a_telegram_message_edited_in_place_is_finished_by_another_replica(
        make_gateway: GatewayFactory, victim: Victim) -> None:
    telegram = TelegramAPI(TELEGRAM_TOKEN)
    await telegram.start()
    prefix = f"take{os.getpid()}{int(time.time() * 1000) % 10**8}"
    try:
        port, process = await victim(prefix, TELEGRAM_BOT_TOKEN=TELEGRAM_TOKEN,
                            TELEGRAM_WEBHOOK_SECRET=TELEGRAM_SECRET,
                            TELEGRAM_API_URL=telegram.url, TELEGRAM_MODE="webhook",
                            HERMES_PUBLIC_URL="https://hermes.example.test")
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/telegram/webhook",
                json=group_mention("summarise the regions"),
                headers={"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}) as response:
            assert response.status == 200
        await until(lambda: any(m.edits >= 1 for m in telegram.chat(GROUP["id"])))
        kill(process)
        [cut] = telegram.chat(GROUP["id"])

        h = await make_gateway(telegram=True, telegram_api_url=telegram.url,
                               redis_prefix=prefix, llm_stream=True, hermes_lease_seconds=3)
        await until(lambda: any(m.text == ANSWER for m in telegram.chat(GROUP["id"])))
        await h.wait_idle()
        [message] = telegram.chat(GROUP["id"])
        assert message.message_id == cut.message_id and message.text == ANSWER
        assert len(telegram.of("sendMessage")) == 1, "one message, edited by both replicas"
    finally:
        await telegram.stop()


async def test_a_replica_killed_while_stopping_its_stream_leaves_it_to_another(
        make_gateway: GatewayFactory, victim: Victim) -> None:
    """The task had answered and the dead replica was ending the stream: the other finds
    the task answered (it is not run again) and the reply still live, with a stream whose
    text it cannot know; it stops that stream and edits it to the answer."""
    slack = SlackAPI()
    await slack.start()
    prefix = f"take{os.getpid()}{int(time.time() * 1000) % 10**8}"
    try:
        port, process = await victim(prefix, SLACK_BOT_TOKEN=SLACK_TOKEN,
                                     SLACK_SIGNING_SECRET=SLACK_SECRET,
                                     SLACK_API_URL=slack.url)
        slack.inject("chat.stopStream", "timeout")  # held: the replica waits on it
        event = mention("summarise the regions")
        body = event_body(event)
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/slack/events", data=body,
                headers=slack_headers(body)) as response:
            assert response.status == 200
        await until(lambda: any(a.method == "chat.stopStream" for a in slack.attempts))
        kill(process)
        [cut] = slack.thread("C9", event["ts"])
        assert cut.streaming

        h = await make_gateway(slack=True, slack_api_url=slack.url, redis_prefix=prefix,
                               llm_stream=True, hermes_lease_seconds=3)
        await until(lambda: any(m.shown() == ANSWER and not m.streaming
                                for m in slack.thread("C9", event["ts"])))
        await h.wait_idle()
        [message] = slack.thread("C9", event["ts"])
        assert message.ts == cut.ts and message.shown() == ANSWER
        assert len(h.model.requests) == 1, "the answered task was not run again"
    finally:
        await slack.stop()


async def test_a_telegram_draft_cut_off_by_a_dead_replica_ends_in_one_answer(
        make_gateway: GatewayFactory, victim: Victim) -> None:
    """A private chat's draft has no message to finish: the other replica drafts under the
    same draft id (the person sees the draft go on) and posts the answer once."""
    from tests.integration.test_telegram import PRIVATE, update

    telegram = TelegramAPI(TELEGRAM_TOKEN)
    await telegram.start()
    prefix = f"take{os.getpid()}{int(time.time() * 1000) % 10**8}"
    try:
        port, process = await victim(prefix, TELEGRAM_BOT_TOKEN=TELEGRAM_TOKEN,
                                     TELEGRAM_WEBHOOK_SECRET=TELEGRAM_SECRET,
                                     TELEGRAM_API_URL=telegram.url, TELEGRAM_MODE="webhook",
                                     HERMES_PUBLIC_URL="https://hermes.example.test")
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/telegram/webhook",
                json=update("summarise the regions"),
                headers={"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}) as response:
            assert response.status == 200
        await until(lambda: sum(1 for chat, _, text in telegram.draft_log
                                if chat == PRIVATE["id"] and "Point" in text) >= 2)
        kill(process)
        drafted = {draft for _, draft, _ in telegram.draft_log}

        h = await make_gateway(telegram=True, telegram_api_url=telegram.url,
                               redis_prefix=prefix, llm_stream=True, hermes_lease_seconds=3)
        await until(lambda: any(m.text == ANSWER for m in telegram.chat(PRIVATE["id"])))
        await h.wait_idle()
        assert [m.text for m in telegram.chat(PRIVATE["id"])] == [ANSWER]
        assert {draft for _, draft, _ in telegram.draft_log} == drafted, "one draft id"
    finally:
        await telegram.stop()

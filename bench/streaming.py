"""How soon a person sees an answer being written, and what it costs in platform calls.

One process runs a gateway (aiohttp, embedded Valkey), the local stand-ins of the Slack
Web API and the Telegram Bot API (tests/standins) and a model server that streams each
answer token by token (OpenAI's SSE format): a first-token latency, then one token every
``--token-ms``. N conversations send one question each at the same moment. For each
answer the bench takes the time the model wrote its first token and the time the
stand-in received the first request that shows text of it (Slack: chat.startStream or
chat.appendStream with text, or a post; Telegram: a draft with text, an edit with text, or
the answer), and prints p50 / p99 of that delay for each surface, then the platform calls
made per answer, by method (Slack's and Telegram's rate limits are the budget: Slack's
appendStream is Tier 4, about 100 a minute per workspace; Telegram allows about one
message a second per chat and 20 a minute per group).

    .venv/bin/python bench/streaming.py [--conversations 1,50] [--repeat 20]
                                        [--tokens 80] [--token-ms 20] [--first-ms 150]

Surfaces: slack (a mention in a channel: a stream in its thread), telegram-private (a
draft), telegram-group (one message edited in place). Target: p50 <= 300 ms at one
conversation. Everything shares one event loop and this machine's cores, as a small
deployment's gateway shares its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.slack_out import WORKING  # noqa: E402
from agent_core.store.embedded import EmbeddedValkey  # noqa: E402
from gateway.app import create_app  # noqa: E402
from gateway.settings import GatewaySettings  # noqa: E402
from tests.integration.conftest import (  # noqa: E402
    SLACK_SECRET,
    SLACK_TOKEN,
    TELEGRAM_SECRET,
    TELEGRAM_TOKEN,
    slack_headers,
)
from tests.standins.slack_api import SlackAPI  # noqa: E402
from tests.standins.telegram_api import TelegramAPI  # noqa: E402

SURFACES = ("slack", "telegram-private", "telegram-group")


class StreamingModel:
    """An OpenAI-compatible server streaming ``tokens`` tokens per answer; remembers when
    it wrote the first token of each conversation's answer (by its ``conv-N`` tag)."""

    def __init__(self, tokens: int, token_ms: float, first_ms: float) -> None:
        self.tokens, self.gap, self.first = tokens, token_ms / 1000, first_ms / 1000
        self.first_token: dict[str, float] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        question = next(m["content"] for m in reversed(body["messages"])
                        if m["role"] == "user")
        tag = str(question).split()[0]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(self.first)
        for i in range(self.tokens):
            word = f"{tag} " if i == 0 else f"w{i} "
            piece = {"choices": [{"index": 0, "delta": {"content": word}}]}
            await response.write(f"data: {json.dumps(piece)}\n\n".encode())
            self.first_token.setdefault(tag, time.monotonic())
            await asyncio.sleep(self.gap)
        done = [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {"choices": [], "usage": {"prompt_tokens": 20,
                                          "completion_tokens": self.tokens,
                                          "total_tokens": 20 + self.tokens}}]
        for chunk in done:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _shows_text_slack(method: str, params: dict[str, Any]) -> bool:
    if method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
        return bool(params.get("markdown_text"))
    if method in ("chat.postMessage", "chat.update"):
        return bool(params.get("text")) and not str(params["text"]).startswith(WORKING)
    return False


def _shows_text_telegram(method: str, params: dict[str, Any]) -> bool:
    if method in ("sendMessageDraft", "editMessageText", "sendMessage"):
        text = str(params.get("text") or "")
        return bool(text) and not text.startswith(WORKING)
    return False


async def run(surface: str, conversations: int, model: StreamingModel, url: str,
              slack: SlackAPI, telegram: TelegramAPI, round_no: int
              ) -> tuple[list[float], Counter[str], int]:
    """One burst: the first-text delays (s), the platform calls by method, and answers."""
    model.first_token.clear()
    slack.attempts.clear()
    telegram.attempts.clear()
    tags = [f"conv-{round_no}-{n}" for n in range(conversations)]
    # Each conversation of each round in a channel or chat of its own (a chat's pace
    # carries over from one answer to the next).
    ids = [round_no * 1000 + n for n in range(conversations)]
    async with aiohttp.ClientSession() as session:
        async def send(n: int, tag: str) -> None:
            if surface == "slack":
                stamp = f"{int(time.time())}.{round_no * 1000 + n:06d}"
                event = {"type": "app_mention", "user": f"U{n}", "text": f"<@UBOT> {tag} hi",
                         "ts": stamp, "channel": f"C{ids[n]}", "event_ts": stamp}
                body = json.dumps({"token": "t", "team_id": "T1", "api_app_id": "A1",
                                   "type": "event_callback", "event_id": f"Ev{tag}",
                                   "event_time": int(time.time()), "event": event}).encode()
                async with session.post(f"{url}/slack/events", data=body,
                                        headers=slack_headers(body)) as r:
                    assert r.status == 200, await r.text()
                return
            private = surface == "telegram-private"
            chat = {"id": ids[n], "type": "private", "first_name": "P"} if private else \
                {"id": -ids[n], "type": "supergroup", "title": "G"}
            text = f"{tag} hi" if private else f"@hermes_test_bot {tag} hi"
            message: dict[str, Any] = {
                "message_id": n + 1, "date": int(time.time()), "chat": chat, "text": text,
                "from": {"id": ids[n], "is_bot": False, "first_name": "P"}}
            if not private:
                message["entities"] = [{"type": "mention", "offset": 0, "length": 16}]
            update = {"update_id": round_no * 100_000 + n, "message": message}
            async with session.post(f"{url}/telegram/webhook", json=update, headers={
                    "X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}) as r:
                assert r.status == 200, await r.text()

        await asyncio.gather(*(send(n, tag) for n, tag in enumerate(tags)))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _answers(surface, slack, telegram, model.tokens, tags) >= conversations:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)  # the last calls of the burst (statuses cleared)
    delays = []
    attempts = slack.attempts if surface == "slack" else telegram.attempts
    shows = _shows_text_slack if surface == "slack" else _shows_text_telegram
    for n, tag in enumerate(tags):
        where = f"C{ids[n]}" if surface == "slack" else (
            ids[n] if surface == "telegram-private" else -ids[n])
        key = "channel" if surface == "slack" else "chat_id"
        first = next((a.at for a in attempts if a.method != "getMe" and _same(
            a.params.get(key), where) and shows(a.method, a.params)), None)
        if first is not None and tag in model.first_token:
            delays.append(first - model.first_token[tag])
    calls = Counter(a.method for a in attempts)
    return delays, calls, _answers(surface, slack, telegram, model.tokens, tags)


def _same(a: Any, b: Any) -> bool:
    return str(a) == str(b)


def _answers(surface: str, slack: SlackAPI, telegram: TelegramAPI, tokens: int,
             tags: list[str]) -> int:
    """How many of this burst's answers a person sees complete."""
    last, wanted = f"w{tokens - 1}", set(tags)
    if surface == "slack":
        texts = [m.shown() for m in slack.everything() if not m.streaming]
    else:
        texts = [m.text for m in telegram.messages.values() if not m.deleted]
    return sum(1 for t in texts if last in t and t.split()[0] in wanted)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


async def main(sizes: list[int], repeat: int, tokens: int, token_ms: float,
               first_ms: float) -> None:
    data = Path(tempfile.mkdtemp(prefix="hg-bench-"))
    server = EmbeddedValkey(data / "valkey")
    info = await server.start()
    model = StreamingModel(tokens, token_ms, first_ms)
    await model.start()
    slack, telegram = SlackAPI(), TelegramAPI(TELEGRAM_TOKEN)
    await slack.start()
    await telegram.start()
    settings = GatewaySettings(  # type: ignore[call-arg]
        _env_file=None, redis_url=info.url, hermes_data_dir=data / "gw",
        llm_provider="openai", llm_model_name="bench", llm_base_url=model.url,
        llm_api_key="sk-bench-0123456789abcdef", llm_stream=True, llm_max_retries=0,
        agent_replan_every=0, slack_bot_token=SLACK_TOKEN, slack_signing_secret=SLACK_SECRET,
        slack_api_url=slack.url, telegram_bot_token=TELEGRAM_TOKEN,
        telegram_webhook_secret=TELEGRAM_SECRET, telegram_api_url=telegram.url,
        telegram_mode="webhook", hermes_public_url="https://hermes.example.test")
    runner = web.AppRunner(create_app(settings), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    print(f"model: first token after {first_ms:.0f} ms, then {tokens} tokens "
          f"{token_ms:.0f} ms apart")
    round_no = 0
    try:
        for surface in SURFACES:
            for size in sizes:
                delays: list[float] = []
                calls: Counter[str] = Counter()
                answers = 0
                rounds = repeat if size == 1 else max(1, repeat // size)
                for _ in range(rounds):
                    round_no += 1
                    got, used, done = await run(surface, size, model, url, slack, telegram,
                                                round_no)
                    delays += got
                    calls += used
                    answers += done
                per = {m: round(c / max(1, answers), 1) for m, c in sorted(calls.items())
                       if m not in ("auth.test", "getMe", "setWebhook")}
                print(f"{surface:17} {size:3} conversation(s) x {rounds:2}: first text after "
                      f"the first token p50 {pct(delays, 0.5):6.0f} ms  p99 "
                      f"{pct(delays, 0.99):6.0f} ms  ({len(delays)} answers); calls per "
                      f"answer {sum(per.values()):.1f}: {per}")
    finally:
        await runner.cleanup()
        await slack.stop()
        await telegram.stop()
        await model.stop()
        await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", default="1,50",
                        help="burst sizes, comma separated")
    parser.add_argument("--repeat", type=int, default=20,
                        help="answers per size (bursts of the size)")
    parser.add_argument("--tokens", type=int, default=80)
    parser.add_argument("--token-ms", type=float, default=20)
    parser.add_argument("--first-ms", type=float, default=150)
    args = parser.parse_args()
    asyncio.run(main([int(n) for n in args.conversations.split(",")], args.repeat,
                     args.tokens, args.token_ms, args.first_ms))

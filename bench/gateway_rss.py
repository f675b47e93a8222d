"""The gateway's resident memory with Slack and Telegram configured, idle and under load.

Runs ``hermes-gateway serve`` (its own process, embedded Valkey, Slack Events API and a
Telegram webhook pointed at the local stand-ins of those APIs from tests/standins, the
scripted model server answering each call after ``--model-latency`` seconds), then sends
``--tasks`` at once: half as signed Slack mentions, half as Telegram group mentions. It
waits until every answer has reached its platform (each exactly once) and prints, as the
median of ``--runs`` fresh gateways:

- RSS when healthy (nothing asked yet) and the peak RSS (VmHWM) after the tasks;
- the embedded Valkey's RSS, apart (a process of its own);
- the floor, measured in turns with the gateway (which goes first alternates): a
  do-nothing aiohttp app on uvloop in a process that has imported the third-party
  libraries such a gateway loads (``LIBRARIES``, as ``agent_core.lean`` has them imported:
  no cryptography bindings for python-telegram-bot, no OpenTelemetry metrics SDK for
  redis-py, frozenlist's pure-Python list; and, as the console script has it, no httpx
  command line), sent the same requests: its peak RSS, and the gateway's over it. What
  the libraries cost is the floor; the rest is ours.

    .venv/bin/python bench/gateway_rss.py [--tasks 30] [--runs 3] [--model-latency 0.5]

Target (issue 18, kept by issue 46): peak RSS <= 80 MB after 30 concurrent tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from gateway_load import wait_ready

from agent_core.models.replay import ReplayModelServer, Reply

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.standins.slack_api import SlackAPI  # noqa: E402
from tests.standins.telegram_api import BOT_USERNAME, TelegramAPI  # noqa: E402

SLACK_SECRET = "bench-slack-signing-secret"
TELEGRAM_TOKEN = "123456:BENCH-telegram-token-abcdefghijklmn"
TELEGRAM_SECRET = "bench-telegram-secret"
GROUP = {"id": -100123, "type": "supergroup", "title": "Sales"}
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith(("LLM_", "HERMES_", "SLACK_", "TELEGRAM_", "OTEL_"))}


#: The third-party modules a gateway with Slack and Telegram imports (their packages import
#: the rest): the floor's imports. Checked against a serving gateway's ``sys.modules``
#: after the 30 tasks: the gateway had every module the floor loads (1086), and besides
#: its own (~195) eleven more (pybase64, statistics, the idna codec, runpy, ...).
LIBRARIES = ("uvloop", "orjson", "hiredis", "aiohttp.web", "redis.asyncio", "pydantic",
             "pydantic_settings", "prometheus_client", "apscheduler.triggers.cron",
             "apscheduler.triggers.date", "apscheduler.triggers.interval", "dotenv",
             "tzlocal", "slack_bolt.async_app", "slack_bolt.adapter.aiohttp",
             "slack_sdk.web.async_client", "telegram", "httpx")

# The floor: the libraries imported, a do-nothing app answering 200 on the gateway's paths.
_FLOOR = """
import os, resource, sys
os.environ["FROZENLIST_NO_EXTENSIONS"] = "1"  # as agent_core.lean imports frozenlist
import frozenlist
del os.environ["FROZENLIST_NO_EXTENSIONS"]
def without(blocked, module):  # as agent_core.lean imports telegram and redis-py
    sys.modules[blocked] = None
    try:
        __import__(module)
    finally:
        del sys.modules[blocked]
without("opentelemetry.sdk.metrics", "redis.asyncio")
import types  # as the console script keeps httpx from importing its command line
def main(): pass
sys.modules["httpx._main"] = types.ModuleType("httpx._main")
sys.modules["httpx._main"].main = main
without("cryptography.hazmat", "telegram")
import importlib
for name in sys.argv[2].split(","):
    importlib.import_module(name)
import uvloop
uvloop.install()
from aiohttp import web

async def accept(request):
    await request.read()
    return web.json_response({"ok": True})

app = web.Application()
app.router.add_post("/slack/events", accept)
app.router.add_post("/telegram/webhook", accept)
app.router.add_get("/readyz", accept)
print(sum(1 for m in sys.modules if m.split(".")[0] in sys.argv[3].split(",")), flush=True)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def status_kb(pid: int, field: str) -> int:
    """A /proc/<pid>/status figure in kB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def slack_mention(n: int) -> tuple[bytes, dict[str, str]]:
    ts = f"{int(time.time())}.{n:06d}"
    body = json.dumps({
        "token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": f"Ev{n}", "event_time": int(time.time()),
        "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": True}],
        "event": {"type": "app_mention", "user": f"U{n}", "text": f"<@UBOT> question {n}",
                  "ts": ts, "channel": f"C{n}", "event_ts": ts}}).encode()
    stamp = str(int(time.time()))
    signature = "v0=" + hmac.new(SLACK_SECRET.encode(), f"v0:{stamp}:".encode() + body,
                                 hashlib.sha256).hexdigest()
    return body, {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature,
                  "Content-Type": "application/json"}


def telegram_mention(n: int) -> dict[str, Any]:
    handle = f"@{BOT_USERNAME}"
    return {"update_id": 1000 + n, "message": {
        "message_id": 5000 + n, "date": int(time.time()), "chat": {**GROUP, "id": -1000 - n},
        "from": {"id": 40 + n, "is_bot": False, "first_name": f"P{n}"},
        "text": f"{handle} question {n}",
        "entities": [{"type": "mention", "offset": 0, "length": len(handle)}]}}


#: A whole answer of the scripted model (a streamed one is "answer-" for a moment).
ANSWER = re.compile(r"answer-\d+")


def delivered(slack: SlackAPI, telegram: TelegramAPI) -> list[str]:
    """Every whole answer a person sees on a platform (one entry per message; posted,
    edited or streamed)."""
    texts = [m.shown() for messages in slack.messages.values() for m in messages.values()
             if not m.streaming and not m.deleted]
    texts += [m.text for m in telegram.messages.values() if not m.deleted]
    return [t for t in texts if ANSWER.fullmatch(t)]


async def one_run(tasks: int, latency: float) -> dict[str, float]:
    slack, telegram = SlackAPI(), TelegramAPI(TELEGRAM_TOKEN)
    await slack.start()
    await telegram.start()
    async with ReplayModelServer() as model:
        for i in range(tasks):
            model.add(Reply(f"answer-{i}", delay=latency))
        with tempfile.TemporaryDirectory() as data:
            port = _free_port()
            env = {**ENV, "HERMES_DATA_DIR": data, "LOG_LEVEL": "WARNING",
                   "LLM_PROVIDER": "openai", "LLM_MODEL_NAME": "scripted",
                   "LLM_BASE_URL": model.openai_url, "LLM_API_KEY": "sk-bench-0123456789",
                   "AGENT_REPLAN_EVERY": "0", "SLACK_BOT_TOKEN": "xoxb-bench-0123456789",
                   "SLACK_SIGNING_SECRET": SLACK_SECRET, "SLACK_API_URL": slack.url,
                   "TELEGRAM_BOT_TOKEN": TELEGRAM_TOKEN,
                   "TELEGRAM_WEBHOOK_SECRET": TELEGRAM_SECRET,
                   "TELEGRAM_API_URL": telegram.url, "TELEGRAM_MODE": "webhook",
                   "HERMES_PUBLIC_URL": f"http://127.0.0.1:{port}"}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), env=env,
                cwd=ROOT, stdout=asyncio.subprocess.DEVNULL,
                stderr=(Path(data) / "gateway.log").open("wb"))
            base = f"http://127.0.0.1:{port}"
            try:
                async with aiohttp.ClientSession() as http:
                    await wait_ready(http, base, seconds=30.0,
                                     exited=lambda: proc.returncode is not None)
                    idle = status_kb(proc.pid, "VmRSS")
                    await asyncio.gather(*(
                        _send(http, base, i) for i in range(tasks)))
                    deadline = time.monotonic() + 120
                    while len(set(delivered(slack, telegram))) < tasks:
                        if time.monotonic() > deadline or proc.returncode is not None:
                            log = (Path(data) / "gateway.log").read_text()[-2000:]
                            raise SystemExit(f"answers missing: {delivered(slack, telegram)}"
                                             f"\n{log}")
                        await asyncio.sleep(0.05)
                    peak = status_kb(proc.pid, "VmHWM")
                    valkey = sum(status_kb(c, "VmRSS") for c in children(proc.pid))
                answers = delivered(slack, telegram)
                assert len(answers) == tasks, f"an answer came twice: {sorted(answers)}"
            finally:
                proc.terminate()
                await proc.wait()
    await slack.stop()
    await telegram.stop()
    return {"idle": idle / 1024, "peak": peak / 1024, "valkey": valkey / 1024}


async def _send(http: aiohttp.ClientSession, base: str, n: int) -> None:
    if n % 2:
        body, headers = slack_mention(n)
        async with http.post(f"{base}/slack/events", data=body, headers=headers) as r:
            assert r.status == 200, await r.text()
    else:
        async with http.post(f"{base}/telegram/webhook", json=telegram_mention(n),
                             headers={"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}
                             ) as r:
            assert r.status == 200, await r.text()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def floor_run(tasks: int) -> dict[str, float]:
    """The floor's peak RSS after the same requests, and how many modules it imported."""
    port = _free_port()
    tops = sorted({name.split(".")[0] for name in LIBRARIES})
    with tempfile.TemporaryDirectory() as empty:
        # No trust store read as aiohttp is imported: a gateway reads its own at its first
        # TLS handshake (agent_core._tls), and this bench makes none.
        (Path(empty) / "none.pem").touch()
        env = {**ENV, "SSL_CERT_FILE": str(Path(empty) / "none.pem"), "SSL_CERT_DIR": empty}
        return await _floor(tasks, port, tops, env)


async def _floor(tasks: int, port: int, tops: list[str], env: dict[str, str]
                 ) -> dict[str, float]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _FLOOR, str(port), ",".join(LIBRARIES), ",".join(tops),
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        modules = int(await proc.stdout.readline())
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            await wait_ready(http, base, seconds=30.0,
                             exited=lambda: proc.returncode is not None)
            idle = status_kb(proc.pid, "VmRSS")
            await asyncio.gather(*(_send(http, base, i) for i in range(tasks)))
            peak = status_kb(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        await proc.wait()
    return {"idle": idle / 1024, "peak": peak / 1024, "modules": modules}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model-latency", type=float, default=0.5)
    args = parser.parse_args()
    runs, floors = [], []
    for n in range(args.runs):
        if n % 2:
            floors.append(asyncio.run(floor_run(args.tasks)))
        runs.append(asyncio.run(one_run(args.tasks, args.model_latency)))
        if not n % 2:
            floors.append(asyncio.run(floor_run(args.tasks)))
    med = {k: statistics.median(r[k] for r in runs) for k in ("idle", "peak", "valkey")}
    floor = {k: statistics.median(r[k] for r in floors) for k in ("idle", "peak", "modules")}
    print(f"gateway with Slack and Telegram, {args.tasks} concurrent tasks, "
          f"median of {args.runs} fresh processes:")
    print(f"  RSS when healthy   {med['idle']:6.1f} MB")
    print(f"  peak RSS (VmHWM)   {med['peak']:6.1f} MB   (target <= 80 MB; runs: "
          + " / ".join(f"{r['peak']:.1f}" for r in runs) + ")")
    print(f"  embedded Valkey    {med['valkey']:6.1f} MB   (its own process)")
    print(f"floor: the libraries ({floor['modules']:.0f} modules), a do-nothing aiohttp app, "
          "the same requests, in turns with the gateway:")
    print(f"  RSS when healthy   {floor['idle']:6.1f} MB")
    print(f"  peak RSS (VmHWM)   {floor['peak']:6.1f} MB")
    print(f"gateway / floor      {med['peak'] / floor['peak']:6.2f}x peak "
          f"(ours: {med['peak'] - floor['peak']:.1f} MB)")


if __name__ == "__main__":
    main()

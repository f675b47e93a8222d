"""Budgets and rate limits through the gateway: two gateways sharing one store and one
person's parallel tasks against a small budget, the texts people see (refusal, warning,
/usage), the operators' view, a schedule paused by its budget, a killed worker's hold, and
the rate limit of a person in a Slack channel."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agent_core.budget import Charge
from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.store import connect
from tests.integration.conftest import (
    WEBHOOK_SECRET,
    GatewayFactory,
    Harness,
    answer_echo,
    api_key,
    bearer,
)
from tests.integration.test_slack import answers, event_body, mention, send
from tests.integration.test_webhook import body_of, signed_headers

ROOT = Path(__file__).resolve().parents[2]
#: $1 a token of output, input free: with LLM_MAX_TOKENS=50 a call holds $50 at worst, and
#: the scripted replies below use all 50 tokens: a call costs exactly what it held.
PRICES = {"scripted": {"input_per_mtok": 0, "output_per_mtok": 1_000_000}}


def full_answers(path: str, body: dict[str, Any]) -> Any:
    """answer_echo, using all of max_tokens, after a moment (calls overlap)."""
    reply = answer_echo(path, body)
    return Reply(reply.text, completion_tokens=body["max_tokens"], delay=0.3)


def budgeted(budgets: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"hermes_budgets": budgets, "hermes_model_prices": PRICES, "llm_max_tokens": 50,
            "hermes_tools": ["tools.sales"], **more}


def metric(text: str, name: str, **labels: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


async def test_two_gateways_hold_one_persons_parallel_tasks_to_their_budget(
        make_gateway: GatewayFactory, model_server: ReplayModelServer) -> None:
    prefix = f"gw{uuid.uuid4().hex[:10]}"
    keys = [api_key("alice"), api_key("bob"), api_key("ops", "admin")]
    rules = [{"scope": "user", "window": "day", "usd": 120, "warn_at": 0.4}]
    gateways = [await make_gateway(redis_prefix=prefix, hermes_api_keys=keys,
                                   **budgeted(rules)) for _ in range(2)]
    model_server.responder = full_answers

    async def ask(h: Harness, n: int, user: str = "alice") -> str:
        response = await h.client.post("/agent/run-async", headers=bearer(user), json={
            "text": f"question {n}", "conversation_id": f"c{n}"})
        assert response.status == 202, await response.text()
        return str((await response.json())["task_id"])

    tasks = await asyncio.gather(*(ask(gateways[n % 2], n) for n in range(10)))
    ended = [await gateways[n % 2].wait_task(t, "answered", "limit", headers=bearer("alice"))
             for n, t in enumerate(tasks)]
    answered = [t for t in ended if t["status"] == "answered"]
    refused = [t for t in ended if t["status"] == "limit"]
    assert len(answered) == 2 and len(refused) == 8, "two calls of $50 fit in $120"
    assert {t["budget"]["scope"] for t in refused} == {"user"} and all(
        t["budget"] is None for t in answered)
    for task in refused:
        assert task["text"].startswith("I can't start on this: the next step needs up to "
                                       "$50.00 and your daily USD budget has $")
        assert task["text"].endswith("It resets tomorrow at 00:00 (UTC).")
    # Somebody else's budget is their own.
    theirs = await ask(gateways[1], 99, user="bob")
    assert (await gateways[1].wait_task(theirs, "answered", headers=bearer("bob")))[
        "text"] == "answer to: question 99"

    async def alices() -> dict[str, Any]:
        response = await gateways[0].client.get(
            "/agent/usage", params={"scope": "user", "id": "api:alice"},
            headers=bearer("ops"))
        assert response.status == 200, await response.text()
        [use] = (await response.json())["budgets"]
        return dict(use)

    deadline = time.monotonic() + 10
    while (use := await alices())["reserved_usd"] or use["used_usd"] < 100:
        assert time.monotonic() < deadline, use  # the last settles go within 50 ms
        await asyncio.sleep(0.02)
    assert (use["used_usd"], use["usd"], use["reserved_usd"]) == (100.0, 120.0, 0.0)
    # Operators only.
    for who in ("alice", "bob"):
        denied = await gateways[0].client.get(
            "/agent/usage", params={"scope": "user", "id": "api:alice"}, headers=bearer(who))
        assert denied.status == 403
    # Each refusal is in the audit log, and the spending in the metrics of both.
    refusals: list[dict[str, Any]] = []
    while len(refusals) < 8:
        audit = await (await gateways[0].client.get(
            "/agent/audit", params={"user": "api:alice"}, headers=bearer("ops"))).json()
        refusals = [e for e in audit["entries"] if e.get("type") == "budget_refused"]
        await asyncio.sleep(0.02)
    assert {(e["scope"], e["unit"], e["limit"], e["wanted"]) for e in refusals} == {
        ("user", "usd", 120.0, 50.0)}
    scraped = [await (await h.client.get("/metrics", headers=bearer("ops"))).text()
               for h in gateways]
    assert sum(metric(t, "hermes_spent_usd_total", model="openai:scripted", channel="api",
                      scope="user") for t in scraped) == 150.0, "alice's $100, bob's $50"
    assert sum(metric(t, "hermes_budget_refusals_total", scope="user", window="day")
               for t in scraped) == 8.0


async def test_a_slack_thread_is_warned_once_then_told_no_and_usage_says_where_it_stands(
        make_gateway: GatewayFactory, model_server: ReplayModelServer) -> None:
    rules = [{"scope": "user", "window": "day", "usd": 120, "warn_at": 0.4},
             {"scope": "global", "window": "month", "tokens": 10**6}]
    h = await make_gateway(slack=True, slack_progress="off",
                           hermes_timezone="America/New_York", **budgeted(rules))
    assert h.slack is not None
    model_server.responder = full_answers
    root = "1700000000.000100"

    def posts() -> list[str]:
        return [a["text"] for a in answers(h)]

    await send(h, event_body(mention("first", message_ts=root)))
    await h.wait_for(lambda: len(posts()) == 2)  # the answer, and the warning
    assert sorted(posts()) == [
        "Heads-up: 41% of your daily USD budget is used ($50.00 of $120.00). It resets "
        "tomorrow at 00:00 (America/New_York).", "answer to: first"]
    assert all(a["thread_ts"] == root for a in answers(h))
    await send(h, event_body(mention("second", thread_ts=root)))
    await h.wait_for(lambda: len(posts()) == 3)
    await send(h, event_body(mention("third", thread_ts=root)))
    await h.wait_for(lambda: len(posts()) == 4)
    assert posts()[2] == "answer to: second", "no second warning in the same window"
    assert posts()[3] == (
        "I can't start on this: the next step needs up to $50.00 and your daily USD budget "
        "has $20.00 left ($100.00 of $120.00 used). It resets tomorrow at 00:00 "
        "(America/New_York).")
    await send(h, event_body(mention("/usage", thread_ts=root)))
    await h.wait_for(lambda: len(posts()) == 5)
    tokens = 2 * (20 + 50)  # two calls: the scripted prompt tokens and all of max_tokens
    assert posts()[4].splitlines() == [
        "Your use of the model, in the current windows:",
        "• Your daily budget: $100.00 of $120.00 (83%); resets tomorrow at 00:00 "
        "(America/New_York)",
        f"• The deployment's monthly budget: {tokens} of 1,000,000 tokens (0%); resets on "
        f"{_first_of_next_month('America/New_York')} at 00:00 (America/New_York)"]


def _first_of_next_month(zone: str) -> str:
    import datetime as dt
    from zoneinfo import ZoneInfo

    today = dt.datetime.now(ZoneInfo(zone)).date()
    return (today.replace(day=1) + dt.timedelta(days=32)).replace(day=1).isoformat()


async def test_a_schedule_that_meets_its_budget_is_paused_and_its_owner_told(
        make_gateway: GatewayFactory, model_server: ReplayModelServer) -> None:
    rules = [{"scope": "schedule", "window": "day", "usd": 10}]
    h = await make_gateway(slack=True, **budgeted(rules))
    assert h.slack is not None
    model_server.responder = full_answers
    created = await h.client.post("/agent/schedules", json={
        "id": "daily", "name": "daily sales", "prompt": "Report the sales",
        "trigger": {"every": 3600}, "run_as": "slack:UOWNER",
        "target": {"channel": "slack", "address": {"channel": "CSALES"}}})
    assert created.status == 201, await created.text()
    assert (await h.client.post("/agent/schedules/daily/run")).status == 202

    def notices(channel: str) -> list[str]:
        assert h.slack is not None
        return [c["text"] for c in h.slack.of("chat.postMessage") if c["channel"] == channel]

    await h.wait_for(lambda: bool(notices("CSALES")) and bool(notices("DUOWNER")))
    for notice in (notices("CSALES")[0], notices("DUOWNER")[0]):
        assert notice.startswith("The scheduled report 'daily sales' (job daily) did not "
                                 "complete: I can't start on this: the next step needs up "
                                 "to $50.00 and this schedule's daily USD budget has $10.00 "
                                 "left ($0.00 of $10.00 used).")
        assert notice.endswith("The schedule is paused: resume it with POST "
                               "/agent/schedules/daily/resume once its budget allows, or "
                               "remove it with /unschedule daily.")
    job = await (await h.client.get("/agent/schedules/daily")).json()
    assert job["paused"] is True and job["next_run_at"] is None
    assert model_server.requests == []


async def test_a_person_past_the_rate_limit_in_a_channel_gets_one_notice_then_silence(
        make_gateway: GatewayFactory, model_server: ReplayModelServer) -> None:
    h = await make_gateway(slack=True, slack_progress="off", hermes_rate_limit="2/min")
    assert h.slack is not None
    rate = h.gateway.parts.router.rate
    assert rate is not None
    rate.clock = lambda: 1_700_000_000.0  # 22:13:20 UTC: the window ends at 22:14
    model_server.responder = answer_echo
    for n in range(4):
        response = await send(h, event_body(mention(f"m{n}", channel="C9", user="U1")))
        assert response.status == 200
    await send(h, event_body(mention("mine", channel="C9", user="U2")))
    await send(h, event_body(mention("elsewhere", channel="C7", user="U1")))
    await send(h, event_body({"type": "message", "channel_type": "im", "channel": "D1",
                              "user": "U1", "text": "in private", "ts": "1700000001.000001",
                              "event_ts": "1700000001.000001"}))
    await h.wait_for(lambda: len(answers(h)) == 6)
    await h.wait_idle()
    texts = sorted(a["text"] for a in answers(h))
    assert texts == sorted([
        "answer to: m0", "answer to: m1", "answer to: mine", "answer to: elsewhere",
        "answer to: in private",
        "Please slow down: I take up to 2 messages a minute from each person here. I'll read "
        "your messages again from 22:14 (UTC); until then I won't answer them."])
    assert not any("m3" in str(body) for _, body in model_server.requests)


async def test_a_killed_workers_hold_is_released_when_its_lease_expires(
        make_gateway: GatewayFactory, callback_server: dict[str, Any], redis_url: str,
        model_server: ReplayModelServer, tmp_path: Path) -> None:
    prefix = f"kb{uuid.uuid4().hex[:10]}"
    entered = asyncio.Event()

    def hanging(path: str, body: dict[str, Any]) -> Any:
        entered.set()
        return Reply("never delivered", delay=5)

    model_server.responder = hanging
    rules = [{"scope": "user", "window": "day", "tokens": 10**6}]
    env = {**os.environ, "REDIS_URL": redis_url, "REDIS_PREFIX": prefix,
           "HERMES_DATA_DIR": str(tmp_path / "victim"), "HERMES_BUDGETS": json.dumps(rules),
           "LLM_PROVIDER": "openai", "LLM_MODEL_NAME": "scripted", "LLM_MAX_TOKENS": "50",
           "LLM_BASE_URL": model_server.openai_url, "LLM_API_KEY": "sk-test-0123456789abcdef",
           "LLM_MAX_RETRIES": "0", "HERMES_LEASE_SECONDS": "3", "AGENT_REPLAN_EVERY": "0",
           "HERMES_TOOLS": "tools.sales",
           "HERMES_WEBHOOK_SECRETS": json.dumps({"crm": WEBHOOK_SECRET}),
           "HERMES_WEBHOOK_CALLBACK_HOSTS": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    errors = (tmp_path / "victim.log").open("wb")
    victim = subprocess.Popen([sys.executable, "-m", "tests.integration.victim"], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=errors)
    assert victim.stdout is not None
    redis = connect(redis_url)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(victim.stdout.readline), 30)
        assert line.strip(), (tmp_path / "victim.log").read_text()[-2000:]
        import aiohttp

        body = body_of(text="survive me", callback_url=callback_server["url"])
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{int(line)}/webhook/crm", data=body,
                headers=signed_headers(WEBHOOK_SECRET, body)) as response:
            assert response.status == 202
        await asyncio.wait_for(entered.wait(), 15)
        [counter] = [k async for k in redis.scan_iter(match=f"{prefix}:budget:*:c:*")]
        held = int(await redis.hget(counter, "rt") or 0)
        assert held > 50, "the call under way holds its worst case"
        victim.send_signal(signal.SIGKILL)  # the worker dies holding it
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)
        victim.stdout.close()
        errors.close()
    model_server.responder = answer_echo
    h = await make_gateway(redis_prefix=prefix, hermes_lease_seconds=3,
                           **budgeted(rules, hermes_model_prices={}))
    await h.wait_for(lambda: len(callback_server["received"]) == 1, timeout=30)
    assert callback_server["received"][0][2]["text"] == "answer to: survive me"
    await h.wait_idle()
    budget = h.gateway.parts.budget
    assert budget is not None
    who = Charge(task_id="probe", user_id=counter.decode().rsplit(":", 1)[1],
                 conversation_id="probe", role="user", model="", prompt_tokens=1,
                 max_tokens=1)
    while True:  # the next reserve after the dead hold's lease ends releases it
        await budget.settle(await budget.reserve(who), None)
        await budget.flush()
        fields = {k.decode(): int(v) for k, v in (await redis.hgetall(counter)).items()}
        if not fields.get("rt"):
            break
        assert fields["rt"] == held, "only the dead worker's hold is left"
        await asyncio.sleep(0.1)
    await redis.aclose()
    assert fields["t"] == 30, "never charged: only the recovered call's 20 + 10 tokens"

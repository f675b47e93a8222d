"""StoreBudget on the real store: replicas sharing a budget, holds of a dead process, windows
in a time zone, prices, warnings, exempt roles, and one round trip per model call."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent_core.budget import (
    BudgetRule,
    BudgetUse,
    Calendar,
    Charge,
    ModelPrice,
    Overrun,
    Prices,
    StoreBudget,
)
from agent_core.errors import BudgetExceeded
from agent_core.models import Usage
from agent_core.store import Keys, connect

ROOT = Path(__file__).resolve().parents[2]

Ledger = Callable[..., StoreBudget]


class Heard:
    """A BudgetListener that keeps what it hears."""

    def __init__(self) -> None:
        self.refusals: list[Overrun] = []
        self.spending: list[tuple[Usage, float | None, tuple[str, ...]]] = []
        self.warnings: list[BudgetUse] = []

    def refused(self, charge: Charge, overrun: Overrun) -> None:
        self.refusals.append(overrun)

    def spent(self, charge: Charge, usage: Usage, usd: float | None,
              scopes: tuple[str, ...]) -> None:
        self.spending.append((usage, usd, scopes))

    def warned(self, charge: Charge, use: BudgetUse) -> None:
        self.warnings.append(use)


def call(user: str = "u1", *, prompt: int = 100, max_tokens: int = 900, role: str = "user",
         channel: str = "slack", model: str = "m", started: bool = False) -> Charge:
    """A model call of ``user`` whose worst case is ``prompt + max_tokens`` tokens."""
    return Charge(task_id=f"t-{uuid.uuid4().hex[:6]}", user_id=user,
                  conversation_id=f"{channel}:{user}", role=role, model=model,
                  prompt_tokens=prompt, max_tokens=max_tokens, channel=channel,
                  started=started)


@pytest.fixture
async def ledger(redis_url: str) -> AsyncIterator[Ledger]:
    """StoreBudgets on one fresh prefix (each with its own connection: a replica each)."""
    prefix = f"tb{uuid.uuid4().hex[:10]}"
    made: list[StoreBudget] = []

    def factory(rules: list[BudgetRule], **options: Any) -> StoreBudget:
        budget = StoreBudget(connect(redis_url), Keys(prefix).budgets, rules, **options)
        made.append(budget)
        return budget

    factory.prefix = prefix  # type: ignore[attr-defined]
    yield factory
    for budget in made:
        await budget.aclose()
    redis = connect(redis_url)
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
    if keys:
        await redis.unlink(*keys)
    await redis.aclose()
    for budget in made:
        await budget.redis.aclose()


async def standing(budget: StoreBudget, charge: Charge) -> list[BudgetUse]:
    await budget.flush()
    return await budget.uses(budget.applying(charge))


async def test_replicas_sharing_a_budget_never_hold_or_spend_past_it(ledger: Ledger) -> None:
    rules = [BudgetRule(scope="user", window="day", tokens=5000, warn_at=None)]
    a, b = ledger(rules), ledger(rules)
    held_at_most: list[int] = []

    async def task(budget: StoreBudget, n: int) -> int | None:
        try:
            hold = await budget.reserve(call())  # 1000 tokens at worst
        except BudgetExceeded as exc:
            o = exc.overrun
            assert o.used + o.reserved + o.wanted > o.limit == 5000
            return None
        [use] = await budget.uses(budget.applying(call()))
        held_at_most.append(use.used_tokens + use.reserved_tokens)
        await asyncio.sleep(0.002 * (n % 7))
        usage = Usage(100, 37 * n % 900)  # never more than the hold
        await budget.settle(hold, usage)
        return usage.prompt_tokens + usage.completion_tokens

    spent = 0
    for _ in range(6):  # waves of 30 parallel calls over both replicas, until none fits
        results = await asyncio.gather(*(task(a if n % 2 else b, n) for n in range(30)))
        spent += sum(r for r in results if r is not None)
        # Another user's calls are not refused by this one's budget.
        other = await a.reserve(call("u2"))
        await a.settle(other, Usage(10, 10))
    await a.flush()
    [use] = await standing(b, call())
    assert use.used_tokens == spent <= 5000
    assert use.reserved_tokens == 0
    assert max(held_at_most) <= 5000, "used and held together never pass the limit"
    [theirs] = await standing(a, call("u2"))
    assert theirs.used_tokens == 6 * 20


async def test_a_call_costs_one_round_trip_its_settle_rides_on_the_next(
        ledger: Ledger) -> None:
    budget = ledger([BudgetRule(scope="user", window="day", tokens=10**9),
                     BudgetRule(scope="global", window="month", tokens=10**9)],
                    linger=60)  # no settle goes on its own: each waits for the next call
    redis = budget.redis
    await redis.config_resetstat()
    for _ in range(20):
        hold = await budget.reserve(call())
        await budget.settle(hold, Usage(100, 100))
    stats = await redis.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 20, stats.get("cmdstat_evalsha")
    [user, everyone] = await standing(budget, call())
    assert user.used_tokens == everyone.used_tokens == 20 * 200


async def test_a_dead_processes_hold_is_released_when_its_lease_expires(
        ledger: Ledger, redis_url: str, tmp_path: Path) -> None:
    budget = ledger([BudgetRule(scope="user", window="day", tokens=1500)])
    prefix = ledger.prefix  # type: ignore[attr-defined]
    log = (tmp_path / "holder.log").open("wb")
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.budget_holder", redis_url, prefix, "1500",
         "4"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=log)
    assert holder.stdout is not None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), 30)
        assert line.strip(), (tmp_path / "holder.log").read_text()
        holder.send_signal(signal.SIGKILL)  # dies holding 1000 of the 1500 tokens
        await asyncio.to_thread(holder.wait, 10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        holder.stdout.close()
        log.close()
    with pytest.raises(BudgetExceeded) as refused:
        await budget.reserve(call())  # its hold outlives it, until its lease (4 s) ends
    assert refused.value.overrun.reserved == 1000
    while True:  # the first reserve after the hold expired releases it
        try:
            hold = await budget.reserve(call())
            break
        except BudgetExceeded as exc:
            assert exc.overrun.reserved == 1000
            await asyncio.sleep(0.1)
    [use] = await budget.uses(budget.applying(call()))
    assert (use.used_tokens, use.reserved_tokens) == (0, 1000), "only the new hold"
    members = await budget.redis.zrange(hold.counters[0].holds, 0, -1)  # type: ignore[attr-defined]
    assert [m.decode().split("|")[0] for m in members] == [hold.id]


async def test_a_day_ends_at_midnight_in_the_deployments_time_zone(ledger: Ledger) -> None:
    zone = ZoneInfo("Europe/Berlin")
    now = [dt.datetime(2026, 3, 28, 23, 59, 30, tzinfo=zone).timestamp()]
    budget = ledger([BudgetRule(scope="user", window="day", tokens=1500)],
                    calendar=Calendar("Europe/Berlin", lambda: now[0]))
    await budget.settle(await budget.reserve(call()), Usage(600, 300))
    with pytest.raises(BudgetExceeded) as refused:
        await budget.reserve(call(started=True))
    o = refused.value.overrun
    midnight = dt.datetime(2026, 3, 29, tzinfo=zone)
    assert o.resets_at == midnight.timestamp()
    assert dt.datetime.fromtimestamp(o.resets_at, dt.UTC).hour == 23  # CET is UTC+1
    assert (o.limit, o.used, o.reserved, o.wanted) == (1500, 900, 0, 1000)
    assert refused.value.user_message == (
        "I stopped here: the next step needs up to 1,000 tokens and your daily token budget "
        "has 600 tokens left (900 of 1,500 tokens used). It resets tomorrow at 00:00 "
        "(Europe/Berlin). What I did so far is kept.")
    now[0] = midnight.timestamp() + 5  # a new day, with DST starting at 02:00: 23 hours
    hold = await budget.reserve(call())
    [use] = await budget.uses(budget.applying(call()))
    assert (use.used_tokens, use.reserved_tokens) == (0, 1000)
    assert use.resets_at - midnight.timestamp() == 23 * 3600
    await budget.settle(hold, Usage(10, 10))


async def test_prices_make_dollars_and_a_dollar_budget_refuses_in_dollars(
        ledger: Ledger) -> None:
    heard = Heard()
    prices = Prices({"gpt-x": ModelPrice(input_per_mtok=3.0, output_per_mtok=15.0,
                                         cached_input_per_mtok=0.3)})
    budget = ledger([BudgetRule(scope="global", window="month", usd=0.02, tokens=10**6)],
                    prices=prices, listener=heard)
    hold = await budget.reserve(call(model="openai:gpt-x", prompt=1000, max_tokens=100))
    [use] = await budget.uses(budget.applying(call()))
    assert use.reserved_usd == pytest.approx(1000 * 3e-6 + 100 * 15e-6)
    await budget.settle(hold, Usage(1000, 100, cached_prompt_tokens=600))
    [use] = await standing(budget, call())
    cost = 400 * 3e-6 + 600 * 0.3e-6 + 100 * 15e-6
    assert use.used_usd == pytest.approx(cost) and use.used_tokens == 1100
    assert heard.spending[-1][1] == pytest.approx(cost)
    # A model without a price counts its tokens only.
    await budget.settle(await budget.reserve(call(model="local:llama")), Usage(500, 500))
    [use] = await standing(budget, call())
    assert use.used_usd == pytest.approx(cost) and use.used_tokens == 2100
    assert heard.spending[-1][1] is None
    with pytest.raises(BudgetExceeded) as refused:
        await budget.reserve(call(model="gpt-x", prompt=100, max_tokens=1200))
    o = refused.value.overrun
    assert o.unit == "usd" and o.wanted == pytest.approx(100 * 3e-6 + 1200 * 15e-6)
    assert refused.value.user_message.startswith(
        "I can't start on this: the next step needs up to $0.0183 and the deployment's "
        "monthly USD budget has $0.0171 left ($0.0029 of $0.02 used). It resets on ")
    assert heard.refusals == [o]


async def test_a_budget_warns_once_per_window(ledger: Ledger) -> None:
    heard = Heard()
    now = [dt.datetime(2026, 5, 1, 10, 30, tzinfo=dt.UTC).timestamp()]
    budget = ledger([BudgetRule(scope="user", window="hour", tokens=10_000, warn_at=0.5)],
                    listener=heard, calendar=Calendar("UTC", lambda: now[0]))
    for _ in range(2):
        await budget.settle(await budget.reserve(call()), Usage(2000, 1000))
        await budget.flush()
    assert [(w.used_tokens, w.tokens) for w in heard.warnings] == [(6000, 10_000)]
    await budget.settle(await budget.reserve(call()), Usage(1000, 1000))
    await budget.flush()
    assert len(heard.warnings) == 1, "once per window"
    now[0] += 3600  # the next hour
    for _ in range(2):
        await budget.settle(await budget.reserve(call()), Usage(2000, 1000))
    await budget.flush()
    assert [w.used_tokens for w in heard.warnings] == [6000, 6000]


async def test_exempt_roles_and_matches_choose_the_calls_a_budget_counts(
        ledger: Ledger) -> None:
    rule = BudgetRule(scope="user", window="day", tokens=1000, exempt_roles=("admin",),
                      match={"channel": ["slack", "telegram"]})
    budget = ledger([rule])
    for exempt in (call(role="admin", max_tokens=5000), call(channel="api", max_tokens=5000)):
        hold = await budget.reserve(exempt)
        assert hold.counters == ()  # type: ignore[attr-defined]
        await budget.settle(hold, Usage(3000, 2000))
    with pytest.raises(BudgetExceeded):
        await budget.reserve(call(max_tokens=5000))
    [(found, subject, exempt)] = budget.applying(call(role="admin"))
    assert (found, subject, exempt) == (rule, "u1", True)


def test_rules_that_count_the_same_thing_are_refused(redis_url: str) -> None:
    from agent_core.errors import ConfigError

    twins = [BudgetRule(scope="user", window="day", tokens=1),
             BudgetRule(scope="user", window="day", usd=1.0)]
    with pytest.raises(ConfigError, match="count the same thing"):
        StoreBudget(connect(redis_url), Keys("x").budgets, twins)


def test_announce_names_the_models_without_a_price(caplog: pytest.LogCaptureFixture) -> None:
    from agent_core.budget import announce

    rules = [BudgetRule(scope="global", window="month", usd=100)]
    announce(Prices({"gpt-4o": ModelPrice(input_per_mtok=1, output_per_mtok=2)}), rules,
             ["openai:gpt-4o", "ollama:llama3"])
    assert [r.getMessage() for r in caplog.records] == [
        "model 'ollama:llama3' has no price in HERMES_MODEL_PRICES: its calls count tokens "
        "only (dollar budgets do not see them)"]
    assert json.dumps(caplog.records[0].levelname) == '"WARNING"'

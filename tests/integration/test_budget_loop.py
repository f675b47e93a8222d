"""The loop and a budget: every model call reserved before and settled after; a task over
its budget makes no call, and a running one stops at its next call with its work kept."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agent_core import EventBus, LoopConfig, TaskLoop, TaskRequest, ToolExecutor, ToolRegistry
from agent_core.budget import BudgetRule, ModelPrice, Prices, StoreBudget
from agent_core.context import EstimateCounter
from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.store import Keys, MemoryConversationStore, connect
from tools.sales import calc_growth_rate

#: $1 a token of output, input free: a call's worst case in dollars is its max_tokens.
PRICES = Prices({"test-model": ModelPrice(input_per_mtok=0, output_per_mtok=1_000_000)})


@pytest.fixture
async def budgeted(redis_url: str, make_model: Callable[..., Any]
                   ) -> AsyncIterator[Callable[..., tuple[TaskLoop, StoreBudget]]]:
    """A TaskLoop whose calls are reserved against ``rules`` on the real store."""
    prefix = f"tl{uuid.uuid4().hex[:10]}"
    made: list[StoreBudget] = []

    def factory(rules: list[BudgetRule], **config: Any) -> tuple[TaskLoop, StoreBudget]:
        budget = StoreBudget(connect(redis_url), Keys(prefix).budgets, rules, prices=PRICES)
        made.append(budget)
        loop = TaskLoop(model=make_model(), executor=ToolExecutor(ToolRegistry(
            [calc_growth_rate])), store=MemoryConversationStore(), bus=EventBus(),
            config=LoopConfig(**{"replan_every": 0, **config}), counter=EstimateCounter(),
            budget=budget)
        return loop, budget

    yield factory
    for budget in made:
        await budget.aclose()
        keys = [k async for k in budget.redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await budget.redis.unlink(*keys)
        await budget.redis.aclose()


async def test_a_task_over_its_budget_makes_no_model_call_and_says_why(
        budgeted: Callable[..., tuple[TaskLoop, StoreBudget]],
        model_server: ReplayModelServer) -> None:
    loop, _ = budgeted([BudgetRule(scope="user", window="day", usd=10)], max_tokens=20)
    result = await loop.run(TaskRequest(text="grow?", user_id="slack:U1"))
    assert result.outcome == "limit" and model_server.requests == []
    assert result.text.startswith("I can't start on this: the next step needs up to $20.00 "
                                  "and your daily USD budget has $10.00 left ($0.00 of "
                                  "$10.00 used). It resets ")
    assert result.budget is not None and result.budget.scope == "user"
    stored = await loop.store.load_task(result.task_id)
    assert stored is not None and stored.status == "limit" and stored.budget == result.budget


async def test_a_running_task_stops_at_its_next_model_call_and_keeps_its_work(
        budgeted: Callable[..., tuple[TaskLoop, StoreBudget]],
        model_server: ReplayModelServer) -> None:
    loop, budget = budgeted([BudgetRule(scope="user", window="day", usd=25)], max_tokens=20)
    model_server.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1},
                                completion_tokens=10))
    result = await loop.run(TaskRequest(text="grow?", user_id="slack:U1",
                                        conversation_id="c-stop"))
    assert len(model_server.requests) == 1
    assert result.outcome == "limit"
    assert result.text.startswith("I stopped here: the next step needs up to $20.00 and your "
                                  "daily USD budget has $15.00 left ($10.00 of $25.00 used)")
    assert result.text.endswith("What I did so far is kept.")
    window = (await loop.store.snapshot("c-stop")).window
    assert [m.role for m in window] == ["user", "assistant", "tool"], "the work so far stays"
    assert "100" in window[-1].content  # the tool's result: 100% growth
    await budget.flush()
    [use] = await budget.uses(budget.applying(_charge("slack:U1")))
    assert (use.used_usd, use.reserved_usd) == (10.0, 0.0)


async def test_replans_and_repairs_are_budgeted_too(
        budgeted: Callable[..., tuple[TaskLoop, StoreBudget]],
        model_server: ReplayModelServer) -> None:
    loop, budget = budgeted([BudgetRule(scope="user", window="day", tokens=10**6)],
                            replan_every=1, repair_with_model=True, max_rounds=2)
    model_server.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}),
                     Reply("the plan", prompt_tokens=7, completion_tokens=3),
                     Reply("done", prompt_tokens=5, completion_tokens=5))
    result = await loop.run(TaskRequest(text="grow?", user_id="slack:U1"))
    assert result.outcome == "answered" and len(model_server.requests) == 3
    await budget.flush()
    [use] = await budget.uses(budget.applying(_charge("slack:U1")))
    assert use.used_tokens == 30 + 10 + 10 and use.reserved_tokens == 0


def _charge(user: str) -> Any:
    from agent_core.budget import Charge

    return Charge(task_id="", user_id=user, conversation_id="", role="user", model="",
                  prompt_tokens=0, max_tokens=0)

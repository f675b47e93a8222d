"""The context window inside the loop: compression, budgets, warnings, the Redis store."""

from __future__ import annotations

from typing import Any

from agent_core import TaskRequest, tool
from agent_core.context import EstimateCounter
from agent_core.context.compressor import ContextCompressor
from agent_core.models.replay import ReplayModelServer, Reply
from tests.conftest import StoreFactory
from tests.unit.test_compressor import server_log

LOG, ERRORS = server_log()


@tool
def fetch_logs(service: str) -> str:
    """Recent logs of a service."""
    return LOG


@tool
def big_table(n: int) -> str:
    """A big table."""
    return "id,amount\n" + "\n".join(f"{i},{i * 1.5}" for i in range(n))


async def test_a_long_tool_output_is_compressed_before_it_enters_the_window(
        make_store: StoreFactory, make_loop: Any, model_server: ReplayModelServer) -> None:
    store = make_store()
    loop, _ = make_loop([fetch_logs], store=store, max_observation_tokens=500)
    loop.compressor = ContextCompressor(EstimateCounter())
    model_server.add(Reply.call("fetch_logs", {"service": "api"}), Reply("Many errors."))
    result = await loop.run(TaskRequest(text="how many errors?", conversation_id="ctx:1"))
    assert result.outcome == "answered"
    sent = next(m for m in model_server.requests[1][1]["messages"] if m["role"] == "tool")
    assert len(sent["content"]) < 5_000
    assert f"ERROR lines: {ERRORS} exactly." in sent["content"]
    stored = next(m for m in (await store.snapshot("ctx:1")).window if m.role == "tool")
    assert stored.content == sent["content"]


async def test_the_prompt_never_exceeds_its_budget_over_a_long_conversation(
        make_store: StoreFactory, make_loop: Any, model_server: ReplayModelServer) -> None:
    store = make_store()
    loop, rec = make_loop([big_table], store=store, context_tokens=3000, max_tokens=500,
                          max_context_messages=12, max_observation_tokens=400)
    loop.compressor = ContextCompressor(EstimateCounter())
    budget = loop.config.prompt_budget
    for i in range(15):
        model_server.add(Reply.call("big_table", {"n": 50 + i}),
                         Reply.call("big_table", {"n": 10}), Reply(f"answer {i}"))
        result = await loop.run(TaskRequest(text=f"question {i} " + "words " * 50,
                                            conversation_id="ctx:2"))
        assert result.outcome == "answered"
    updates = rec.of("CONTEXT_UPDATED")
    assert len(updates) == 45
    assert all(u.payload["budget"] == budget for u in updates)
    assert max(u.payload["tokens"] for u in updates) <= budget
    snap = await store.snapshot("ctx:2")
    assert snap.archived > 0 and len(snap.window) <= 12


async def test_a_warning_event_fires_at_the_threshold(make_loop: Any,
                                                      model_server: ReplayModelServer) -> None:
    loop, rec = make_loop([big_table], context_tokens=1200, max_tokens=200,
                          context_warn_ratio=0.5, max_observation_tokens=5000)
    model_server.add(Reply.call("big_table", {"n": 80}), Reply("done"))
    await loop.run(TaskRequest(text="table please"))
    warnings = rec.of("CONTEXT_WARNING")
    assert len(warnings) == 1, "only the second call crosses half the budget"
    assert warnings[0].payload["tokens"] >= 0.5 * warnings[0].payload["budget"]

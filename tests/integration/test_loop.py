"""TaskLoop end to end: real adapters over HTTP, real tools, scripted model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent_core import (
    Approval,
    Event,
    TaskControl,
    TaskRequest,
    ToolContext,
    ToolError,
    tool,
)
from agent_core.models.replay import Failure, ReplayModelServer, Reply
from agent_core.store import MemoryConversationStore
from agent_core.tools import ApprovalRules
from tools.sales import calc_growth_rate, query_sales_data, save_daily_report


@tool
def get_weather(city: str) -> str:
    """Weather for a city.

    Args:
        city: City name.
    """
    return f"sunny in {city}"


@tool(retries=0)
def flaky_lookup(key: str) -> str:
    """Fails for unknown keys."""
    if key != "good":
        raise ToolError(f"no record {key!r}")
    return "record found"


@tool(side_effect="write", requires_confirmation=True)
def send_invoice(customer: str, amount: float) -> str:
    """Send an invoice."""
    SENT.append((customer, amount))
    return f"invoice sent to {customer}"


SENT: list[tuple[str, float]] = []


def request(text: str, **kw: Any) -> TaskRequest:
    """A task from a chat user who may read and write (the gateway's "user" role)."""
    kw.setdefault("permissions", frozenset({"read", "write"}))
    return TaskRequest(text=text, conversation_id=kw.pop("conversation_id", "conv-1"), **kw)


def messages_sent(server: ReplayModelServer, index: int) -> list[dict[str, Any]]:
    return server.requests[index][1]["messages"]


def assert_every_call_has_a_result(window: list[Any]) -> None:
    calls = [c.id for m in window for c in m.tool_calls]
    results = [m.tool_call_id for m in window if m.role == "tool"]
    assert sorted(calls) == sorted(results)


# --- the design's demo ------------------------------------------------------------------


@pytest.mark.parametrize(("provider", "stream"), [("openai", False), ("anthropic", True),
                                                  ("ollama", False)])
async def test_sales_demo_end_to_end(provider: str, stream: bool, make_loop: Any,
                                     model_server: ReplayModelServer, data_dir: Path) -> None:
    model_server.add(
        Reply(tool_calls=[
            {"name": "query_sales_data", "arguments": {"start_date": "2026-11-23",
                                                       "end_date": "2026-11-29"}},
            {"name": "query_sales_data", "arguments": {"start_date": "2026-11-16",
                                                       "end_date": "2026-11-22"}}],
            prompt_tokens=600, completion_tokens=70),
        Reply.call("calc_growth_rate", {"current": 48311.74, "previous": 41331.27},
                   prompt_tokens=1400, completion_tokens=30),
        Reply.call("save_daily_report", {"content": "Sales up 16.89% week on week."},
                   prompt_tokens=1500, completion_tokens=40),
        Reply("Sales grew 16.89% this week.", prompt_tokens=1600, completion_tokens=20),
    )
    # The operator running the demo: an admin, whose writes the deployment lets run without
    # asking (HERMES_APPROVAL_SKIP_ROLES=admin; by default they ask too).
    loop, rec = make_loop([query_sales_data, calc_growth_rate, save_daily_report],
                          provider=provider, stream=stream,
                          rules=ApprovalRules(skip_roles=frozenset({"admin"})))
    result = await loop.run(request("Compare this week's sales with last week's",
                                    role="admin", permissions=frozenset({"*"}),
                                    data_dir=data_dir))

    assert result.outcome == "answered"
    assert result.text == "Sales grew 16.89% this week."
    report = result.report
    assert report.rounds == 4 and report.model_calls == 4
    assert report.prompt_tokens == 5100 and report.completion_tokens == 160
    assert report.tools["query_sales_data"].calls == 2 and report.tool_calls == 4
    assert report.outcome == "answered" and report.wall_time >= report.model_time > 0

    # The observations went back to the model: the growth call saw both weekly totals.
    second = json.dumps(model_server.requests[1][1], ensure_ascii=False)
    assert "48311.74" in second and "41331.27" in second
    third = json.dumps(model_server.requests[2][1])
    assert "16.89" in third

    [saved] = list((data_dir / "reports").glob("*.md"))
    assert "Sales up 16.89% week on week." in saved.read_text()

    types = rec.types()
    assert types[0] == "AGENT_STARTED" and types[-1] == "AGENT_FINISHED"
    assert types.count("TOOL_FINISHED") == 4 and types.count("PLANNER_DECISION") == 5
    assert all(e.trace_id == result.trace_id and e.conversation_id == "conv-1"
               for e in rec.events)
    assert [e.round for e in rec.of("TOOL_STARTED")] == [1, 1, 2, 3]


# --- decisions ----------------------------------------------------------------------------


async def test_max_rounds_reached_is_reported_in_plain_words(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.responder = lambda path, body: Reply.call("get_weather", {"city": "Oslo"})
    loop, rec = make_loop([get_weather], max_rounds=4)
    result = await loop.run(request("loop forever"))
    assert result.outcome == "limit"
    assert "4 steps" in result.text and "AGENT_MAX_ROUND" in result.text
    assert len(model_server.requests) == 4
    assert rec.of("AGENT_FINISHED")[0].payload["outcome"] == "limit"


async def test_k_invalid_decisions_in_a_row_end_the_task(make_loop: Any,
                                                         model_server: ReplayModelServer) -> None:
    model_server.add(Reply("{{{{ broken"), Reply("[{ nope"),
                     Reply("Goal: greet\nDone: nothing\nRemaining: answer"),
                     Reply("{not json at all"))
    loop, rec = make_loop([get_weather], max_invalid=3)
    result = await loop.run(request("hi"))
    assert result.outcome == "invalid" and "could not understand" in result.text
    assert result.report.invalid_decisions == 3
    correction = messages_sent(model_server, 1)[-1]
    assert correction["role"] == "user" and "could not be used" in correction["content"]
    # A burst of invalid decisions triggers a replan before the third attempt.
    assert rec.of("PLAN_UPDATED")[0].payload["why"] == "invalid_burst"
    assert messages_sent(model_server, 3)[0]["content"].startswith("CURRENT PLAN")


async def test_an_invalid_decision_is_corrected_and_the_streak_resets(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Reply("{{ broken"), Reply.call("get_weather", {"city": "Oslo"}),
                     Reply("{{ broken again"), Reply("Sunny."))
    loop, _ = make_loop([get_weather], max_invalid=2)
    # With K=2, two invalid decisions in total would end the task if the streak did not reset.
    result = await loop.run(request("weather?"))
    assert result.outcome == "answered" and result.text == "Sunny."


async def test_unknown_native_tool_gets_an_error_result_and_the_task_goes_on(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Reply(tool_calls=[{"name": "get_wether", "arguments": {"city": "Oslo"}},
                                       {"name": "get_weather", "arguments": {"city": "Oslo"}}]),
                     Reply("Sunny in Oslo."))
    loop, _ = make_loop([get_weather])
    result = await loop.run(request("weather?"))
    assert result.outcome == "answered"
    tool_msgs = [m for m in messages_sent(model_server, 1) if m["role"] == "tool"]
    assert len(tool_msgs) == 2
    assert "no tool named 'get_wether'" in tool_msgs[0]["content"]
    assert tool_msgs[1]["content"] == "sunny in Oslo"


async def test_tool_exception_goes_back_to_the_model_which_recovers(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Reply.call("flaky_lookup", {"key": "bad"}),
                     Reply.call("flaky_lookup", {"key": "good"}), Reply("Found it."))
    loop, rec = make_loop([flaky_lookup])
    result = await loop.run(request("look it up"))
    assert result.outcome == "answered"
    [err] = rec.of("TOOL_ERROR")
    assert err.payload["error"] == "exception" and "no record 'bad'" in err.payload["message"]
    tool_msg = next(m for m in messages_sent(model_server, 1) if m["role"] == "tool")
    assert json.loads(tool_msg["content"])["error"] == "exception"
    assert result.report.tools["flaky_lookup"].errors == 1


async def test_a_tool_timeout_is_an_observation_not_a_crash(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    @tool(timeout=0.05, retries=0)
    async def hang() -> str:
        """Hangs."""
        await asyncio.sleep(10)
        return "never"

    model_server.add(Reply.call("hang"), Reply("It timed out."))
    loop, rec = make_loop([hang])
    result = await loop.run(request("go"))
    assert result.outcome == "answered"
    assert rec.of("TOOL_ERROR")[0].payload["error"] == "timeout"


async def test_a_sync_tool_s_progress_reaches_the_bus_on_the_loop_s_thread(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    # A sync tool runs in a worker thread; its progress note is an event like any other,
    # which the subscribers (the event log's timer, the chat's progress line) get on the
    # loop's own thread, before the tool's result.
    import threading

    @tool
    def long_export(ctx: ToolContext) -> str:
        """Exports, saying how far it got."""
        ctx.report("half way")
        return "exported"

    model_server.add(Reply.call("long_export"), Reply("Done."))
    loop, rec = make_loop([long_export])
    seen: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()
    loop.bus.subscribe(lambda e: seen.append((str(e.type), threading.get_ident() ==
                                              loop_thread)))
    result = await loop.run(request("export it"))
    assert result.outcome == "answered"
    assert rec.of("TOOL_PROGRESS")[0].payload["note"] == "half way"
    order = [t for t, _ in seen]
    assert order.index("TOOL_PROGRESS") < order.index("TOOL_FINISHED")
    assert all(on_loop for _, on_loop in seen), seen


async def test_model_auth_error_ends_the_task_with_a_sentence_not_a_traceback(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Failure(401))
    loop, _ = make_loop([get_weather])
    result = await loop.run(request("hi"))
    assert result.outcome == "failed"
    assert "refused the API key" in result.text and "LLM_API_KEY" in result.text
    assert "Traceback" not in result.text


async def test_context_length_error_shrinks_the_context_and_retries_once(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    store = MemoryConversationStore()
    loop, rec = make_loop([get_weather], store=store)
    for i in range(6):
        model_server.add(Reply(f"answer {i} " + "x" * 200))
        await loop.run(request(f"question {i} " + "y" * 200))
    model_server.add(Failure(400, {"error": {"message": "maximum context length exceeded"}}),
                     Reply("short answer"))
    result = await loop.run(request("final question"))
    assert result.outcome == "answered"
    before = len(messages_sent(model_server, -2))
    after = len(messages_sent(model_server, -1))
    assert after < before
    assert rec.of("CONTEXT_UPDATED")[-1].payload["shrunk"] is True


async def test_several_calls_in_one_turn_all_run_and_all_results_return(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": c}}
                                       for c in ("Oslo", "Rome", "Lima")]), Reply("Done."))
    loop, _ = make_loop([get_weather])
    await loop.run(request("three cities"))
    results = [m["content"] for m in messages_sent(model_server, 1) if m["role"] == "tool"]
    assert results == ["sunny in Oslo", "sunny in Rome", "sunny in Lima"]


# --- pausing and resuming ---------------------------------------------------------------


async def test_ask_user_pauses_and_the_reply_resumes_the_task(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Reply.call("ask_user", {"question": "Which city?",
                                             "choices": ["Oslo", "Rome"]}),
                     Reply.call("get_weather", {"city": "Rome"}), Reply("Sunny in Rome."))
    store = MemoryConversationStore()
    loop, rec = make_loop([get_weather], store=store)
    first = await loop.run(request("what's the weather?"))
    assert first.outcome == "asked_user" and not first.finished
    assert first.question is not None and first.question.choices == ["Oslo", "Rome"]
    assert rec.of("ASK_USER")
    second = await loop.resume(first.task_id, reply="Rome please")
    assert second.outcome == "answered" and second.text == "Sunny in Rome."
    assert any(m["content"] == "Rome please" for m in messages_sent(model_server, 1))


async def test_a_confirmation_tool_pauses_and_runs_once_after_approval(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    SENT.clear()
    model_server.add(Reply.call("send_invoice", {"customer": "ACME", "amount": "120.5"}),
                     Reply("Invoice sent."))
    store = MemoryConversationStore()
    loop, rec = make_loop([send_invoice], store=store)
    paused = await loop.run(request("invoice ACME"))
    assert paused.outcome == "awaiting_approval" and SENT == []
    assert paused.approval is not None and paused.approval.tool_name == "send_invoice"
    [confirm] = rec.of("HUMAN_CONFIRM_REQUIRED")
    # The approver is shown the arguments the tool will run with: validated, coerced.
    assert confirm.payload["arguments"] == {"customer": "ACME", "amount": 120.5}

    done = await loop.resume(paused.task_id, approval=Approval(approved=True, by="boss"))
    assert done.outcome == "answered" and SENT == [("ACME", 120.5)]
    assert rec.of("HUMAN_CONFIRM_RESOLVED")[0].payload["by"] == "boss"
    with pytest.raises(ValueError, match="not waiting for an approval"):
        await loop.resume(paused.task_id, approval=Approval(approved=True, by="boss"))
    assert SENT == [("ACME", 120.5)]


async def test_a_rejection_is_told_to_the_model(make_loop: Any,
                                                model_server: ReplayModelServer) -> None:
    SENT.clear()
    model_server.add(Reply.call("send_invoice", {"customer": "ACME", "amount": 5}),
                     Reply("Understood, I did not send it."))
    loop, _ = make_loop([send_invoice])
    paused = await loop.run(request("invoice"))
    done = await loop.resume(paused.task_id, approval=Approval(approved=False, by="boss",
                                                               note="wrong amount"))
    assert done.outcome == "answered" and SENT == []
    tool_msg = next(m for m in messages_sent(model_server, 1) if m["role"] == "tool")
    assert "boss rejected this action: wrong amount" in tool_msg["content"]


# --- cancellation and deadlines -----------------------------------------------------------


async def test_cancellation_emits_events_and_leaves_no_half_written_state(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    started = asyncio.Event()

    @tool
    async def long_job() -> str:
        """Takes long."""
        started.set()
        await asyncio.sleep(30)
        return "done"

    model_server.add(Reply(tool_calls=[{"name": "long_job", "arguments": {}},
                                       {"name": "long_job", "arguments": {}}]))
    store = MemoryConversationStore()
    loop, rec = make_loop([long_job], store=store)
    req = request("go")
    task = asyncio.create_task(loop.run(req))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    finished = rec.of("AGENT_FINISHED")
    assert finished and finished[0].payload["outcome"] == "cancelled"
    snap = await store.snapshot("conv-1")
    assert_every_call_has_a_result(snap.window)
    state = await store.load_task(req.task_id)
    assert state is not None and state.status == "cancelled" and state.pending_calls == []


async def test_the_task_deadline_stops_a_slow_task(make_loop: Any,
                                                   model_server: ReplayModelServer) -> None:
    @tool(timeout=30)
    async def slow() -> str:
        """Slow."""
        await asyncio.sleep(30)
        return "done"

    model_server.add(Reply.call("slow"))
    store = MemoryConversationStore()
    loop, _ = make_loop([slow], store=store, task_timeout=0.3)
    result = await loop.run(request("go"))
    assert result.outcome == "limit" and "ran out of time" in result.text
    assert_every_call_has_a_result((await store.snapshot("conv-1")).window)


async def test_interrupt_stops_at_the_next_tool_boundary(make_loop: Any,
                                                         model_server: ReplayModelServer) -> None:
    calls: list[str] = []

    @tool
    def step(n: int) -> str:
        """A step."""
        calls.append(str(n))
        return "ok"

    flag = {"stop": False}

    async def interrupted() -> bool:
        return flag["stop"]

    model_server.add(Reply.call("step", {"n": 1}), Reply(tool_calls=[
        {"name": "step", "arguments": {"n": 2}}, {"name": "step", "arguments": {"n": 3}}]))
    loop, _ = make_loop([step])

    def on_event(e: Event) -> None:
        if e.type == "TOOL_FINISHED" and e.payload["tool"] == "step":
            flag["stop"] = len(calls) >= 2

    loop.bus.subscribe(on_event)
    result = await loop.run(request("go", control=TaskControl(interrupted=interrupted)))
    assert result.outcome == "cancelled" and calls == ["1", "2"]


async def test_steering_messages_reach_the_next_model_call(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    queue = [["actually, use Rome"]]

    async def steering() -> list[str]:
        return queue.pop() if queue else []

    model_server.add(Reply.call("get_weather", {"city": "Rome"}), Reply("Sunny in Rome."))
    loop, _ = make_loop([get_weather])
    await loop.run(request("weather in Oslo", control=TaskControl(steering=steering)))
    assert messages_sent(model_server, 0)[-1]["content"] == "actually, use Rome"


# --- replanning, repair, events -----------------------------------------------------------


async def test_replanner_pins_a_plan_every_n_rounds(make_loop: Any,
                                                    model_server: ReplayModelServer) -> None:
    model_server.add(Reply.call("get_weather", {"city": "Oslo"}),
                     Reply.call("get_weather", {"city": "Rome"}),
                     Reply("Goal: weather\nDone: Oslo, Rome\nRemaining: answer"),
                     Reply("Both sunny."))
    loop, rec = make_loop([get_weather], replan_every=2)
    result = await loop.run(request("weather in two cities"))
    assert result.outcome == "answered"
    assert "Summarise where this task stands" in messages_sent(model_server, 2)[0]["content"]
    system = messages_sent(model_server, 3)[0]["content"]
    assert system.startswith("CURRENT PLAN") and "Done: Oslo, Rome" in system
    assert rec.of("PLAN_UPDATED")[0].payload["why"] == "periodic"


async def test_model_assisted_repair_when_enabled(make_loop: Any,
                                                  model_server: ReplayModelServer) -> None:
    model_server.add(Reply("{{{ garbage"),
                     Reply('{"type": "final_answer", "content": "repaired"}'))
    loop, _ = make_loop([get_weather], repair_with_model=True)
    result = await loop.run(request("hi"))
    assert result.outcome == "answered" and result.text == "repaired"
    assert "could not be parsed" in messages_sent(model_server, 1)[0]["content"]


async def test_a_failing_event_handler_never_breaks_the_loop(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Reply.call("get_weather", {"city": "Oslo"}), Reply("Sunny."))
    loop, _ = make_loop([get_weather])

    def broken(e: Event) -> None:
        raise RuntimeError("subscriber bug")

    loop.bus.subscribe(broken)
    assert (await loop.run(request("weather"))).outcome == "answered"


async def test_text_protocol_models_work_end_to_end(make_loop: Any,
                                                    model_server: ReplayModelServer) -> None:
    model_server.add(Reply('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                           "</tool_call>"),
                     Reply('{"type": "final_answer", "content": "Sunny in Oslo."}'))
    loop, _ = make_loop([get_weather], native_tools=False)
    result = await loop.run(request("weather"))
    assert result.text == "Sunny in Oslo."
    system = messages_sent(model_server, 0)[0]["content"]
    assert "no native tool calling" in system and "get_weather" in system
    assert "tools" not in model_server.requests[0][1]


async def test_a_tool_added_or_removed_between_rounds_is_seen_by_the_next_round(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    """The registry can change while tasks run (an MCP server's list_changed): the next
    round's model request lists the tool, and the parser accepts a call of it."""

    @tool
    def late_tool(x: int) -> str:
        """A tool registered while a task runs."""
        return f"late {x}"

    @tool
    def install() -> str:
        """Registers late_tool."""
        loop.executor.registry.add(late_tool)
        return "installed"

    loop, _ = make_loop([install])
    model_server.add(Reply.call("install", {}), Reply.call("late_tool", {"x": 3}), Reply("done"))
    result = await loop.run(request("go"))
    assert result.outcome == "answered", result
    offered = [[t["function"]["name"] for t in body["tools"]]
               for _path, body in model_server.requests]
    assert "late_tool" not in offered[0] and "late_tool" in offered[1]
    tool_messages = [m for m in model_server.requests[-1][1]["messages"] if m["role"] == "tool"]
    assert tool_messages[-1]["content"] == "late 3"

    loop.executor.registry.remove("late_tool")
    model_server.add(Reply("ok"))
    await loop.run(request("again"))
    assert "late_tool" not in [t["function"]["name"]
                               for t in model_server.requests[-1][1]["tools"]]

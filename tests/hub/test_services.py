"""The hub's services on a real nats-server: the deadline watch, discovery and the
traffic split, and a TaskLoop as a hub agent against the scripted model."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.runtime import build_runtime
from agent_core.store import MemoryConversationStore
from hub import HubSettings, TaskRequest
from hub.deadlines import DeadlineWatch
from hub.delegation import HubDelegation
from hub.discovery import Candidate, Discovery, Heartbeats, choose, discover
from hub.loop_agent import LoopAgent
from hub.replay import replay
from hub.subjects import replies_to, reply_subject
from tests.hub.conftest import BusFactory, RunnerFactory, unique
from tests.hub.test_bus import Echo, Hang, until, watch


async def test_the_hub_answers_timeout_when_the_agent_hangs_and_drops_its_late_answer(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    hub = await make_bus()
    watch_ = DeadlineWatch(hub)
    await watch_.start()
    try:
        agent_id = unique("late")
        slow = Echo(agent_id, delay=1.0)
        await run_agent(await make_bus(), slow)
        caller = await make_bus()
        request = TaskRequest(sender_id=unique("caller"), intent="echo", deadline_ms=400)
        replies = await watch(caller, replies_to(request.sender_id))
        response = await caller.request(agent_id, request)
        assert response.status == "failed" and response.error_code == "TIMEOUT"
        assert response.sender_id == "hub", "the hub answered, not the caller's own timer"
        await until(lambda: slow.seen)
        await asyncio.sleep(1.5)  # the agent's answer would have come by now
        assert len(replies) == 1, "the late answer was dropped"
    finally:
        await watch_.stop()


async def test_the_hub_answers_timeout_for_an_agent_that_died(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    hub = await make_bus()
    watch_ = DeadlineWatch(hub)
    await watch_.start()
    try:
        agent_id = unique("dead")
        bus = await make_bus()
        dying = Hang(agent_id)
        runner = await run_agent(bus, dying)
        caller = await make_bus()
        request = TaskRequest(sender_id=unique("caller"), intent="echo", deadline_ms=3000)
        answer = asyncio.ensure_future(caller.request(agent_id, request))
        await asyncio.wait_for(dying.started.wait(), 10)
        runner.abandon()
        await bus.nc.close()
        response = await asyncio.wait_for(answer, 10)
        assert (response.sender_id, response.error_code) == ("hub", "TIMEOUT")
    finally:
        await watch_.stop()


async def test_discovery_lists_live_agents_by_load_and_forgets_silent_ones(
        make_bus: BusFactory) -> None:
    bus = await make_bus()
    discovery = Discovery(bus, interval=0.5)
    await discovery.start()
    capability = f"claim_{unique('x').replace('-', '_')}"
    idle = Heartbeats(bus, unique("idle"), (capability,), load=lambda: 10.0, interval=0.5)
    busy = Heartbeats(bus, unique("busy"), (capability,), load=lambda: 90.0, interval=0.5)
    other = Heartbeats(bus, unique("other"), ("something_else",), interval=0.5)
    for beats in (idle, busy, other):
        beats.start()
    try:
        await until(lambda: len(discovery.live(capability)) == 2)
        found = await discover(bus, capability)
        assert [c.agent_id for c in found] == [idle.agent_id, busy.agent_id]
        assert found[0].capabilities == (capability,) and found[0].load_percent == 10.0
        await busy.stop()  # a stopping copy says so: forgotten at once, not in 1.5 s
        await until(lambda: len(discovery.live(capability)) == 1, timeout=1.0)
        assert [c.agent_id for c in await discover(bus, capability)] == [idle.agent_id]
        other.abandon()  # a copy that dies: forgotten after three missed beats
        assert other.agent_id in {c.agent_id for c in discovery.live()}
        await until(lambda: other.agent_id not in {c.agent_id for c in discovery.live()},
                    timeout=5)
    finally:
        for beats in (idle, busy, other):
            await beats.stop()
        await discovery.stop()


def test_the_canary_split_holds_within_a_few_percent_and_busy_agents_get_less() -> None:
    stable, canary = Candidate("v1", 10.0, 1, "1"), Candidate("v2", 10.0, 1, "2")
    rng = random.Random(7)
    picks = Counter(choose([stable, canary], {"v1": 70, "v2": 30}, rng=rng).agent_id  # type: ignore[union-attr]
                    for _ in range(5000))
    assert abs(picks["v2"] / 5000 - 0.30) < 0.03, picks
    hot = Candidate("hot", 95.0, 1, "1")
    cool = Candidate("cool", 20.0, 1, "1")
    share = Counter(choose([hot, cool], rng=rng).agent_id  # type: ignore[union-attr]
                    for _ in range(5000))
    assert share["hot"] < share["cool"] / 3, share
    assert choose([]) is None


async def test_a_taskloop_agent_answers_a_delegated_task(
        make_bus: BusFactory, run_agent: RunnerFactory, model_server: ReplayModelServer,
        tmp_path: object) -> None:
    settings = HubSettings(_env_file=None, llm_provider="openai",  # type: ignore[call-arg]
                           llm_model_name="scripted", llm_base_url=model_server.openai_url,
                           llm_api_key="sk-test-0123456789abcdefghij", llm_max_retries=0,
                           agent_replan_every=0, hermes_tools=["tools.sales"])
    runtime = build_runtime(settings, store=MemoryConversationStore())
    capability = f"sales_{unique('x').replace('-', '_')}"
    agent = LoopAgent(unique("analyst"), (capability,), runtime)
    model_server.add(Reply.call("calc_growth_rate", {"current": 120, "previous": 100}),
                     Reply("Growth was 20%."))
    bus = await make_bus()
    discovery = Discovery(bus)
    await discovery.start()
    try:
        await run_agent(await make_bus(), agent)
        await until(lambda: discovery.live(capability))
        outcome = await HubDelegation(bus, "gateway").delegate(
            capability, "how much did sales grow?", arguments={}, deadline_ms=20_000,
            correlation_id="trace-1", conversation_id=None)
        assert outcome.status == "success" and outcome.agent_id == agent.agent_id
        assert outcome.result["answer"] == "Growth was 20%."
        assert outcome.result["tool_calls"] == 1
        # Its tool step was told on the bus, under the request's task id (what the A2A
        # edge streams), and kept in HMP_LOG for replay.
        told = [h.message for h in await replay(bus, "trace-1")
                if h.message["type"] == "log_event"]
        assert [(m["event_type"], m["details"]["tool"]) for m in told] == [
            ("tool_started", "calc_growth_rate"), ("tool_finished", "calc_growth_rate")]
        missing = await HubDelegation(bus, "gateway").delegate(
            "no_such_capability", "x", arguments={}, deadline_ms=1000, correlation_id="t",
            conversation_id=None)
        assert (missing.status, missing.error_code) == ("failed", "NO_AGENT")
    finally:
        await discovery.stop()
        await runtime.aclose()


async def test_contexts_keep_the_newest_version_until_it_expires(
        make_bus: BusFactory) -> None:
    import time

    from hub.contexts import Contexts
    from hub.messages import MAX_CONTEXT_BYTES, ContextUpdate
    from tests.unit.test_hmp import packed

    contexts = Contexts(await make_bus())
    cid = unique("case")

    def update(version: int, data: str, *, expires: float = 60.0) -> ContextUpdate:
        return ContextUpdate(sender_id="a", context_id=cid, version=version, data=data,
                             expires_at=time.time() + expires)

    assert await contexts.put(update(2, ContextUpdate.pack(b"two")))
    assert not await contexts.put(update(1, ContextUpdate.pack(b"one"))), "stale"
    assert not await contexts.put(update(2, ContextUpdate.pack(b"again"))), "same version"
    kept = await contexts.get(cid)
    assert kept is not None and kept.version == 2
    big = update(3, packed(MAX_CONTEXT_BYTES))  # 2 MB once decompressed: fits the hub
    assert await contexts.put(big)
    assert (await contexts.get(cid)) == big
    assert await contexts.put(update(4, ContextUpdate.pack(b"brief"), expires=0.3))
    await asyncio.sleep(0.5)
    assert await contexts.get(cid) is None, "expired contexts are gone"
    assert await contexts.put(update(1, ContextUpdate.pack(b"fresh start")))


async def test_replay_shows_a_correlation_ids_messages_in_order(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    from hub.replay import replay

    bus = await make_bus()
    agent_id = unique("replayed")
    await run_agent(bus, Echo(agent_id))
    request = TaskRequest(sender_id=unique("caller"), intent="echo", deadline_ms=10_000,
                          arguments={"step": 1})
    other = TaskRequest(sender_id=unique("caller"), intent="echo", deadline_ms=10_000)
    await bus.request(agent_id, request)
    await bus.request(agent_id, other)
    hops = await replay(bus, request.correlation_id)
    assert [(h.stream, h.message["type"]) for h in hops] == [
        ("HMP_TASKS", "task_request"), ("HMP_REPLIES", "task_response")]
    assert hops[0].message["task_id"] == hops[1].message["task_id"] == request.task_id
    assert hops[0].stored_at <= hops[1].stored_at


async def test_the_delegate_tool_turns_timeouts_and_refusals_into_tool_errors(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    from agent_core import Services, ToolContext, ToolExecutor, ToolRegistry
    from tools.delegate import delegate

    bus = await make_bus()
    discovery = Discovery(bus)
    watch_ = DeadlineWatch(bus)
    await discovery.start()
    await watch_.start()
    capability = f"slow_{unique('x').replace('-', '_')}"
    slow = Echo(unique("slowpoke"), delay=3.0)
    slow.capabilities = (capability,)
    await run_agent(await make_bus(), slow)
    executor = ToolExecutor(ToolRegistry([delegate]))
    ctx = ToolContext(user_id="u", conversation_id="c", trace_id="trace-9",
                      permissions=frozenset({"read"}),
                      services=Services(delegation=HubDelegation(bus, "gateway")))
    try:
        await until(lambda: discovery.live(capability))
        late = await executor.execute("delegate", {"capability": capability, "task": "x",
                                                   "deadline_ms": 300}, ctx)
        assert not late.ok and late.error is not None and late.error.retryable
        assert "TIMEOUT" in late.error.message and slow.agent_id in late.error.message
        nobody = await executor.execute("delegate", {"capability": "nobody_does_this",
                                                     "task": "x"}, ctx)
        assert not nobody.ok and nobody.error is not None
        assert "NO_AGENT" in nobody.error.message and not nobody.error.retryable
        alone = await executor.execute("delegate", {"capability": capability, "task": "x"},
                                       ToolContext(user_id="u", conversation_id="c",
                                                   trace_id="t"))
        assert not alone.ok and "no agent hub" in alone.observation()
    finally:
        await watch_.stop()
        await discovery.stop()


async def test_two_copies_of_the_hub_answer_each_timeout_and_each_query_once(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    """`hermes-gateway hub` twice: the caller of a hung agent hears TIMEOUT once, discovery
    answers once per query, and stopping one copy leaves the other answering."""
    copies = []
    for _ in range(2):
        bus = await make_bus()
        services = (DeadlineWatch(bus), Discovery(bus))  # the agents' beat interval
        for service in services:
            await service.start()
        copies.append(services)
    try:
        agent_id = unique("hung")
        await run_agent(await make_bus(), Hang(agent_id))
        caller = await make_bus()
        request = TaskRequest(sender_id=unique("caller"), intent="echo", deadline_ms=800)
        replies = await watch(caller, replies_to(request.sender_id))
        response = await caller.request(agent_id, request)
        assert (response.sender_id, response.error_code) == ("hub", "TIMEOUT")
        watches = [w for w, _ in copies]
        # One copy has answered (its publish acknowledged), and neither still waits on it:
        # the other lost the claim or saw that answer.
        await until(lambda: sum(w.timed_out for w in watches) >= 1
                    and not any(w.watching(request.task_id) for w in watches))
        await caller.nc.flush()
        assert sum(w.timed_out for w in watches) == 1
        assert [m.subject for m in replies] == [reply_subject("hub", request.sender_id)], \
            "one TIMEOUT reached the caller, not one per copy"

        discoveries = [d for _, d in copies]
        await until(lambda: all(agent_id in [c.agent_id for c in d.live()]
                                for d in discoveries))
        found = await discover(caller, "*")
        assert agent_id in [c.agent_id for c in found]
        assert sum(d.answered for d in discoveries) == 1, "one copy answered the query"
        for service in copies[0]:
            await service.stop()
        assert agent_id in [c.agent_id for c in await discover(caller, "*")]
    finally:
        for services in copies:
            for service in services:
                await service.stop()


async def test_a_taskloop_agent_over_its_agent_budget_answers_budget(
        make_bus: BusFactory, run_agent: RunnerFactory, model_server: ReplayModelServer,
        redis_url: str) -> None:
    from agent_core.budget import BudgetRule, StoreBudget
    from agent_core.store import Keys, connect

    settings = HubSettings(_env_file=None, llm_provider="openai",  # type: ignore[call-arg]
                           llm_model_name="scripted", llm_base_url=model_server.openai_url,
                           llm_api_key="sk-test-0123456789abcdefghij", llm_max_retries=0,
                           agent_replan_every=0, hermes_tools=["tools.sales"])
    agent_id, prefix = unique("frugal"), unique("hb")
    redis = connect(redis_url)
    budget = StoreBudget(redis, Keys(prefix).budgets, [BudgetRule(
        scope="agent", window="day", tokens=100, match={"agent": agent_id})])
    runtime = build_runtime(settings, store=MemoryConversationStore(), budget=budget)
    capability = f"sales_{unique('y').replace('-', '_')}"
    agent = LoopAgent(agent_id, (capability,), runtime)
    bus = await make_bus()
    discovery = Discovery(bus)
    await discovery.start()
    try:
        await run_agent(await make_bus(), agent)
        await until(lambda: discovery.live(capability))
        outcome = await HubDelegation(bus, "gateway").delegate(
            capability, "how much did sales grow?", arguments={}, deadline_ms=20_000,
            correlation_id=unique("trace"), conversation_id=None)
        assert (outcome.status, outcome.error_code) == ("failed", "BUDGET")
        assert str(outcome.result["error"]).startswith(
            "I can't start on this: the next step needs up to ")
        assert f"the daily token budget of agent {agent_id!r} has 100 tokens left" in \
            str(outcome.result["error"])
        assert model_server.requests == [], "the call over the budget was never made"
    finally:
        await discovery.stop()
        await budget.aclose()
        await runtime.aclose()
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.unlink(*keys)
        await redis.aclose()

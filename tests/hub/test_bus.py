"""Requests and answers through a real nats-server with JetStream: correlation ids on
every hop, copies sharing an agent's load, redelivery after a copy dies, duplicates,
rule violations, failing agents, deadlines."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.msg import Msg

from hub import Agent, TaskRequest, TaskResponse
from hub.bus import CORRELATION, DEAD
from hub.subjects import replies_to, request_subject
from tests.hub.conftest import BusFactory, RunnerFactory, unique


class Echo(Agent):
    """Answers with its arguments, after ``delay`` seconds."""

    def __init__(self, agent_id: str, *, delay: float = 0.0, name: str = "") -> None:
        super().__init__()
        self.agent_id = agent_id
        self.delay = delay
        self.name = name
        self.seen: list[str] = []

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.seen.append(request.task_id)
        await asyncio.sleep(self.delay)
        return self.respond(request, "success", {"echo": request.arguments,
                                                 "by": self.name})


class Hang(Agent):
    """Never answers its first request (a copy that dies mid-task)."""

    def __init__(self, agent_id: str) -> None:
        super().__init__()
        self.agent_id = agent_id
        self.started = asyncio.Event()

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class Broken(Agent):
    """Fails on every delivery."""

    def __init__(self, agent_id: str) -> None:
        super().__init__()
        self.agent_id = agent_id
        self.calls = 0

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.calls += 1
        raise RuntimeError("the model is down")


def ask(agent_id: str, **arguments: Any) -> TaskRequest:
    return TaskRequest(sender_id=unique("caller"), intent="echo", arguments=arguments,
                       deadline_ms=20_000)


async def watch(bus: Any, subject: str) -> list[Msg]:
    """Every message that passes on ``subject`` from now on."""
    seen: list[Msg] = []

    async def keep(msg: Msg) -> None:
        seen.append(msg)

    await bus.nc.subscribe(subject, cb=keep)
    return seen


async def until(check: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


async def test_a_request_is_answered_with_its_correlation_id_on_every_hop(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    bus = await make_bus()
    agent_id = unique("echo")
    await run_agent(bus, Echo(agent_id))
    request = ask(agent_id, claim="C-1")
    requests = await watch(bus, request_subject(agent_id))
    replies = await watch(bus, replies_to(request.sender_id))
    response = await bus.request(agent_id, request)
    assert response.status == "success" and response.result["echo"] == {"claim": "C-1"}
    assert response.correlation_id == request.correlation_id
    assert response.task_id == request.task_id and response.sender_id == agent_id
    await until(lambda: requests and replies)
    for hop in (*requests, *replies):
        assert hop.headers is not None and hop.headers[CORRELATION] == request.correlation_id


async def test_two_copies_of_an_agent_share_its_requests_and_each_is_answered_once(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    agent_id = unique("pair")
    first, second = Echo(agent_id, delay=0.05, name="a"), Echo(agent_id, delay=0.05, name="b")
    await run_agent(await make_bus(), first)
    await run_agent(await make_bus(), second)
    caller = await make_bus()
    responses = await asyncio.gather(*(caller.request(agent_id, ask(agent_id, n=n))
                                       for n in range(20)))
    assert sorted(r.result["echo"]["n"] for r in responses) == list(range(20))
    assert first.seen and second.seen, "both copies took requests"
    assert len(first.seen) + len(second.seen) == 20


async def test_a_request_whose_copy_dies_is_redelivered_to_the_other_and_answered_once(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    agent_id = unique("fragile")
    dying_bus = await make_bus(hub_ack_wait=1.0)
    dying = Hang(agent_id)
    dying_runner = await run_agent(dying_bus, dying)
    caller = await make_bus()
    request = ask(agent_id, claim="C-9")
    replies = await watch(caller, replies_to(request.sender_id))
    answer = asyncio.ensure_future(caller.request(agent_id, request))
    await asyncio.wait_for(dying.started.wait(), 10)
    # The copy dies: its process goes, without acknowledging or answering.
    dying_runner.abandon()
    await dying_bus.nc.close()
    survivor = Echo(agent_id, name="survivor")
    await run_agent(await make_bus(hub_ack_wait=1.0), survivor)
    response = await asyncio.wait_for(answer, 20)
    assert response.status == "success" and response.result["by"] == "survivor"
    await asyncio.sleep(0.3)
    assert len(replies) == 1 and survivor.seen == [request.task_id]


async def test_a_duplicate_publish_is_handled_once(make_bus: BusFactory,
                                                   run_agent: RunnerFactory) -> None:
    bus = await make_bus()
    agent_id = unique("once")
    agent = Echo(agent_id)
    await run_agent(bus, agent)
    request = ask(agent_id)
    replies = await watch(bus, replies_to(request.sender_id))
    first = await bus.publish(request_subject(agent_id), request,
                              _headers(request.correlation_id))
    again = await bus.publish(request_subject(agent_id), request,
                              _headers(request.correlation_id))
    assert (first, again) == (True, False)
    await until(lambda: len(replies) == 1)
    await asyncio.sleep(0.3)
    assert agent.seen == [request.task_id] and len(replies) == 1


async def test_a_request_that_breaks_a_rule_is_answered_with_the_field_and_the_rule(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    bus = await make_bus()
    agent_id = unique("strict")
    agent = Echo(agent_id)
    await run_agent(bus, agent)
    replies = await watch(bus, replies_to("impatient"))
    flat = {"type": "task_request", "message_id": "m-1", "sender_id": "impatient",
            "task_id": "t-1", "intent": "echo", "arguments": {}, "deadline_ms": 400_000}
    await bus.js.publish(request_subject(agent_id), json.dumps(flat).encode())
    await until(lambda: replies)
    answer = TaskResponse.model_validate_json(replies[0].data)
    assert answer.status == "failed" and answer.error_code == "INVALID_MESSAGE"
    assert answer.task_id == "t-1" and answer.result["field"] == "deadline_ms"
    assert "300000" in answer.result["rule"] and agent.seen == []


async def test_a_request_failing_every_delivery_is_dead_lettered_and_the_caller_told(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    bus = await make_bus(hub_max_deliver=2)
    agent_id = unique("broken")
    agent = Broken(agent_id)
    await run_agent(bus, agent)
    request = ask(agent_id)
    response = await bus.request(agent_id, request)
    assert response.status == "failed" and response.error_code == "AGENT_FAILED"
    assert agent.calls == 2 and response.result["deliveries"] == 2
    dead = await bus.js.get_last_msg(DEAD, f"dead.{agent_id}")
    assert json.loads(dead.data or b"{}")["task_id"] == request.task_id


async def test_no_answer_by_the_deadline_is_a_failed_timeout(make_bus: BusFactory,
                                                              run_agent: RunnerFactory) -> None:
    bus = await make_bus()
    agent_id = unique("slow")
    await run_agent(bus, Echo(agent_id, delay=2.0))
    request = TaskRequest(sender_id=unique("caller"), intent="echo", deadline_ms=300)
    response = await bus.request(agent_id, request)
    assert response.status == "failed" and response.error_code == "TIMEOUT"
    assert response.task_id == request.task_id


def _headers(correlation: str) -> Any:
    from hub import Headers

    return Headers(correlation, correlation)


async def test_an_agents_broken_json_is_repaired_and_the_original_kept(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    bus = await make_bus()
    agent_id = unique("sloppy")
    agent = Echo(agent_id)
    await run_agent(bus, agent)
    sender = unique("llm")
    replies = await watch(bus, replies_to(sender))
    # What an LLM writes: single quotes, a trailing comma, the last brace missing.
    broken = (f"{{'type': 'task_request', 'sender_id': '{sender}', 'task_id': 't-7', "
              "'intent': 'echo', 'arguments': {'claim': 'C-7',}, 'deadline_ms': 5000")
    await bus.js.publish(request_subject(agent_id), broken.encode(),
                         headers={CORRELATION: "corr-7"})
    await until(lambda: replies)
    answer = TaskResponse.model_validate_json(replies[0].data)
    assert answer.status == "success" and answer.result["echo"] == {"claim": "C-7"}
    kept = await bus.js.get_last_msg("HMP_BAD_JSON", f"bad_json_log.{sender}")
    assert kept.data == broken.encode()
    assert kept.headers is not None and kept.headers["Sender"] == sender
    assert kept.headers[CORRELATION] == "corr-7"


async def test_backpressure_slows_above_the_soft_limit_and_refuses_above_the_hard_one(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    from hub.errors import BusOverloaded

    bus = await make_bus(hub_soft_limit=2, hub_hard_limit=4)
    agent_id = unique("swamped")
    runner = await run_agent(bus, Echo(agent_id))
    await runner.stop()  # its consumer stays; nobody pulls: requests pile up
    accepted = []
    delays = []
    for n in range(4):
        delays.append(await bus.admit(agent_id))
        request = ask(agent_id, n=n)
        await bus.publish(request_subject(agent_id), request, _headers(request.correlation_id))
        accepted.append(request.task_id)
    assert delays[:2] == [0.0, 0.0] and all(d > 0 for d in delays[2:]), delays
    assert await bus.pending(agent_id) == 4
    try:
        await bus.request(agent_id, ask(agent_id, n=99))
    except BusOverloaded as exc:
        assert exc.pending == 4 and exc.limit == 4 and "HUB_HARD_LIMIT" in str(exc)
    else:
        raise AssertionError("the fifth request was not refused")
    assert await bus.pending(agent_id) == 4, "the refused request was not queued either"
    # Nothing accepted was dropped: a copy that starts now answers all four.
    again = Echo(agent_id)
    await run_agent(await make_bus(), again)
    await until(lambda: len(again.seen) == 4)
    assert sorted(again.seen) == sorted(accepted)


async def test_a_running_agent_answers_the_nats_service_api(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    from hub.agent import service_name

    bus = await make_bus()
    agent_id = unique("served")
    runner = await run_agent(bus, Echo(agent_id))
    name = service_name(agent_id)
    ping = json.loads((await bus.nc.request(f"$SRV.PING.{name}", b"", timeout=5)).data)
    assert ping["name"] == name and ping["metadata"]["agent_id"] == agent_id
    info = json.loads((await bus.nc.request(f"$SRV.INFO.{name}", b"", timeout=5)).data)
    assert [e["name"] for e in info["endpoints"]] == ["status"]
    await bus.request(agent_id, ask(agent_id))
    await until(lambda: runner.handled == 1)  # it counts once its answer is acknowledged
    status = json.loads((await bus.nc.request(f"hermes.agent.{agent_id}.status", b"",
                                              timeout=5)).data)
    assert status["handled"] == runner.handled == 1
    stats = json.loads((await bus.nc.request(f"$SRV.STATS.{name}", b"", timeout=5)).data)
    assert stats["endpoints"][0]["num_requests"] == 1


async def test_a_schema_change_published_while_agents_run_takes_effect_without_restart(
        make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    from hub.messages import schemas

    agent_bus = await make_bus()
    agent_id = unique("evolving")
    agent = Echo(agent_id)
    await run_agent(agent_bus, agent)
    caller = await make_bus()
    sender = unique("old-client")
    replies = await watch(caller, replies_to(sender))
    no_deadline = {"type": "task_request", "sender_id": sender, "task_id": "t-a",
                   "intent": "echo", "arguments": {}}
    await caller.js.publish(request_subject(agent_id), json.dumps(no_deadline).encode())
    await until(lambda: replies)
    refused = TaskResponse.model_validate_json(replies[0].data)
    assert (refused.error_code, refused.result["field"]) == ("INVALID_MESSAGE", "deadline_ms")
    assert "schema v1" in refused.result["rule"]
    # deadline_ms becomes optional, with a default: published once, on the bus.
    schema = schemas()["task_request"]
    schema["required"] = [f for f in schema["required"] if f != "deadline_ms"]
    schema["properties"]["deadline_ms"]["default"] = 5000
    admin = await make_bus(identity="schema-admin")  # the only one who may publish
    assert admin.schemas is not None and agent_bus.schemas is not None
    before = agent_bus.schemas.version("task_request")
    version = await admin.schemas.publish("task_request", schema)
    assert version == before + 1
    await until(lambda: agent_bus.schemas.version("task_request") == version)
    await caller.js.publish(request_subject(agent_id),
                            json.dumps({**no_deadline, "task_id": "t-b"}).encode())
    await until(lambda: len(replies) == 2)
    accepted = TaskResponse.model_validate_json(replies[1].data)
    assert accepted.status == "success" and accepted.task_id == "t-b"
    # Put v1's rule back for the rest of the session's tests.
    await admin.schemas.publish("task_request", schemas()["task_request"])

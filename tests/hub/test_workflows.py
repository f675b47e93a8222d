"""The workflow executor on a real nats-server, with the hub's services running: steps,
conditions, partial answers followed, deadlines, a restart mid-run, cancelling, versions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from hub import Agent, AgentRunner, Bus, TaskRequest, TaskResponse
from hub.discovery import discover
from hub.replay import replay
from hub.services import hub_services
from hub.workflows import DefinitionError
from hub.workflows.executor import WorkflowExecutor
from hub.workflows.runs import run_id_of
from hub.workflows.store import WorkflowStore
from tests.hub.conftest import BusFactory, unique
from tests.hub.test_bus import until

Handler = Callable[[TaskRequest], Awaitable[tuple[str, dict[str, Any]]]]


class Scripted(Agent):
    """Answers each request with what ``handler`` says; keeps every request it saw."""

    def __init__(self, agent_id: str, capabilities: tuple[str, ...], handler: Handler) -> None:
        super().__init__()
        self.agent_id = agent_id
        self.capabilities = capabilities
        self.handler = handler
        self.seen: list[TaskRequest] = []

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.seen.append(request)
        status, result = await self.handler(request)
        return self.respond(request, status, result,
                            error_code="REFUSED" if status == "failed" else None)


def answering(**result: Any) -> Handler:
    async def handler(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        return "success", {**result, "got": request.arguments}

    return handler


@dataclass
class Hub:
    """The hub's services and the agents of one test."""

    bus: Bus
    make_bus: BusFactory
    stack: contextlib.AsyncExitStack
    store: WorkflowStore
    runners: list[AgentRunner]

    async def agent(self, prefix: str, handler: Handler, *capabilities: str,
                    bus: Bus | None = None) -> Scripted:
        agent = Scripted(unique(prefix), tuple(capabilities), handler)
        runner = AgentRunner(bus or self.bus, agent)
        await runner.start()
        self.runners.append(runner)
        await until_discovered(self.bus, agent.agent_id)
        return agent

    async def executor(self, agent_id: str, **settings: Any) -> tuple[WorkflowExecutor,
                                                                        AgentRunner]:
        bus = await self.make_bus(**settings) if settings else self.bus
        executor = WorkflowExecutor(bus, WorkflowStore(bus), agent_id=agent_id)
        await executor.start()
        self.stack.push_async_callback(executor.stop)
        runner = AgentRunner(bus, executor)
        await runner.start()
        self.runners.append(runner)
        return executor, runner

    async def run(self, executor_id: str, workflow_id: str, given: dict[str, Any], *,
                  version: int | None = None, deadline_ms: int = 30_000,
                  task_id: str | None = None) -> TaskResponse:
        arguments: dict[str, Any] = {"workflow_id": workflow_id, "input": given}
        if version is not None:
            arguments["version"] = version
        request = TaskRequest(sender_id=unique("caller"), intent="run_workflow",
                              arguments=arguments, deadline_ms=deadline_ms,
                              **({"task_id": task_id} if task_id else {}))
        return await self.bus.request(executor_id, request)


@pytest.fixture
async def hub(make_bus: BusFactory) -> AsyncIterator[Hub]:
    async with contextlib.AsyncExitStack() as stack:
        bus = await make_bus()
        for service in hub_services(bus, bus.settings):
            await service.start()
            stack.push_async_callback(service.stop)
        runners: list[AgentRunner] = []

        async def stop_runners() -> None:  # side by side: each waits out its last pull
            await asyncio.gather(*(r.stop() for r in runners))

        stack.push_async_callback(stop_runners)
        yield Hub(bus, make_bus, stack, WorkflowStore(bus), runners)


async def until_discovered(bus: Bus, agent_id: str) -> None:
    async with asyncio.timeout(20):
        while agent_id not in {c.agent_id for c in await discover(bus, "*")}:
            await asyncio.sleep(0.05)


def statuses(response: TaskResponse) -> dict[str, str]:
    return {s["id"]: s["status"] for s in response.result["steps"]}


async def test_three_steps_with_a_condition_that_skips_one(hub: Hub) -> None:
    extract = await hub.agent("extract", answering(claim="C-7", needs_review=False),
                              "extract_claim")
    review = await hub.agent("review", answering(ok=True), "review_claim")
    summary = await hub.agent("summary", answering(text="all fine"), "summarise_claim")
    workflow_id = unique("claims")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "extract", "capability": "extract_claim", "input": {"text": "$.input.text"}},
        {"id": "review", "agent": review.agent_id, "intent": "review_claim",
         "if": "$.extract.result.needs_review == true",
         "input": {"claim": "$.extract.result.claim"}},
        {"id": "summarise", "capability": "summarise_claim",
         "input": {"claim": "$.extract.result.claim", "by": "$.extract.agent",
                   "style": "short"}}]})
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.run(executor_id, workflow_id, {"text": "my car was hit"})
    assert response.status == "success", response
    assert statuses(response) == {"extract": "success", "review": "skipped",
                                  "summarise": "success"}
    assert review.seen == []
    assert [r.arguments for r in extract.seen] == [{"text": "my car was hit"}]
    assert summary.seen[0].arguments == {"claim": "C-7", "by": extract.agent_id,
                                         "style": "short"}
    assert summary.seen[0].intent == "summarise_claim"
    assert response.result["output"] == {"text": "all fine", "got": summary.seen[0].arguments}
    skipped = next(s for s in response.result["steps"] if s["id"] == "review")
    assert "false" in skipped["reason"]
    # Every step's request carried the run's correlation id: replay shows the run in order.
    hops = await replay(hub.bus, response.correlation_id)
    requests = [h.message["intent"] for h in hops if h.message["type"] == "task_request"]
    assert requests == ["run_workflow", "extract_claim", "summarise_claim"]
    events = [(h.message["event_type"], h.message["details"].get("step")) for h in hops
              if h.message["type"] == "log_event"]
    assert events[0] == ("step_started", "extract") and events[-1] == ("run_finished", None)


async def test_independent_steps_run_side_by_side(hub: Hub) -> None:
    both = asyncio.Event()
    waiting = 0

    async def meet(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        nonlocal waiting
        waiting += 1
        if waiting == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 20)  # only if the other runs meanwhile
        return "success", {"part": request.intent}

    left = await hub.agent("left", meet, "left_part")
    right = await hub.agent("right", meet, "right_part")
    workflow_id = unique("parallel")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "left", "agent": left.agent_id, "intent": "left_part"},
        {"id": "right", "agent": right.agent_id, "intent": "right_part"},
        {"id": "join", "agent": left.agent_id, "intent": "join",
         "input": {"a": "$.left.result.part", "b": "$.right.result.part"}}]})
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.run(executor_id, workflow_id, {})
    assert response.status == "success", response
    assert left.seen[-1].arguments == {"a": "left_part", "b": "right_part"}


async def test_a_partial_answer_is_followed_by_its_next_steps(hub: Hub) -> None:
    async def needs_policy(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        return "partial", {"next_steps": [{"intent": "fetch_policy",
                                           "arguments": {"policy": "P-1"}}]}

    checker = await hub.agent("checker", needs_policy, "check_claim")
    policies = await hub.agent("policies", answering(covered=True), "fetch_policy")
    workflow_id = unique("follow")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "check", "capability": "check_claim", "input": {"claim": "$.input.claim"}},
        {"id": "decide", "agent": policies.agent_id, "intent": "decide",
         "input": {"covered": "$.check.result.covered"}}]})
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.run(executor_id, workflow_id, {"claim": "C-7"})
    assert response.status == "success", response
    assert len(checker.seen) == 1
    follow_up, decide = policies.seen
    assert (follow_up.intent, follow_up.arguments) == ("fetch_policy", {"claim": "C-7",
                                                                        "policy": "P-1"})
    assert decide.arguments == {"covered": True}
    assert response.result["steps"][0]["follow_ups"] == 1


async def test_a_step_that_stays_partial_is_followed_a_bounded_number_of_times(hub: Hub) -> None:
    async def always_partial(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        return "partial", {"next_steps": [{"intent": request.intent, "ask": "which car?"}]}

    asker = await hub.agent("asker", always_partial, "ask_more")
    workflow_id = unique("bounded")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "ask", "capability": "ask_more", "max_follow_ups": 2}]})
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.run(executor_id, workflow_id, {})
    assert response.status == "failed" and response.error_code == "STEP_FAILED"
    assert response.result["failed_step"] == "ask"
    assert len(asker.seen) == 3, "the first request and two follow-ups"
    assert asker.seen[-1].arguments == {"ask": "which car?"}
    assert statuses(response) == {"ask": "partial"}


async def test_a_timed_out_step_ends_the_run_naming_the_step(hub: Hub) -> None:
    async def never(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    await hub.agent("fast", answering(ok=True), "first_part")
    slow = await hub.agent("slow", never, "slow_part")
    after = await hub.agent("after", answering(ok=True), "last_part")
    workflow_id = unique("timeout")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "first", "capability": "first_part"},
        {"id": "slow", "agent": slow.agent_id, "intent": "slow_part", "deadline_ms": 600,
         "after": ["first"]},
        {"id": "last", "capability": "last_part", "after": ["slow"]}]})
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.run(executor_id, workflow_id, {})
    assert (response.status, response.error_code) == ("failed", "STEP_TIMEOUT")
    assert response.result["failed_step"] == "slow"
    assert statuses(response) == {"first": "success", "slow": "failed", "last": "pending"}
    assert after.seen == []
    run = await hub.store.run(response.result["run_id"])
    assert run is not None and run.status == "failed"
    assert run.steps["slow"].error_code == "TIMEOUT"


async def test_a_failed_step_may_let_the_run_go_on(hub: Hub) -> None:
    async def refuse(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        return "failed", {"error": "no photos"}

    await hub.agent("photos", refuse, "check_photos")
    report = await hub.agent("report", answering(done=True), "write_report")
    workflow_id = unique("goon")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "photos", "capability": "check_photos", "on_failure": "continue"},
        {"id": "report", "capability": "write_report",
         "input": {"photos": "$.photos.status", "why": "$.photos.result.error"}}]})
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.run(executor_id, workflow_id, {})
    assert response.status == "success", response
    assert statuses(response) == {"photos": "failed", "report": "success"}
    assert report.seen[0].arguments == {"photos": "failed", "why": "no photos"}


async def test_an_unknown_workflow_and_a_missing_input_are_clear_failures(hub: Hub) -> None:
    await hub.agent("any", answering(), "any_part")
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.run(executor_id, "no-such-workflow", {})
    assert (response.status, response.error_code) == ("failed", "UNKNOWN_WORKFLOW")
    workflow_id = unique("missing")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "a", "capability": "any_part", "input": {"claim": "$.input.claim"}}]})
    response = await hub.run(executor_id, workflow_id, {"other": 1})
    assert response.error_code == "STEP_FAILED"
    assert "$.input.claim matched nothing" in response.result["error"]


async def test_a_restarted_executor_continues_the_run_without_running_a_step_twice(
        hub: Hub) -> None:
    release = asyncio.Event()

    async def held(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        await asyncio.wait_for(release.wait(), 60)
        return "success", {"assessed": request.arguments["claim"]}

    first = await hub.agent("first", answering(claim="C-7"), "extract_claim")
    second = await hub.agent("second", held, "assess_claim")
    third = await hub.agent("third", answering(done=True), "close_claim")
    workflow_id = unique("restart")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "extract", "capability": "extract_claim"},
        {"id": "assess", "capability": "assess_claim",
         "input": {"claim": "$.extract.result.claim"}},
        {"id": "close", "capability": "close_claim",
         "input": {"assessed": "$.assess.result.assessed"}}]})
    executor_id = unique("executor")
    _, dying = await hub.executor(executor_id, hub_ack_wait=1.0)
    request = TaskRequest(sender_id=unique("caller"), intent="run_workflow", deadline_ms=60_000,
                          arguments={"workflow_id": workflow_id, "input": {}})
    answer = asyncio.ensure_future(hub.bus.request(executor_id, request))
    await until(lambda: len(second.seen) == 1)
    dying.abandon()  # the executor's process dies mid-run, the second step in flight
    run_id = run_id_of(request.sender_id, request.task_id)
    await hub.executor(executor_id, hub_ack_wait=1.0)  # another copy takes the request
    # The new copy waits for the answer already asked for instead of asking again.
    async with asyncio.timeout(30):
        while True:
            run = await hub.store.run(run_id)
            if run is not None and len(run.steps["assess"].sent) == 1 and \
                    await _redelivered(hub.bus, executor_id):
                break
            await asyncio.sleep(0.05)
    release.set()
    response = await asyncio.wait_for(answer, 30)
    assert response.status == "success", response
    assert (len(first.seen), len(second.seen), len(third.seen)) == (1, 1, 1)
    assert third.seen[0].arguments == {"assessed": "C-7"}
    hops = await replay(hub.bus, request.correlation_id)
    answers = [h for h in hops if h.message["type"] == "task_response"
               and h.message["task_id"] == request.task_id]
    assert len(answers) == 1, "the caller is answered once"


async def _redelivered(bus: Bus, executor_id: str) -> bool:
    from hub.bus import TASKS, durable_of

    info = await bus.js.consumer_info(TASKS, durable_of(executor_id))
    return int(info.num_redelivered or 0) >= 1 and int(info.num_ack_pending or 0) == 1


async def test_a_run_is_listed_inspected_and_cancelled(hub: Hub) -> None:
    started, ended = asyncio.Event(), asyncio.Event()
    hub.stack.callback(ended.set)

    async def never(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        started.set()
        await ended.wait()  # answers only once the test is over
        return "success", {}

    await hub.agent("stuck", never, "stuck_part")
    workflow_id = unique("cancel")
    await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "stuck", "capability": "stuck_part"}]})
    executor_id = unique("executor")
    await hub.executor(executor_id)
    request = TaskRequest(sender_id=unique("caller"), intent="run_workflow", deadline_ms=60_000,
                          arguments={"workflow_id": workflow_id, "input": {"n": 1}})
    answer = asyncio.ensure_future(hub.bus.request(executor_id, request))
    await asyncio.wait_for(started.wait(), 20)
    run_id = run_id_of(request.sender_id, request.task_id)
    listed = await hub.store.list_runs(workflow_id=workflow_id)
    assert [(r.run_id, r.status) for r in listed] == [(run_id, "running")]
    assert listed[0].document["input"] == {"n": 1}
    assert listed[0].steps["stuck"].status == "running"
    assert (await hub.store.cancel(run_id)) is not None
    response = await asyncio.wait_for(answer, 20)
    assert (response.status, response.error_code) == ("failed", "CANCELLED")
    run = await hub.store.run(run_id)
    assert run is not None and run.status == "cancelled"
    assert run.steps["stuck"].status == "cancelled"
    assert await hub.store.cancel("run-nosuchrun") is None


async def test_a_new_version_never_changes_a_run_in_progress(hub: Hub) -> None:
    release = asyncio.Event()

    async def held(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        await asyncio.wait_for(release.wait(), 60)
        return "success", {}

    holder = await hub.agent("held", held, "hold_part")
    old = await hub.agent("old", answering(), "old_part")
    new = await hub.agent("new", answering(), "new_part")
    workflow_id = unique("versions")
    v1 = await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "hold", "capability": "hold_part"},
        {"id": "then", "capability": "old_part", "after": ["hold"]}]})
    executor_id = unique("executor")
    executor, _ = await hub.executor(executor_id)
    running = asyncio.ensure_future(hub.run(executor_id, workflow_id, {}))
    await until(lambda: len(holder.seen) == 1)  # the run has started on version 1
    v2 = await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "hold", "capability": "hold_part"},
        {"id": "then", "capability": "new_part", "after": ["hold"]}]})
    assert (v1.version, v2.version) == (1, 2)
    release.set()
    # The executor follows the versions with a watch: the next run without a version is
    # on version 2 once the watch has delivered it (a moment; the gateway's API and
    # /workflow name the version they read instead).
    await until(lambda: executor.store._latest.get(workflow_id) == 2)
    response = await asyncio.wait_for(running, 30)
    assert response.status == "success" and response.result["version"] == 1
    assert len(old.seen) == 1 and new.seen == []
    response = await hub.run(executor_id, workflow_id, {})
    assert response.result["version"] == 2 and len(new.seen) == 1
    response = await hub.run(executor_id, workflow_id, {}, version=1)
    assert response.result["version"] == 1 and len(old.seen) == 2
    # A kept version never changes; keeping the same one again is harmless.
    with pytest.raises(DefinitionError, match="never changes"):
        await hub.store.put({**v1.model_dump(by_alias=True), "steps": [
            {"id": "hold", "capability": "new_part"}]})
    assert await hub.store.put(v1.model_dump(by_alias=True)) == v1
    assert (await hub.store.versions())[workflow_id] == [1, 2]


async def test_a_workflow_with_a_capability_is_offered_under_it(hub: Hub) -> None:
    await hub.agent("part", answering(ok=True), "some_part")
    capability = f"answer_{unique('x').replace('-', '_')}"
    workflow_id = unique("offered")
    await hub.store.put({"workflow_id": workflow_id, "capability": capability,
                         "steps": [{"id": "part", "capability": "some_part",
                                    "input": {"q": "$.input.question"}}]})
    executor_id = unique("executor")
    executor, _ = await hub.executor(executor_id)
    found = await discover(hub.bus, capability)
    async with asyncio.timeout(20):
        while not found:
            await asyncio.sleep(0.05)
            found = await discover(hub.bus, capability)
    assert [c.agent_id for c in found] == [executor_id]
    response = await hub.bus.request(executor_id, TaskRequest(
        sender_id=unique("caller"), intent=capability, arguments={"question": "why?"},
        deadline_ms=20_000))
    assert response.status == "success", response
    assert response.result["output"]["got"] == {"q": "why?"}
    # A workflow kept while the executor runs is offered from its next heartbeat on.
    later = f"answer_{unique('y').replace('-', '_')}"
    await hub.store.put({"workflow_id": unique("later"), "capability": later,
                         "steps": [{"id": "part", "capability": "some_part"}]})
    await executor.refresh()
    async with asyncio.timeout(20):
        while not await discover(hub.bus, later):
            await asyncio.sleep(0.05)


async def test_a_continued_run_takes_an_answer_that_came_while_no_copy_listened(
        hub: Hub) -> None:
    """A copy died after its step was answered and before it kept the answer: the copy
    that continues the run reads it from HMP_REPLIES and sends nothing again."""
    import time

    from hub.bus import Headers
    from hub.subjects import reply_subject
    from hub.workflows.runs import Run, Sent, StepState

    agent = await hub.agent("answered", answering(fresh=True), "answered_part")
    workflow_id = unique("kept")
    workflow = await hub.store.put({"workflow_id": workflow_id, "steps": [
        {"id": "only", "agent": agent.agent_id, "intent": "answered_part"}]})
    request = TaskRequest(sender_id=unique("caller"), intent="run_workflow", deadline_ms=30_000,
                          arguments={"workflow_id": workflow_id, "input": {}})
    run_id = run_id_of(request.sender_id, request.task_id)
    sent = Sent(task_id=f"{run_id}-only-0", agent=agent.agent_id, intent="answered_part",
                arguments={}, timestamp=time.time() - 200, deadline_ms=60_000,
                sender_id=f"wf.{run_id}.only.0")
    await hub.store.create(Run(
        run_id=run_id, workflow_id=workflow_id, version=workflow.version, definition=workflow,
        correlation_id=request.correlation_id, sender_id=request.sender_id,
        task_id=request.task_id, document={"input": {}},
        steps={"only": StepState(status="running", agent=agent.agent_id, sent=[sent])}))
    await hub.bus.publish(reply_subject(agent.agent_id, sent.sender_id), TaskResponse(
        sender_id=agent.agent_id, correlation_id=request.correlation_id, task_id=sent.task_id,
        status="success", result={"from": "before"}), Headers("c", "c"))
    executor_id = unique("executor")
    await hub.executor(executor_id)
    response = await hub.bus.request(executor_id, request)
    assert response.status == "success", response
    assert response.result["output"] == {"from": "before"}
    assert agent.seen == [], "the step was not sent again"


async def test_the_workflows_file_is_kept_at_start_and_a_bad_one_refused_naming_the_step(
        hub: Hub, tmp_path: Any) -> None:
    from agent_core import ConfigError
    from hub.workflows.service import ExecutorService

    workflow_id = unique("filed")
    good = tmp_path / "flows.yaml"
    good.write_text(f"- workflow_id: {workflow_id}\n  steps:\n    - id: a\n      capability: x\n")
    service = ExecutorService(hub.bus, files=[good])
    await service.start()
    await service.stop()
    kept = await hub.store.get(workflow_id)
    assert kept is not None and kept.version == 1
    again = ExecutorService(hub.bus, files=[good])  # the next start, unchanged: no new version
    await again.start()
    await again.stop()
    assert (await hub.store.versions())[workflow_id] == [1]
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"workflows:\n  - workflow_id: {workflow_id}\n    steps:\n"
                   "      - {id: a, capability: x, input: {q: '$.b.result'}}\n")
    with pytest.raises(ConfigError) as refused:
        await ExecutorService(hub.bus, files=[bad]).start()
    assert "bad.yaml" in str(refused.value) and "step 'a'" in str(refused.value)
    assert "no step of this workflow" in str(refused.value)


async def test_refreshing_the_capabilities_lists_no_keys_and_reads_a_version_once(
        hub: Hub) -> None:
    """The executor refreshes its capabilities every few seconds: from the versions its
    store follows, never a listing of the definitions bucket (a stream-info request
    carrying every key), and a version it read before is not asked for again."""
    first = unique("cap_a").replace("-", "_")
    await hub.store.put({"workflow_id": unique("quiet"), "capability": first,
                         "steps": [{"id": "a", "capability": "some_part"}]})
    executor, _ = await hub.executor(unique("executor"))
    await executor.refresh()  # every kept version read once
    asked: list[str] = []

    async def seen(msg: Any) -> None:
        asked.append(msg.subject)

    watcher = await hub.make_bus()
    subscription = await watcher.nc.subscribe("$JS.API.>", cb=seen)
    await watcher.nc.flush()
    for _ in range(3):
        await executor.refresh()
    await watcher.nc.flush()
    await subscription.unsubscribe()
    assert [s for s in asked if "HMP_WORKFLOWS" in s] == []
    # A version kept meanwhile is offered without waiting for the next periodic refresh.
    later = unique("cap_b").replace("-", "_")
    await hub.store.put({"workflow_id": unique("later"), "capability": later,
                         "steps": [{"id": "a", "capability": "some_part"}]})
    async with asyncio.timeout(10):
        while later not in executor.capabilities:
            await asyncio.sleep(0.02)

"""A gateway told to stop: it claims nothing new, ends its followers at once, lets running
tasks finish within HERMES_SHUTDOWN_GRACE, and hands back what is left so that another
replica continues it at once, each message answered exactly once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from adapters.base import InboundMessage
from adapters.webhook import signed_headers
from agent_core.context.compressor import ModelSummariser
from agent_core.models.replay import ReplayModelServer, Reply
from tests.integration.conftest import WEBHOOK_SECRET, GatewayFactory, Harness, answer_echo
from tests.integration.test_webhook import body_of


async def _submit(h: Harness, text: str, conversation: str) -> str:
    accepted = await h.client.post("/agent/run-async",
                                   json={"text": text, "conversation_id": conversation})
    assert accepted.status == 202, await accepted.text()
    task_id: str = (await accepted.json())["task_id"]
    return task_id


def _hang(h: Harness, text: str, seconds: float) -> asyncio.Event:
    """Every model call answers ``text`` after ``seconds``; the event is set at the first."""
    entered = asyncio.Event()

    def hanging(path: str, body: dict[str, Any]) -> Reply:
        entered.set()
        return Reply(text, delay=seconds)

    h.model.responder = hanging
    return entered


def _latest(body: dict[str, Any]) -> str:
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    return str(last["content"])


async def test_a_stopping_gateway_finishes_its_task_and_hands_on_the_rest(
        make_gateway: GatewayFactory) -> None:
    first = await make_gateway(hermes_shutdown_grace=10)
    entered = asyncio.Event()

    def model(path: str, body: dict[str, Any]) -> Reply:
        if _latest(body) == "slow":
            entered.set()
            return Reply("slow done", delay=1.0)
        return answer_echo(path, body)  # type: ignore[no-any-return]

    first.model.responder = model
    slow = await _submit(first, "slow", "c1")
    await asyncio.wait_for(entered.wait(), 10)
    behind = await _submit(first, "behind", "c1")  # queued behind the running task
    stream = await first.client.get(f"/agent/tasks/{slow}/events")
    assert stream.status == 200
    events = await stream.content.readany()  # following it

    began = time.monotonic()
    stopping = asyncio.create_task(first.client.server.close())
    async with asyncio.timeout(3):  # the follower ends at once, not when the task does
        while chunk := await stream.content.readany():
            events += chunk
    assert b"AGENT_STARTED" in events and b"AGENT_FINISHED" not in events
    await first.wait_for(lambda: first.gateway.stopping)
    assert first.gateway.parts.router is not None  # its socket is closed: queue a message directly
    other = (await first.gateway.parts.router.ingest(InboundMessage(
        channel="api", conversation_id="api:c2", user_id="api:u", text="other",
        is_direct=True, mentions_bot=True, platform_message_id="m-other"))).task_id
    assert other is not None
    await stopping
    assert time.monotonic() - began < 5, "it stopped once the running task was done"
    assert first.gateway.parts.workers is not None and first.gateway.parts.workers.processed == 1, \
        "the stopping gateway started nothing after the running task"

    second = await make_gateway(redis_prefix=first.settings.redis_prefix)
    assert (await second.wait_task(slow, "answered"))["text"] == "slow done"
    assert (await second.wait_task(behind, "answered"))["text"] == "answer to: behind"
    assert (await second.wait_task(other, "answered"))["text"] == "answer to: other"


async def test_a_task_longer_than_the_grace_is_handed_back_and_finished_elsewhere(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    first = await make_gateway(hermes_shutdown_grace=0.5, hermes_lease_seconds=10)
    entered = _hang(first, "never delivered", 5)
    body = body_of(text="outlive the grace", callback_url=callback_server["url"])
    accepted = await first.client.post("/webhook/crm", data=body,
                                       headers=signed_headers(WEBHOOK_SECRET, body))
    assert accepted.status == 202
    task_id = (await accepted.json())["task_id"]
    await asyncio.wait_for(entered.wait(), 10)
    began = time.monotonic()
    await first.client.server.close()
    assert time.monotonic() - began < 3, "the grace (0.5 s) bounded the stop, not the task"

    first.model.responder = answer_echo
    second = await make_gateway(redis_prefix=first.settings.redis_prefix,
                                hermes_lease_seconds=10)
    await second.wait_for(lambda: len(callback_server["received"]) == 1)
    assert time.monotonic() - began < 5, "handed back at once, not after the 10 s lease"
    payload = callback_server["received"][0][2]
    assert payload["task_id"] == task_id and payload["text"] == "answer to: outlive the grace"
    await second.wait_idle()
    assert len(callback_server["received"]) == 1, "no 'Stopped.' from the stopping gateway"
    assert (await second.task(task_id))["status"] == "answered"


async def test_readiness_and_waiting_requests_when_stopping(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_run_timeout=10)
    assert (await h.client.get("/readyz")).status == 200
    assert h.gateway.parts.workers is not None
    await h.gateway.begin_stop()
    ready = await h.client.get("/readyz")
    assert ready.status == 503 and (await ready.json())["status"] == "stopping"
    # A synchronous run accepted now is queued for another replica and answered at once.
    began = time.monotonic()
    response = await h.client.post("/agent/run", json={"text": "late", "conversation_id": "c9"})
    assert response.status == 202 and time.monotonic() - began < 2
    body = await response.json()
    assert body["status"] == "queued"
    assert h.gateway.parts.workers.processed == 0


async def test_a_synchronous_run_waiting_for_its_task_here_answers_202_when_stopping(
        make_gateway: GatewayFactory) -> None:
    # Its task was started by this process as it was queued, so the request waits for the
    # task here rather than on its event stream; a stop must still end that wait at once.
    h = await make_gateway(hermes_run_timeout=30, hermes_shutdown_grace=0.5)
    entered = _hang(h, "too late", 4)
    waiting = asyncio.create_task(h.client.post(
        "/agent/run", json={"text": "slow", "conversation_id": "c1"}))
    await asyncio.wait_for(entered.wait(), 10)
    began = time.monotonic()
    await h.gateway.begin_stop()
    response = await asyncio.wait_for(waiting, 10)
    assert response.status == 202 and time.monotonic() - began < 3
    assert (await response.json())["status"] == "running"


async def test_a_stopped_gateway_closes_the_summary_models_connections_too(
        make_gateway: GatewayFactory, model_server: ReplayModelServer) -> None:
    """CONTEXT_SUMMARY_MODEL has connections of its own: a stopped gateway closes them as it
    closes the main model's (left open, aiohttp reported them unclosed at exit)."""
    h = await make_gateway(context_summary_model={
        "provider": "openai", "model_name": "summariser", "base_url": model_server.openai_url,
        "api_key": "sk-test-summary-0123456789"})
    summariser = h.gateway.parts.runtime.loop.compressor
    assert isinstance(summariser, ModelSummariser)
    model_server.add(Reply("a short summary"))
    assert await summariser.compress("long " * 4000, 50) == "a short summary"
    assert model_server.requests[-1][1]["model"] == "summariser"
    runner = model_server._runner
    assert runner is not None and runner.server is not None
    assert runner.server.connections, "the summariser keeps its connection alive"
    await h.gateway.stop()
    # Closed by the stop, not by the pool's 5 s keep-alive expiry.
    async with asyncio.timeout(3):
        while runner.server.connections:  # the model server sees them closed
            await asyncio.sleep(0.02)

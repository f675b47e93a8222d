"""GET /metrics: what a Prometheus scrape sees after real traffic, and who may scrape."""

from __future__ import annotations

from typing import Any

from agent_core.models.replay import Reply
from tests.integration.conftest import GatewayFactory
from tests.integration.test_serve import parse_metrics
from tests.integration.test_webhook import body_of, post


async def scrape(h: Any, **headers: str) -> dict[Any, float]:
    response = await h.client.get("/metrics", headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return parse_metrics(await response.text())


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_traffic_shows_in_the_metrics(make_gateway: GatewayFactory,
                                            callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    before = await scrape(h)
    h.model.add(Reply.call("calc_growth_rate", {"current": 120, "previous": 100},
                           prompt_tokens=50, completion_tokens=7),
                Reply("Growth is 20%.", prompt_tokens=60, completion_tokens=5))
    run = await (await h.client.post("/agent/run", json={"text": "growth?"})).json()
    assert run["status"] == "answered"
    h.model.add(Reply("hello there"))
    body = body_of(text="hi", callback_url=callback_server["url"], idempotency_key="k-1")
    assert (await post(h.client, body)).status == 202
    assert (await post(h.client, body)).status == 200  # the same delivery again
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    await h.wait_idle()
    assert (await h.client.get(f"/agent/tasks/{run['task_id']}")).status == 200
    assert (await h.client.post("/agent/run", json={"text": 5})).status == 400
    assert (await h.client.get("/no/such/route")).status == 404
    assert (await h.client.get("/agent/run")).status == 405

    after = await scrape(h)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("hermes_inbound_messages_total", channel="api", status="queued") == 1
    assert grew("hermes_inbound_messages_total", channel="webhook", status="queued") == 1
    assert grew("hermes_inbound_messages_total", channel="webhook", status="duplicate") == 1
    assert grew("hermes_tasks_total", outcome="answered") == 2
    assert grew("hermes_task_duration_seconds_count") == 2
    assert grew("hermes_model_calls_total") == 3
    assert grew("hermes_model_tokens_total", kind="prompt") == 110 + 20
    assert grew("hermes_model_tokens_total", kind="completion") == 12 + 10
    assert grew("hermes_tool_calls_total", tool="calc_growth_rate", result="ok") == 1
    assert grew("hermes_tool_duration_seconds_count", tool="calc_growth_rate") == 1
    assert grew("hermes_deliveries_total", channel="webhook", result="sent") == 1
    # Requests by route template: a task id never becomes a label of its own.
    assert grew("hermes_http_requests_total", route="/webhook/{source}", method="POST",
                status="202") == 1
    assert grew("hermes_http_requests_total", route="/agent/tasks/{task_id}", method="GET",
                status="200") == 1
    # Timed by route: both webhook posts, the 202 and the 200 of the duplicate.
    assert grew("hermes_http_request_duration_seconds_count", route="/webhook/{source}") == 2
    assert grew("hermes_http_request_duration_seconds_bucket", route="/webhook/{source}",
                le="+Inf") == 2
    assert grew("hermes_http_request_duration_seconds_sum", route="/webhook/{source}") > 0
    assert grew("hermes_http_requests_total", route="/agent/run", method="POST",
                status="400") == 1
    # Any other path or method: counted, under one label.
    assert grew("hermes_http_requests_total", route="unmatched", method="GET",
                status="404") == 1
    assert grew("hermes_http_requests_total", route="unmatched", method="GET",
                status="405") == 1
    assert not any(run["task_id"] in str(labels) for _, labels in after)
    assert value(after, "hermes_active_conversations") == 0
    assert value(after, "hermes_conversations_waiting") == 0


async def test_a_failing_tool_and_a_retried_delivery_are_counted(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    h.model.add(Reply.call("calc_growth_rate", {"current": 1, "previous": 0}),
                Reply("cannot divide"))
    callback_server["fail_next"] = 1
    body = body_of(text="growth from zero?", callback_url=callback_server["url"])
    assert (await post(h.client, body)).status == 202
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    samples = await scrape(h)
    assert value(samples, "hermes_tool_calls_total", tool="calc_growth_rate",
                 result="error") == 1
    assert value(samples, "hermes_deliveries_total", channel="webhook", result="failed") == 1
    assert value(samples, "hermes_deliveries_total", channel="webhook", result="sent") == 1


async def test_metrics_need_the_api_key_when_one_is_set(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=["metrics-key-0123456789"])
    assert (await h.client.get("/metrics")).status == 401
    samples = await scrape(h, Authorization="Bearer metrics-key-0123456789")
    assert value(samples, "hermes_http_requests_total", route="/metrics", method="GET",
                 status="401") == 1


async def test_a_resumed_task_counts_its_model_calls_and_tokens_once(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply.call("save_daily_report", {"content": "Q3"}, prompt_tokens=40,
                           completion_tokens=4),
                Reply("Saved.", prompt_tokens=50, completion_tokens=2))
    before = await scrape(h)
    paused = await (await h.client.post("/agent/run", json={"text": "save it",
                                                             "user_id": "clerk"})).json()
    assert paused["status"] == "awaiting_approval"
    await h.client.post(f"/agent/approvals/{paused['approval']['id']}",
                        json={"approved": True, "user_id": "boss"})
    await h.wait_task(paused["task_id"], "answered")
    await h.wait_idle()
    after = await scrape(h)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert len(h.model.requests) == 2
    assert grew("hermes_model_calls_total") == 2, "the paused run's call counted once"
    assert grew("hermes_model_tokens_total", kind="prompt") == 90
    assert grew("hermes_model_tokens_total", kind="completion") == 6
    assert grew("hermes_tasks_total", outcome="awaiting_approval") == 1
    assert grew("hermes_tasks_total", outcome="answered") == 1
    assert grew("hermes_task_duration_seconds_count") == 1


async def test_model_calls_waiting_for_their_turn_show_in_the_metrics(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(llm_max_concurrency=1)
    h.model.add(Reply("slow", delay=60), Reply("second"))
    model = h.gateway.parts.runtime.model
    first = (await (await h.client.post("/agent/run-async", json={
        "text": "first", "conversation_id": "a"})).json())["task_id"]
    await h.wait_for(lambda: len(h.model.requests) == 1)
    second = (await (await h.client.post("/agent/run-async", json={
        "text": "second", "conversation_id": "b"})).json())["task_id"]
    await h.wait_for(lambda: model.calls_waiting == 1)
    assert value(await scrape(h), "hermes_model_calls_waiting") == 1
    # Stopping the first task gives its turn to the second call.
    assert (await h.client.post(f"/agent/tasks/{first}/cancel")).status == 202
    await h.wait_idle()
    assert (await h.task(second))["text"] == "second"
    assert len(h.model.requests) == 2
    assert value(await scrape(h), "hermes_model_calls_waiting") == 0

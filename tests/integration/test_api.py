"""The HTTP API of a running gateway: runs, tasks, SSE, auth, and bad input."""

from __future__ import annotations

import asyncio
import io
import json
import re
from typing import Any

import pytest

from agent_core.models.replay import Reply
from agent_core.store.base import ConversationStore
from gateway.cli import main
from gateway.settings import ApiKey
from tests.integration.conftest import GatewayFactory, answer_echo, api_key, bearer


async def sse_events(client: Any, path: str, headers: dict[str, str] | None = None
                     ) -> list[dict[str, Any]]:
    response = await client.get(path, headers=headers or {})
    assert response.status == 200 and response.headers["Content-Type"] == "text/event-stream"
    body = (await response.read()).decode()
    events = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            events.append({**json.loads(fields["data"]), "sse_id": fields["id"],
                           "sse_event": fields["event"]})
    return events


async def test_run_answers_with_text_and_report_and_the_task_can_be_read(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply.call("calc_growth_rate", {"current": 120, "previous": 100}),
                Reply("Growth is 20%.", prompt_tokens=50, completion_tokens=6))
    response = await h.client.post("/agent/run", json={"text": "growth 100 to 120?",
                                                        "conversation_id": "c1"})
    assert response.status == 200
    body = await response.json()
    assert body["status"] == "answered" and body["text"] == "Growth is 20%."
    assert body["conversation_id"] == "api:local:c1"
    assert body["report"]["tools"]["calc_growth_rate"]["calls"] == 1
    assert body["report"]["completion_tokens"] == 16
    again = await h.task(body["task_id"])
    assert again["text"] == "Growth is 20%." and again["status"] == "answered"


async def test_a_synchronous_run_is_answered_whether_its_task_starts_at_once_or_waits(
        make_gateway: GatewayFactory) -> None:
    # The first run's task starts in this process as it is queued and is waited for here;
    # the second arrives while the conversation is busy, is queued for whichever worker
    # takes the conversation next, and is waited for through its event stream.
    h = await make_gateway()
    h.model.add(Reply("first", delay=0.5), Reply("second"))
    first = asyncio.create_task(h.client.post(
        "/agent/run", json={"text": "one", "conversation_id": "turns"}))
    await h.wait_for(lambda: len(h.model.requests) == 1)
    second = await h.client.post("/agent/run", json={"text": "two", "conversation_id": "turns"})
    answers = [await (await first).json(), await second.json()]
    assert [(a["status"], a["text"]) for a in answers] == \
        [("answered", "first"), ("answered", "second")]


async def test_a_synchronous_run_ended_here_answers_with_the_state_saved_not_read_back(
        make_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The task ran in this process: its answer is the state it saved, the same the task
    API then reads; without that state (a store that keeps none), it is read back."""
    h = await make_gateway()
    store = h.gateway.parts.opened.store
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}), Reply("Doubled."))
    load = store.load_task

    async def not_read(task_id: str) -> Any:
        raise AssertionError("read back")

    monkeypatch.setattr(store, "load_task", not_read)
    answer = await h.client.post("/agent/run", json={"text": "x"})
    body = await answer.json()
    assert answer.status == 200 and body["text"] == "Doubled." and body["rounds"] == 2
    monkeypatch.setattr(store, "load_task", load)
    assert body == await h.task(body["task_id"])

    # A store that keeps no written state (or a final save that failed): read back.
    reads: list[str] = []

    async def counted(task_id: str) -> Any:
        reads.append(task_id)
        return await load(task_id)

    monkeypatch.setattr(store, "load_task", counted)
    monkeypatch.setattr(store, "watch_task", ConversationStore.watch_task.__get__(store))
    h.model.add(Reply("again"))
    answer = await h.client.post("/agent/run", json={"text": "y"})
    body = await answer.json()
    assert answer.status == 200 and body["text"] == "again" and reads == [body["task_id"]]


async def test_sse_replays_then_ends_and_resumes_from_last_event_id(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}), Reply("Doubled."))
    task_id = (await (await h.client.post("/agent/run", json={"text": "x"})).json())["task_id"]
    events = await sse_events(h.client, f"/agent/tasks/{task_id}/events")
    types = [e["type"] for e in events]
    assert types[0] == "AGENT_STARTED" and types[-1] == "AGENT_FINISHED"
    assert "TOOL_FINISHED" in types and all(e["task_id"] == task_id for e in events)
    assert [e["sse_event"] for e in events] == types
    middle = events[2]["sse_id"]
    later = await sse_events(h.client, f"/agent/tasks/{task_id}/events",
                             {"Last-Event-ID": middle})
    assert [e["sse_id"] for e in later] == [e["sse_id"] for e in events[3:]]


async def test_sse_streams_live_events_of_a_running_task(make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply("slow answer", delay=0.5))
    accepted = await h.client.post("/agent/run-async", json={"text": "take your time"})
    assert accepted.status == 202
    task_id = (await accepted.json())["task_id"]
    events = await sse_events(h.client, f"/agent/tasks/{task_id}/events")
    assert events[-1]["payload"]["text"] == "slow answer"


async def test_run_async_then_poll(make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    accepted = await h.client.post("/agent/run-async", json={"text": "ping"})
    body = await accepted.json()
    assert body["status"] == "queued" and body["status_url"].endswith(body["task_id"])
    done = await h.wait_task(body["task_id"], "answered")
    assert done["text"] == "answer to: ping"


async def test_without_a_model_the_first_reply_says_what_to_set(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(model=False)
    body = await (await h.client.post("/agent/run", json={"text": "hello"})).json()
    for name in ("LLM_PROVIDER", "LLM_MODEL_NAME", "LLM_API_KEY", "hermes-gateway demo"):
        assert name in body["text"]
    page = await h.client.get("/")
    assert page.status == 200 and 'src="/static/chat.js"' in await page.text()
    script = await h.client.get("/static/chat.js")
    assert script.status == 200 and "EventSource" in await script.text()
    assert (await h.client.get("/static/index.html")).status == 404  # only the page's files


async def test_conversation_memory_spans_requests_and_can_be_forgotten(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    for text in ("first", "second"):
        await h.client.post("/agent/run", json={"text": text, "conversation_id": "mem"})
    sent = h.model.requests[-1][1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["first", "second"]
    gone = await h.client.delete("/agent/conversations/api:local:mem")
    assert gone.status == 200 and (await gone.json())["deleted_keys"] > 0
    await h.client.post("/agent/run", json={"text": "third", "conversation_id": "mem"})
    sent = h.model.requests[-1][1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["third"]


async def test_commands_through_the_api(make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    body = await (await h.client.post("/agent/run", json={"text": "/status",
                                                           "conversation_id": "cmd"})).json()
    assert body["status"] == "command" and "idle" in body["text"]
    help_text = await (await h.client.post("/agent/run", json={"text": "/help"})).json()
    assert "/stop" in help_text["text"] and h.model.requests == []


async def test_cancel_stops_a_running_task(make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply("too late", delay=5))
    task_id = (await (await h.client.post("/agent/run-async", json={"text": "x"})).json())[
        "task_id"]
    await h.wait_task(task_id, "running")
    response = await h.client.post(f"/agent/tasks/{task_id}/cancel")
    assert response.status == 202
    view = await h.wait_task(task_id, "cancelled", timeout=10)
    assert view["text"] == "Stopped."
    again = await h.client.post(f"/agent/tasks/{task_id}/cancel")
    assert again.status == 409


async def test_api_keys_are_required_when_configured(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=["key-one-abcdefgh", "key-two-abcdefgh"])
    h.model.responder = answer_echo
    assert (await h.client.post("/agent/run", json={"text": "x"})).status == 401
    wrong = await h.client.post("/agent/run", json={"text": "x"},
                                headers={"Authorization": "Bearer nope"})
    assert wrong.status == 401 and "WWW-Authenticate" in wrong.headers
    ok = await h.client.post("/agent/run", json={"text": "x"},
                             headers={"Authorization": "Bearer key-two-abcdefgh"})
    assert ok.status == 200
    task_id = (await ok.json())["task_id"]
    events = await h.client.get(f"/agent/tasks/{task_id}/events?access_token=key-two-abcdefgh")
    assert events.status == 200
    # Another key's principal does not learn that the task exists.
    other = await h.client.get(f"/agent/tasks/{task_id}/events?access_token=key-one-abcdefgh")
    assert other.status == 404
    assert (await h.client.get("/healthz")).status == 200, "health stays open"


def test_serve_refuses_a_public_address_without_api_keys(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "HERMES_API_KEYS" in capsys.readouterr().err


@pytest.mark.parametrize(("method", "path", "kwargs", "status"), [
    ("post", "/agent/run", {"data": "not json", "headers": {"Content-Type": "application/json"}},
     400),
    ("post", "/agent/run", {"data": "text=hi"}, 415),
    ("post", "/agent/run", {"json": {}}, 400),
    ("post", "/agent/run", {"json": {"text": ""}}, 400),
    ("post", "/agent/run", {"json": {"text": 42}}, 400),
    ("post", "/agent/run", {"json": {"text": "hi", "extra": 1}}, 400),
    ("post", "/agent/run", {"json": {"text": "hi", "conversation_id": "has space"}}, 400),
    ("post", "/agent/run", {"json": ["text"]}, 400),
    ("post", "/agent/run-async", {"json": {"text": "x" * 20_001}}, 400),
    ("post", "/agent/run", {"data": "BIG", "headers": {"Content-Type": "application/json"}},
     413),
    ("get", "/agent/tasks/does-not-exist", {}, 404),
    ("get", "/agent/tasks/does-not-exist/events", {}, 404),
    ("post", "/agent/tasks/does-not-exist/cancel", {}, 404),
    ("delete", "/agent/conversations/bad%20id", {}, 400),
    ("get", "/agent/run", {}, 405),
    ("get", "/no/such/route", {}, 404),
    ("post", "/slack/events", {"json": {}}, 404),
    ("post", "/telegram/webhook", {"json": {}}, 404),
    ("post", "/webhook/unknown", {"json": {}}, 404),
])
async def test_bad_requests_get_a_4xx_with_a_reason(make_gateway: GatewayFactory, method: str,
                                                    path: str, kwargs: dict[str, Any],
                                                    status: int) -> None:
    big = kwargs.get("data") == "BIG"
    # A JSON body may carry one file's worth of base64 (HERMES_MAX_FILE_MB) beyond 1 MB.
    h = await make_gateway(**({"hermes_max_file_mb": 0.5} if big else {}))
    if big:
        kwargs = {**kwargs, "data": io.BytesIO(b"x" * 2_000_000)}
    response = await getattr(h.client, method)(path, **kwargs)
    assert response.status == status
    body = await response.json()
    assert body["error"] and "Traceback" not in body["error"]


async def test_bad_last_event_id_is_rejected(make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    task_id = (await (await h.client.post("/agent/run", json={"text": "x"})).json())["task_id"]
    response = await h.client.get(f"/agent/tasks/{task_id}/events",
                                  headers={"Last-Event-ID": "yesterday"})
    assert response.status == 400


async def test_openapi_documents_every_api_route(make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    doc = await (await h.client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    routes = {r.resource.canonical for r in h.client.app.router.routes()  # type: ignore[union-attr]
              if r.resource is not None and (r.resource.canonical.startswith("/agent/")
                                             or r.resource.canonical == "/metrics")}
    assert routes <= set(doc["paths"]), routes - set(doc["paths"])


async def test_readyz_says_ready_and_nothing_about_the_deployment(
        make_gateway: GatewayFactory) -> None:
    # Public (probes carry no key): no store path, model, channels or MCP servers.
    h = await make_gateway(hermes_api_keys=["readyz-key-0123456789abcdef"])
    response = await h.client.get("/readyz")
    assert response.status == 200 and await response.json() == {"status": "ready"}
    text = await (await h.client.get("/readyz")).text()
    for detail in ("valkey", "scripted", "webhook", "mcp", str(h.settings.hermes_data_dir)):
        assert detail not in text
    refused = await h.client.get("/agent/status")
    assert refused.status == 401 and "valkey" not in await refused.text()


async def test_the_status_of_the_parts_is_for_admins(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("boss", "admin"), api_key("someone")])
    body = await (await h.client.get("/agent/status", headers=bearer("boss"))).json()
    assert body["status"] == "ready" and "webhook" in body["channels"]
    assert body["model"] == "openai:scripted" and body["hub"] == "off"
    refused = await h.client.get("/agent/status", headers=bearer("someone"))
    assert refused.status == 403 and "channels" not in await refused.text()


async def test_a_conversation_s_recent_messages_and_its_open_tasks(
        make_gateway: GatewayFactory) -> None:
    from tests.integration.test_approvals import SAVE

    h = await make_gateway()
    h.model.add(Reply("The answer is 42."), SAVE)
    for text in ("what is the answer?", "save the Q3 report"):
        body = await (await h.client.post("/agent/run", json={
            "text": text, "conversation_id": "hist"})).json()
    assert body["status"] == "awaiting_approval"
    await (await h.client.post("/agent/run", json={"text": "elsewhere",
                                                    "conversation_id": "other"})).json()
    response = await h.client.get("/agent/conversations/api:local:hist/messages")
    assert response.status == 200
    history = await response.json()
    assert [(m["role"], m["text"]) for m in history["messages"]] == [
        ("user", "what is the answer?"), ("assistant", "The answer is 42."),
        ("user", "save the Q3 report")]
    [pending] = history["open_tasks"]
    assert pending["status"] == "awaiting_approval" and pending["task_id"] == body["task_id"]
    assert pending["approval"]["tool_name"] == "save_daily_report"
    # The last N tasks only, still oldest first.
    last = await (await h.client.get("/agent/conversations/api:local:hist/messages?limit=1")).json()
    assert [m["text"] for m in last["messages"]] == ["save the Q3 report"]
    for bad_query, says in [("limit=0", "limit"), ("limit=201", "limit"), ("limit=x", "limit")]:
        refused = await h.client.get(f"/agent/conversations/api:local:hist/messages?{bad_query}")
        assert refused.status == 400 and says in (await refused.json())["error"]
    refused = await h.client.get("/agent/conversations/%20bad/messages")
    assert refused.status == 400
    empty = await (await h.client.get("/agent/conversations/api:local:never/messages")).json()
    assert empty == {"conversation_id": "api:local:never", "messages": [], "open_tasks": []}


async def test_recent_messages_follow_the_api_s_auth_rules(make_gateway: GatewayFactory
                                                          ) -> None:
    h = await make_gateway(hermes_api_keys=["key-one-abcdefgh"])
    url = f"/agent/conversations/api:{ApiKey.bare('key-one-abcdefgh').user}:x/messages"
    assert (await h.client.get(url)).status == 401
    ok = await h.client.get(url, headers={"Authorization": "Bearer key-one-abcdefgh"})
    assert ok.status == 200


async def test_one_info_line_per_inbound_message_and_per_finished_task(
        make_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture) -> None:
    h = await make_gateway()
    h.model.add(Reply("the private answer"))
    caplog.set_level("INFO")
    body = await (await h.client.post("/agent/run", json={
        "text": "my private question", "conversation_id": "logged"})).json()
    await h.wait_for(lambda: any(r.getMessage().startswith(f"task {body['task_id']}")
                                 for r in caplog.records))
    await (await h.client.post("/agent/run", json={"text": "/status",
                                                    "conversation_id": "logged"})).json()
    lines = [r.getMessage() for r in caplog.records if r.levelname == "INFO"
             and r.name in ("gateway.router", "gateway.worker")]
    assert ("inbound channel=api conversation=api:local:logged queued "
            f"task={body['task_id']}") in lines
    assert "inbound channel=api conversation=api:local:logged command (status)" in lines
    [finished] = [line for line in lines if line.startswith(f"task {body['task_id']}")]
    assert re.fullmatch(rf"task {body['task_id']} answered channel=api "
                        r"conversation=api:local:logged seconds=\d+\.\d\d", finished), finished
    assert not any("private" in r.getMessage() for r in caplog.records)


def test_loopback_callers_are_told_apart_from_the_rest() -> None:
    from gateway.guard import is_loopback

    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.8.9.10"):
        assert is_loopback(host), host
    for host in ("10.0.0.1", "192.168.1.2", "::2", "example.com", "127.0.0.1.evil", "", None):
        assert not is_loopback(host), host

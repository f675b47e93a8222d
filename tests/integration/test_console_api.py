"""What the operator's console reads and does, through the HTTP API of a real gateway: the
overview and the last hour after real runs, a task's events with its model calls and its
delivery, the conversation search, the live event stream, approvals listed, dead letters
listed / redelivered / discarded, schedule actions audited with who did them, and every
console route refused to a key that is not an admin's."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from adapters.webhook import signed_headers
from agent_core.models.replay import Failure, Reply
from tests.integration.conftest import (
    WEBHOOK_SECRET,
    GatewayFactory,
    Harness,
    api_key,
    bearer,
)

SAVE = Reply.call("save_daily_report", {"content": "Q3 revenue: 1.2M"})
SALES = Reply.call("query_sales_data", {"start_date": "2026-11-16", "end_date": "2026-11-22"})
#: Every console route an admin reads or acts on (method, path).
ADMIN_ONLY = [("GET", "/agent/console/overview"), ("GET", "/agent/console/series"),
              ("GET", "/agent/console/usage"), ("GET", "/agent/console/conversations"),
              ("GET", "/agent/console/conversations/api:ann:one"),
              ("GET", "/agent/console/tasks/nope"), ("GET", "/agent/console/events"),
              ("GET", "/agent/dead-letters"), ("POST", "/agent/dead-letters/x/redeliver"),
              ("DELETE", "/agent/dead-letters/x"), ("GET", "/agent/hub/agents"),
              ("GET", "/agent/hub/messages?correlation_id=c")]


async def until(check: Any, timeout: float = 15.0) -> Any:
    """Until the awaitable ``check()`` returns something true; that."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def get(h: Harness, path: str, status: int = 200, **kw: Any) -> Any:
    response = await h.client.get(path, **kw)
    assert response.status == status, await response.text()
    return await response.json()


async def run(h: Harness, text: str, cid: str) -> dict[str, Any]:
    response = await h.client.post("/agent/run", json={"text": text, "conversation_id": cid})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_the_overview_series_and_usage_count_real_runs(make_gateway: GatewayFactory
                                                             ) -> None:
    h = await make_gateway()
    h.model.add(Reply("fine"), Failure(500))
    answered = await run(h, "how are we doing?", "one")
    failed = await run(h, "and now?", "two")
    assert (answered["status"], failed["status"]) == ("answered", "failed")

    async def counted() -> Any:
        now = await get(h, "/agent/console/overview")
        return now if now["tasks"]["failed_last_hour"] == 1 and \
            now["tasks"]["answered_last_hour"] == 1 else None

    now = await until(counted)
    assert now["by_channel"]["api"]["answered_last_hour"] == 1
    assert now["error_rate_last_hour"] == 0.5
    assert now["model"]["calls_last_hour"] == 2 and now["model"]["errors_last_hour"] == 1
    assert now["model"]["mean_seconds_last_hour"] > 0
    assert {t["task_id"] for t in now["recent_tasks"]} >= {answered["task_id"],
                                                           failed["task_id"]}
    assert now["hub"] == "off" and now["queue"]["oldest"] is None
    series = await get(h, "/agent/console/series?minutes=5")
    assert len(series["times"]) == 5 and sum(series["answered"]) == 1
    assert sum(series["failed"]) == 1 and sum(series["model_calls"]) == 2
    usage = await until(lambda: _used(h))
    assert [u["name"] for u in usage["user"]] == ["api:local"]
    assert [m["name"] for m in usage["model"]] == ["openai:scripted"]
    assert usage["channel"][0]["name"] == "api" and usage["channel"][0]["tokens"] > 0
    # This process reports its figures (written every few seconds: written now).
    await h.gateway.parts.console.activity.beat()
    now = await get(h, "/agent/console/overview")
    assert len(now["processes"]) == 1 and now["processes"][0]["active"] == 0


async def _used(h: Harness) -> Any:
    usage = await get(h, "/agent/console/usage")
    return usage if usage["user"] else None


async def test_a_task_shows_its_model_calls_tools_and_delivery_in_order(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_trace_url="https://traces.example/trace/{trace_id}")
    h.model.add(SALES, Reply("North sold 12."))
    body = json.dumps({"conversation_id": "ticket-9", "user_id": "agent-9", "text": "north?",
                       "callback_url": callback_server["url"]}).encode()
    accepted = await (await h.client.post("/webhook/crm", data=body,
                                          headers=signed_headers(WEBHOOK_SECRET, body))).json()
    task_id = accepted["task_id"]

    async def delivered() -> Any:
        data = await get(h, f"/agent/console/tasks/{task_id}")
        return data if any(e["type"] == "REPLY_DELIVERED" for e in data["events"]) else None

    data = await until(delivered)
    types = [e["type"] for e in data["events"]]
    assert types.index("MODEL_CALLED") < types.index("TOOL_STARTED") < \
        types.index("TOOL_FINISHED") < types.index("AGENT_FINISHED") < \
        types.index("REPLY_DELIVERED")
    assert types.count("MODEL_CALLED") == 2
    called = next(e for e in data["events"] if e["type"] == "MODEL_CALLED")["payload"]
    assert called["ok"] is True and called["model"] == "openai:scripted" and \
        called["seconds"] > 0
    assert data["task"]["status"] == "answered" and data["task"]["user_id"] == "webhook:crm:agent-9"
    assert data["trace_url"] == f"https://traces.example/trace/{data['trace_id']}"
    # The console's indexes are written a moment after (gathered, then sent together).
    found = await _search(h, "agent-9")
    assert [c["conversation_id"] for c in found["conversations"]] == ["webhook:crm:ticket-9"]
    assert found["conversations"][0]["users"] == ["webhook:crm:agent-9"]
    by_channel = await _search(h, "webhook")
    assert "webhook:crm:ticket-9" in [c["conversation_id"] for c in by_channel["conversations"]]
    one = await get(h, "/agent/console/conversations/webhook:crm:ticket-9")
    assert [t["task_id"] for t in one["tasks"]] == [task_id] and one["files"] == []


async def _search(h: Harness, q: str) -> Any:
    async def found() -> Any:
        data = await get(h, f"/agent/console/conversations?q={q}")
        return data if data["conversations"] else None

    return await until(found)


async def test_the_event_stream_tells_a_task_as_it_runs(make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply("done"))
    async with h.client.get("/agent/console/events") as stream:
        assert stream.status == 200
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        started = await h.client.post("/agent/run-async", json={"text": "go",
                                                                "conversation_id": "live"})
        task_id = (await started.json())["task_id"]
        statuses: list[str] = []
        async with asyncio.timeout(20):
            async for line in stream.content:
                if line.startswith(b"data: "):
                    item = json.loads(line[6:])
                    if item.get("task_id") == task_id:
                        statuses.append(item["status"])
                        if item["status"] == "answered":
                            break
    assert statuses[0] == "queued" and "running" in statuses and statuses[-1] == "answered"


async def test_approvals_are_listed_pending_then_decided_with_who(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("root", "admin"), api_key("ann"),
                                            api_key("bob")])
    h.model.add(SAVE, Reply("Saved."))
    paused = await h.client.post("/agent/run", json={"text": "save it", "conversation_id": "q"},
                                 headers=bearer("ann"))
    approval_id = (await paused.json())["approval"]["id"]
    pending = await get(h, "/agent/approvals?status=pending", headers=bearer("root"))
    assert [a["id"] for a in pending["approvals"]] == [approval_id]
    assert pending["approvals"][0]["arguments"] == {"content": "Q3 revenue: 1.2M"}
    assert pending["approvals"][0]["requester"] == "api:ann"
    # The asker sees their own; another user sees none of it.
    assert len((await get(h, "/agent/approvals", headers=bearer("ann")))["approvals"]) == 1
    assert (await get(h, "/agent/approvals", headers=bearer("bob")))["approvals"] == []
    decided = await h.client.post(f"/agent/approvals/{approval_id}", json={"approved": True},
                                  headers=bearer("root"))
    assert decided.status == 200, await decided.text()
    listed = await get(h, "/agent/approvals?status=decided", headers=bearer("root"))
    assert listed["approvals"][0]["status"] == "approved"
    assert listed["approvals"][0]["decided_by"] == "api:root"
    assert (await get(h, "/agent/approvals?status=pending", headers=bearer("root")))[
        "approvals"] == []
    assert (await h.client.get("/agent/approvals?status=maybe",
                               headers=bearer("root"))).status == 400
    # The tokens of the run resumed by root's decision are still ann's, all of them.
    await h.wait_task((await paused.json())["task_id"], "answered", headers=bearer("root"))

    async def both_calls() -> Any:
        usage = await get(h, "/agent/console/usage", headers=bearer("root"))
        calls = await get(h, "/agent/console/series?minutes=2", headers=bearer("root"))
        return usage if sum(calls["model_calls"]) == 2 and usage["user"] else None

    usage = await until(both_calls)
    assert [u["name"] for u in usage["user"]] == ["api:ann"]
    assert usage["user"][0]["tokens"] == usage["channel"][0]["tokens"] > 0


async def test_dead_letters_are_listed_redelivered_and_discarded_with_who(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("root", "admin")])
    h.gateway.parts.deliverer.max_seconds = 0.3
    h.model.add(Reply("first answer"), Reply("second answer"))
    callback_server["fail_next"] = 1000
    for ticket in ("t-1", "t-2"):
        body = json.dumps({"conversation_id": ticket, "user_id": "u", "text": "hi",
                           "callback_url": callback_server["url"]}).encode()
        assert (await h.client.post("/webhook/crm", data=body, headers=signed_headers(
            WEBHOOK_SECRET, body))).status == 202
    admin = bearer("root")

    async def both() -> Any:
        listed = await get(h, "/agent/dead-letters", headers=admin)
        return listed if listed["count"] == 2 else None

    listed = await until(both)
    newest, oldest = listed["dead_letters"]
    assert "HTTP 503" in newest["reason"] and newest["channel"] == "webhook"
    assert {newest["conversation_id"], oldest["conversation_id"]} == {"webhook:crm:t-1",
                                                                       "webhook:crm:t-2"}
    callback_server["fail_next"] = 0
    sent = await h.client.post(f"/agent/dead-letters/{oldest['id']}/redeliver", headers=admin)
    assert (await sent.json()) == {"id": oldest["id"], "delivered": True, "reason": None}
    assert callback_server["received"][-1][2]["text"] == oldest["text"]
    again = await h.client.post(f"/agent/dead-letters/{oldest['id']}/redeliver", headers=admin)
    assert again.status == 404, "redelivered once, not twice"
    gone = await h.client.delete(f"/agent/dead-letters/{newest['id']}", headers=admin)
    assert gone.status == 200
    assert (await get(h, "/agent/dead-letters", headers=admin))["count"] == 0
    audit = await get(h, "/agent/audit?tool=&limit=10", headers=admin)
    actions = [(e["action"], e["outcome"], e["actor"], e["principal"])
               for e in audit["entries"] if e["type"] == "dead_letter"]
    assert actions == [("discard", "discarded", "api:root", "root"),
                       ("redeliver", "sent", "api:root", "root")]
    failing = await get(h, "/agent/audit?outcome=discarded", headers=admin)
    assert [e["action"] for e in failing["entries"]] == ["discard"]


async def test_a_redelivery_that_fails_again_is_a_dead_letter_again(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    h.gateway.parts.deliverer.max_seconds = 0.2
    h.model.add(Reply("an answer"))
    callback_server["fail_next"] = 1000
    body = json.dumps({"conversation_id": "t-3", "user_id": "u", "text": "hi",
                       "callback_url": callback_server["url"]}).encode()
    await h.client.post("/webhook/crm", data=body, headers=signed_headers(WEBHOOK_SECRET, body))
    letter = (await until(lambda: _first_letter(h)))
    answer = await (await h.client.post(f"/agent/dead-letters/{letter['id']}/redeliver")).json()
    assert answer["delivered"] is False and "HTTP 503" in answer["reason"]
    listed = await get(h, "/agent/dead-letters")
    assert listed["count"] == 1 and listed["dead_letters"][0]["id"] != letter["id"]


async def _first_letter(h: Harness) -> Any:
    listed = await get(h, "/agent/dead-letters")
    return listed["dead_letters"][0] if listed["count"] else None


async def test_schedule_actions_are_audited_with_who_did_them(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("root", "admin")])
    admin = bearer("root")
    job = {"id": "daily", "prompt": "report", "trigger": {"cron": "0 9 * * *"},
           "target": {"channel": "api"}}
    assert (await h.client.post("/agent/schedules", json=job, headers=admin)).status == 201
    for action in ("pause", "resume"):
        response = await h.client.post(f"/agent/schedules/daily/{action}", headers=admin)
        assert response.status == 200
    h.model.add(Reply("the report"))
    ran = await (await h.client.post("/agent/schedules/daily/run", headers=admin)).json()
    await h.wait_task(ran["task_id"], "answered", headers=admin)
    jobs = await get(h, "/agent/schedules", headers=admin)
    assert jobs["jobs"][0]["last_outcome"] == "answered"
    assert (await h.client.delete("/agent/schedules/daily", headers=admin)).status == 200
    audit = await get(h, "/agent/audit?actor=root", headers=admin)
    done = [(e["action"], e["principal"]) for e in reversed(audit["entries"])
            if e["type"] == "schedule"]
    assert done == [("create", "root"), ("pause", "root"), ("resume", "root"),
                    ("run", "root"), ("delete", "root")]


@pytest.mark.parametrize(("method", "path"), ADMIN_ONLY)
async def test_a_key_that_is_not_an_admin_s_is_refused_every_console_route(
        make_gateway: GatewayFactory, method: str, path: str) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("root", "admin"), api_key("ann")])
    response = await h.client.request(method, path, headers=bearer("ann"))
    assert response.status == 403, (path, response.status)
    assert "not an admin" in (await response.json())["error"]


async def test_a_non_admin_cannot_read_another_s_task_events_through_the_console(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("root", "admin"), api_key("ann"),
                                            api_key("bob")])
    h.model.add(Reply("ann's secret answer"))
    done = await (await h.client.post("/agent/run", json={"text": "mine"},
                                      headers=bearer("ann"))).json()
    for who in ("ann", "bob"):  # not even the task's own user: the console is admins'
        response = await h.client.get(f"/agent/console/tasks/{done['task_id']}",
                                      headers=bearer(who))
        assert response.status == 403
    response = await h.client.get(f"/agent/console/tasks/{done['task_id']}",
                                  headers=bearer("root"))
    assert (await response.json())["task"]["text"] == "ann's secret answer"

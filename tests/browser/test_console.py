"""The operator's console in headless Chromium against a real gateway: every page loads
without a console error and shows what a real run left (tasks, an approval, a schedule, a
dead letter, a hub workflow run), each action works through the page (approve resumes the
task, redeliver sends the dead letter, pause stops a schedule), updates arrive over SSE, a
key that is not an admin's is refused and the page says so, and every page fits 390 px.

With CONSOLE_DOCS=1 the tests also write the screenshots of docs/console.md
(docs/console/*.png, downscaled)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.async_api import expect

from adapters.webhook import signed_headers
from agent_core.models.replay import Failure, Reply
from tests.integration.conftest import (
    WEBHOOK_SECRET,
    GatewayFactory,
    Harness,
    api_key,
    bearer,
)
from tests.integration.test_workflows_gateway import (  # noqa: F401 - the checker fixture
    Checker,
    checker,
    live,
)

from .conftest import Console

#: A browser, a gateway and several round trips per test: room for a loaded machine.
pytestmark = pytest.mark.timeout(180)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
SAVE = Reply.call("save_daily_report", {"content": "Q3 revenue: 1.2M"})
SALES = Reply.call("query_sales_data", {"start_date": "2026-11-16", "end_date": "2026-11-22"})
ROOT_KEY, ANN_KEY = api_key("root", "admin"), api_key("ann")


async def shoot(c: Console, name: str) -> None:
    """With CONSOLE_DOCS=1: the page as docs/console/<name>.png, downscaled and reduced to
    a palette (small enough to keep in the repository)."""
    if not os.environ.get("CONSOLE_DOCS"):
        return
    await c.page.evaluate("document.getElementById('toast').hidden = true")
    image = Image.open(io.BytesIO(await c.page.screenshot(full_page=True))).convert("RGB")
    image.thumbnail((900, 1400))
    DOCS.mkdir(parents=True, exist_ok=True)
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
        DOCS / f"{name}.png", optimize=True)


async def until(check: Any, timeout: float = 20.0) -> Any:
    """Until the awaitable ``check()`` returns something true; that."""
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)
    return found


async def api(h: Harness, method: str, path: str, **kw: Any) -> Any:
    response = await h.client.request(method, path, **kw)
    assert response.status < 300, (path, response.status, await response.text())
    return await response.json()


async def run(h: Harness, text: str, cid: str) -> dict[str, Any]:
    return dict(await api(h, "POST", "/agent/run", json={"text": text, "conversation_id": cid}))


async def indexed(h: Harness, *task_ids: str) -> None:
    """Until the console's records (written a moment after) know the tasks."""
    async def known() -> bool:
        now = await api(h, "GET", "/agent/console/overview")
        return set(task_ids) <= {t["task_id"] for t in now["recent_tasks"]}

    await until(known)


async def test_the_overview_shows_a_real_run_its_charts_and_live_updates(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply("All good."), Failure(500), Reply("Fine."), SALES, Reply("12 sold."))
    answered = await run(h, "how are we doing?", "weekly")
    failed = await run(h, "and the forecast?", "forecast")
    await run(h, "anything else?", "weekly")
    await indexed(h, answered["task_id"], failed["task_id"])
    c: Console = await console(harness=h)
    page = c.page
    await expect(page.locator("[data-kpi=failed] .v")).to_have_text("1")
    await expect(page.locator("[data-kpi=error_rate] .v")).to_have_text("33%")
    await expect(page.get_by_role("link", name=answered["task_id"][:10])).to_be_visible()
    await expect(page.locator("[data-chart][data-drawn=true]")).to_have_count(4)
    await expect(page.locator("#live")).to_have_class("live on")
    # Live: a task started elsewhere shows up without a reload.
    started = await api(h, "POST", "/agent/run-async", json={"text": "north sales?",
                                                             "conversation_id": "north"})
    await expect(page.get_by_role("link", name=started["task_id"][:10]).first).to_be_visible()
    await expect(page.locator("#feed li").first).to_be_visible()
    await h.wait_task(started["task_id"], "answered")
    await shoot(c, "overview")
    assert c.errors == []
    assert all(u.startswith(str(h.client.make_url("/"))) for u in c.requests), c.requests


async def test_a_conversation_is_found_and_its_task_drawn_as_a_timeline(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_trace_url="https://traces.example/trace/{trace_id}")
    h.model.add(SALES, Reply("North sold **12** units."))
    done = await run(h, "how did north sell last week?", "north-1")
    await indexed(h, done["task_id"])
    c: Console = await console(harness=h)
    await c.open("conversations?q=north")
    await c.page.get_by_role("link", name="api:local:north-1").click()
    await c.page.locator("html[data-page=conversation][data-ready=true]").wait_for(
        state="attached")
    await expect(c.page.locator(".bubble.user")).to_have_text(["how did north sell last week?"])
    await expect(c.page.locator(".bubble.bot")).to_contain_text("North sold **12** units.")
    await shoot(c, "conversation")
    await c.page.get_by_role("link", name="timeline →").click()
    await c.page.locator("html[data-page=task][data-ready=true]").wait_for(state="attached")
    timeline = c.page.locator("[data-drawing=timeline]")
    await expect(timeline.locator("[data-lane=model]")).to_have_count(2)
    await expect(timeline.locator("[data-lane=tools]")).to_have_count(1)
    await expect(timeline.locator("[data-lane=tools] title")).to_contain_text("query_sales_data")
    trace = c.page.get_by_role("link", name="open the trace")
    assert await trace.get_attribute("href") == \
        f"https://traces.example/trace/{done['task_id']}"
    await shoot(c, "task")
    assert c.errors == []


HOSTILE = 'Q3 revenue: 1.2M <img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'


async def test_approving_from_the_console_resumes_the_task(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    # What the model wrote (here: markup meant to run in the operator's browser) is shown
    # as text, never made into elements.
    h.model.add(Reply.call("save_daily_report", {"content": HOSTILE}),
                Reply("Saved the Q3 report."))
    paused = await api(h, "POST", "/agent/run-async", json={"text": "save the Q3 report",
                                                            "conversation_id": "reports"})
    await h.wait_task(paused["task_id"], "awaiting_approval")
    c: Console = await console(harness=h)
    await expect(c.page.locator("[data-kpi=approvals] .v")).to_have_text("1")
    await c.open("approvals")
    card = c.page.locator(".card.approval")
    await expect(card).to_contain_text("save_daily_report")
    await expect(card.locator("pre")).to_contain_text("<script>window.pwned=2</script>")
    assert await card.locator("img, script").count() == 0
    assert await c.page.evaluate("window.pwned") is None
    await card.get_by_label("note").fill("checked the figures")
    await shoot(c, "approvals")
    await card.get_by_role("button", name="Approve").click()
    view = await h.wait_task(paused["task_id"], "answered")
    assert view["text"] == "Saved the Q3 report."
    decided = c.page.locator("tr", has_text="save_daily_report")
    await expect(decided.locator(".chip.approved")).to_be_visible()
    await expect(c.page.locator(".card.approval")).to_have_count(0)
    entries = (await api(h, "GET", "/agent/audit"))["entries"]
    approval = next(e for e in entries if e["type"] == "approval")
    assert (approval["decision"], approval["decided_by"], approval["note"]) == (
        "approved", "api:local", "checked the figures")
    assert c.errors == []


async def test_a_schedule_is_paused_resumed_run_and_deleted_from_the_console(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    await api(h, "POST", "/agent/schedules", json={
        "id": "daily-sales", "name": "Daily sales", "prompt": "sales report",
        "trigger": {"cron": "0 9 * * *"}, "target": {"channel": "api"}})
    c: Console = await console(harness=h)
    await c.open("schedules")
    row = c.page.locator("tr", has=c.page.locator("[data-job=daily-sales]"))
    await shoot(c, "schedules")
    await row.get_by_role("button", name="Pause").click()
    await expect(row.locator(".chip.paused")).to_be_visible()
    assert (await api(h, "GET", "/agent/schedules/daily-sales"))["paused"] is True
    await row.get_by_role("button", name="Resume").click()
    await expect(row.get_by_role("button", name="Pause")).to_be_visible()
    assert (await api(h, "GET", "/agent/schedules/daily-sales"))["paused"] is False
    h.model.add(Reply("Sales were fine."))
    await row.get_by_role("button", name="Run now").click()
    await expect(row.locator(".chip.answered")).to_be_visible()
    delete = row.get_by_role("button", name="Delete")
    await delete.click()
    await row.get_by_role("button", name="Sure? Delete").click()
    await expect(c.page.locator("[data-job=daily-sales]")).to_have_count(0)
    audit = (await api(h, "GET", "/agent/audit?actor=local"))["entries"]
    assert [e["action"] for e in reversed(audit) if e["type"] == "schedule"] == [
        "create", "pause", "resume", "run", "delete"]
    assert c.errors == []


async def dead_letter(h: Harness, callback: dict[str, Any], text: str) -> None:
    h.gateway.parts.deliverer.max_seconds = 0.3
    callback["fail_next"] = 10_000
    h.model.add(Reply(text))
    body = json.dumps({"conversation_id": "ticket-7", "user_id": "crm-user", "text": "status?",
                       "callback_url": callback["url"]}).encode()
    await api(h, "POST", "/webhook/crm", data=body, headers=signed_headers(WEBHOOK_SECRET, body))

    async def dead() -> bool:
        return bool((await api(h, "GET", "/agent/dead-letters"))["count"])

    await until(dead)


async def test_a_dead_letter_is_redelivered_from_the_console(
        console: Any, make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    await dead_letter(h, callback_server, "Order 42 ships today.")
    c: Console = await console(harness=h)
    await expect(c.page.locator("[data-kpi=dead_letters] .v")).to_have_text("1")
    await c.open("dead-letters")
    row = c.page.locator("tr", has_text="webhook:crm:ticket-7")
    await expect(row).to_contain_text("HTTP 503")
    await shoot(c, "dead-letters")
    callback_server["fail_next"] = 0
    await row.get_by_role("button", name="Redeliver").click()
    await expect(c.page.locator("#toast")).to_have_text("Delivered.")
    await expect(c.page.get_by_text("Every reply was delivered.")).to_be_visible()
    assert callback_server["received"][-1][2]["text"] == "Order 42 ships today."
    assert c.errors == []


async def test_the_audit_log_is_filtered_by_actor_and_outcome(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    await api(h, "POST", "/agent/schedules", json={
        "id": "weekly", "prompt": "weekly report", "trigger": {"cron": "0 9 * * 1"},
        "target": {"channel": "api"}})
    await api(h, "POST", "/agent/schedules/weekly/pause")
    c: Console = await console(harness=h)
    await c.open("audit")
    rows = c.page.locator("tbody tr")
    await expect(rows).to_have_count(2)
    await c.page.get_by_label("outcome").select_option("done")
    await c.page.get_by_label("actor").fill("local")
    await c.page.get_by_role("button", name="Filter").click()
    await c.page.wait_for_url("**/console#/audit?actor=local&outcome=done")
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_contain_text("schedule pause weekly")
    await c.page.get_by_label("actor").fill("someone-else")
    await c.page.get_by_role("button", name="Filter").click()
    await expect(c.page.get_by_text("No entry matches.")).to_be_visible()
    await c.open("audit?actor=local")
    await shoot(c, "audit")
    assert c.errors == []


async def test_usage_shows_tokens_by_user_channel_and_model_without_budgets(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply("one"), Reply("two"))
    await run(h, "first", "u1")
    await run(h, "second", "u2")

    async def used() -> bool:
        return bool((await api(h, "GET", "/agent/console/usage"))["user"])

    await until(used)
    c: Console = await console(harness=h)
    await c.open("usage")
    await expect(c.page.locator("section", has_text="Tokens by user")).to_contain_text(
        "api:local")
    await expect(c.page.locator("section", has_text="Tokens by model")).to_contain_text(
        "openai:scripted")
    await expect(c.page.locator("#no-budgets")).to_contain_text("No budget is configured")
    await shoot(c, "usage")
    assert c.errors == []


async def test_usage_shows_each_budget_against_its_limit(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_budgets=[
        {"scope": "global", "window": "day", "tokens": 100_000},
        {"scope": "user", "window": "day", "tokens": 50_000}])
    h.model.add(Reply("one"))
    await run(h, "first", "u1")
    c: Console = await console(harness=h)
    await c.open("usage")
    budgets = c.page.locator("section", has_text="Budgets")
    await expect(budgets).to_contain_text("/ 100,000 tokens")
    await expect(budgets).to_contain_text("user api:local")
    assert c.errors == []


async def test_the_hub_page_draws_a_workflow_run_and_its_messages(
        console: Any, make_gateway: GatewayFactory, hub_env: dict[str, Any],
        checker: Checker) -> None:  # noqa: F811
    h = await make_gateway(hermes_hub=True, **hub_env)
    await live(h, checker.agent_id, "workflow-executor")
    workflow_id = f"claims-{uuid.uuid4().hex[:6]}"
    await api(h, "POST", "/agent/workflows", json={"workflow_id": workflow_id, "steps": [
        {"id": "check", "agent": checker.agent_id, "intent": "check_claim",
         "input": {"claim": "$.input.text"}},
        {"id": "recheck", "agent": checker.agent_id, "intent": "check_claim",
         "input": {"claim": "$.check.result.answer"}}]})
    started = await api(h, "POST", f"/agent/workflows/{workflow_id}/runs",
                        json={"input": {"text": "C-7"}})
    run_id = started["run_id"]

    async def finished() -> bool:
        response = await h.client.get(f"/agent/workflow-runs/{run_id}")
        return response.status == 200 and (await response.json())["status"] == "success"

    await until(finished)
    c: Console = await console(harness=h)
    await c.open("hub")
    await expect(c.page.locator("tr", has_text=checker.agent_id)).to_contain_text("check_claim")
    await shoot(c, "hub")
    await c.page.get_by_role("link", name=run_id).click()
    await c.page.locator("html[data-page=run][data-ready=true]").wait_for(state="attached")
    graph = c.page.locator("[data-drawing=graph]")
    await expect(graph.locator("[data-step=check][data-status=success]")).to_have_count(1)
    await expect(graph.locator("[data-step=recheck][data-status=success]")).to_have_count(1)
    await expect(graph.locator("path[marker-end]")).to_have_count(1)
    await shoot(c, "run")
    await c.page.get_by_role("link", name="its messages →").click()
    await c.page.locator("html[data-page=messages][data-ready=true]").wait_for(
        state="attached")
    hops = c.page.locator("[data-drawing=sequence] .hop")
    await expect(hops.first).to_be_visible()
    assert await hops.count() >= 4  # the run asked, two steps asked and answered, answered
    await expect(c.page.locator("[data-drawing=sequence]")).to_contain_text(checker.agent_id)
    await shoot(c, "messages")
    assert c.errors == []


async def test_a_key_that_is_not_an_admin_s_gets_403_and_the_page_says_so(
        console: Any, make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[ROOT_KEY, ANN_KEY])
    refused = await h.client.get("/agent/console/overview", headers=bearer("ann"))
    assert refused.status == 403
    c: Console = await console(harness=h, ready="signin")
    await c.page.get_by_label("Admin API key").fill(ANN_KEY["key"])
    await c.page.get_by_role("button", name="Sign in").click()
    forbidden = c.page.locator("#forbidden")
    await expect(forbidden).to_contain_text("not an admin")
    await expect(forbidden).to_contain_text('"ann"')
    await shoot(c, "forbidden")
    await c.page.get_by_role("button", name="Use another key").click()
    await c.page.get_by_label("Admin API key").fill(ROOT_KEY["key"])
    await c.page.get_by_role("button", name="Sign in").click()
    await c.page.locator("html[data-page=overview][data-ready=true]").wait_for(state="attached")
    await expect(c.page.locator("#who")).to_have_text("root · admin")
    # Browsers keep the key for the tab only; the web chat's key is not the console's.
    assert await c.page.evaluate("sessionStorage.getItem('hermes.console.key')") == \
        ROOT_KEY["key"]
    assert await c.page.evaluate("localStorage.length") == 0


PAGES = ["overview", "conversations", "approvals", "schedules", "dead-letters", "audit",
         "usage", "hub"]


async def test_every_page_fits_a_390_pixel_screen(
        console: Any, make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    h.model.add(SALES, Reply("North sold 12 units, well ahead of last week's figures."),
                SAVE)
    done = await run(h, "how did north sell last week compared with the week before?",
                     "north-1")
    paused = await api(h, "POST", "/agent/run-async", json={"text": "save the report",
                                                            "conversation_id": "reports"})
    await h.wait_task(paused["task_id"], "awaiting_approval")
    await api(h, "POST", "/agent/schedules", json={
        "id": "a-rather-long-schedule-name", "prompt": "sales", "target": {"channel": "api"},
        "trigger": {"cron": "0 9 * * *"}})
    await dead_letter(h, callback_server, "A reply that could not be delivered.")
    await indexed(h, done["task_id"])
    c: Console = await console(harness=h, width=390, height=844)
    shown = [*PAGES, f"task/{done['task_id']}", "conversation/api:local:north-1"]
    for name in shown:
        await c.open(name)
        width = await c.page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{name} scrolls sideways ({width}px)"
    await c.open("approvals")
    for button in ("Approve", "Reject"):
        await expect(c.page.get_by_role("button", name=button)).to_be_in_viewport()
    await c.open("overview")
    await shoot(c, "narrow")
    assert c.errors == []

"""The scheduler: fire times across DST, exactly once across replicas, downtime, and
scheduled reports landing in Slack and Telegram."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent_core.models.replay import Failure, Reply
from agent_core.store import connect
from gateway.queue import WorkItem, WorkQueue
from gateway.scheduler import Job, Scheduler
from gateway.settings import GatewaySettings
from tests.integration.conftest import GatewayFactory, Harness, api_key, bearer
from tests.integration.test_slack import answers, event_body, mention, send
from tests.integration.test_telegram import GROUP, sent

BERLIN = ZoneInfo("Europe/Berlin")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, when: dt.datetime) -> None:
        self.now = when.timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, when: dt.datetime) -> None:
        self.now = when.timestamp()


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


@pytest.fixture
async def sched_env(redis_url: str) -> Any:
    """A scheduler factory on a fresh key prefix (several instances share it)."""
    prefix = f"sch{uuid.uuid4().hex[:10]}"
    redis = connect(redis_url)
    settings = GatewaySettings(_env_file=None, redis_prefix=prefix)  # type: ignore[call-arg]
    queue = WorkQueue(redis, prefix)

    def make(clock: Clock, **overrides: Any) -> Scheduler:
        return Scheduler(redis, queue, settings.model_copy(update=overrides), clock=clock)

    async def queued() -> list[WorkItem]:
        items = []
        async for key in redis.scan_iter(match=f"{prefix}:q:*:items"):
            items += [WorkItem.model_validate_json(r) for r in await redis.lrange(key, 0, -1)]
        return sorted(items, key=lambda i: i.schedule["fire_time"] if i.schedule else 0)

    yield make, queued
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
    if keys:
        await redis.unlink(*keys)
    await redis.aclose()


def daily_report(**kw: Any) -> Job:
    return Job.model_validate({
        "id": kw.pop("id", "sales-daily"), "name": "daily sales", "prompt": "post the sales",
        "trigger": kw.pop("trigger", {"cron": "0 9 * * *", "timezone": "Europe/Berlin"}),
        "target": {"channel": "slack", "address": {"channel": "CSALES"}},
        "run_as": "slack:UOWNER", **kw})


async def test_a_cron_job_fires_at_local_times_across_a_dst_change(sched_env: Any) -> None:
    make, queued = sched_env
    clock = Clock(utc(2026, 3, 27, 12))
    scheduler = make(clock)
    await scheduler.save(daily_report())
    fired = []
    # Walk a minute at a time around each expected fire time, over the change to CEST.
    for day, hour_utc in ((28, 8), (29, 7), (30, 7)):
        for minute in (-2, -1, 0, 1, 2):
            clock.set(utc(2026, 3, day, hour_utc) + dt.timedelta(minutes=minute))
            fired += await scheduler.tick()
    items = await queued()
    assert len(fired) == len(items) == 3
    times = [dt.datetime.fromtimestamp(i.schedule["fire_time"], dt.UTC) for i in items]
    assert times == [utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]
    assert {t.astimezone(BERLIN).strftime("%H:%M") for t in times} == {"09:00"}
    assert [t.astimezone(BERLIN).utcoffset() for t in times] == [
        dt.timedelta(hours=1), dt.timedelta(hours=2), dt.timedelta(hours=2)]


async def test_the_missing_hour_fires_once(sched_env: Any) -> None:
    make, queued = sched_env
    clock = Clock(utc(2026, 3, 28, 12))
    scheduler = make(clock)
    await scheduler.save(daily_report(trigger={"cron": "30 2 * * *",
                                               "timezone": "Europe/Berlin"}))
    for minute in range(0, 24 * 60, 10):  # the whole day of the change, 10 minutes a step
        clock.set(utc(2026, 3, 28, 22) + dt.timedelta(minutes=minute))
        await scheduler.tick()
    assert len(await queued()) == 1, "02:30 does not exist that night; it runs once"


async def test_three_replicas_run_each_fire_time_once(sched_env: Any) -> None:
    make, queued = sched_env
    clock = Clock(utc(2026, 6, 1, 0))
    replicas = [make(clock) for _ in range(3)]
    await replicas[0].save(daily_report(trigger={"every": 60}))
    for step in range(1, 11):
        clock.set(utc(2026, 6, 1, 0) + dt.timedelta(seconds=60 * step))
        await asyncio.gather(*(r.tick() for r in replicas), *(r.tick() for r in replicas))
    items = await queued()
    fire_times = [i.schedule["fire_time"] for i in items]
    assert len(fire_times) == 10 and len(set(fire_times)) == 10


async def test_after_downtime_a_job_runs_once_not_once_per_missed_slot(sched_env: Any
                                                                       ) -> None:
    make, queued = sched_env
    clock = Clock(utc(2026, 6, 1, 8, 30))
    await make(clock).save(daily_report(trigger={"cron": "0 * * * *"}))
    # The gateway is down from 08:30 to 13:20: five hourly runs were missed.
    clock.set(utc(2026, 6, 1, 13, 20))
    restarted = make(clock)
    await restarted.tick()
    await restarted.tick()
    [item] = await queued()
    assert item.schedule["fire_time"] == utc(2026, 6, 1, 13).timestamp()
    job = await restarted.get("sales-daily")
    assert job is not None and job.next_run_at == utc(2026, 6, 1, 14).timestamp()


async def test_a_run_missed_by_more_than_the_grace_is_skipped(sched_env: Any) -> None:
    make, queued = sched_env
    clock = Clock(utc(2026, 6, 1, 8))
    await make(clock).save(daily_report())  # daily at 09:00 Berlin = 07:00 UTC
    clock.set(utc(2026, 6, 2, 10))  # back 3 hours after the 07:00 run: over the 1 h grace
    restarted = make(clock, hermes_schedule_grace=3600)
    assert await restarted.tick() == []
    assert await queued() == []
    job = await restarted.get("sales-daily")
    assert job is not None and job.next_run_at == utc(2026, 6, 3, 7).timestamp()


async def test_paused_jobs_do_not_fire(sched_env: Any) -> None:
    make, _ = sched_env
    clock = Clock(utc(2026, 6, 1, 0))
    scheduler = make(clock)
    await scheduler.save(daily_report(trigger={"every": 60}))
    await scheduler.set_paused("sales-daily", True)
    clock.set(utc(2026, 6, 1, 1))
    assert await scheduler.tick() == []
    await scheduler.set_paused("sales-daily", False)
    clock.set(utc(2026, 6, 1, 1, 1, 30))
    assert len(await scheduler.tick()) == 1


@pytest.mark.parametrize("trigger", [{"cron": "61 * * * *"}, {"cron": "0 9 * * MON",
                                                              "every": 5},
                                     {}, {"every": -1}, {"cron": "0 9 * * *",
                                                         "timezone": "Mars/Olympus"}])
def test_bad_triggers_are_refused(trigger: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        daily_report(trigger=trigger)


# --- scheduled reports through a running gateway -------------------------------------------


def top_level_posts(h: Harness, channel: str) -> list[dict[str, Any]]:
    assert h.slack is not None
    return [c for c in h.slack.of("chat.postMessage")
            if c["channel"] == channel and not c.get("thread_ts")]


async def create(h: Harness, job: dict[str, Any]) -> dict[str, Any]:
    response = await h.client.post("/agent/schedules", json=job)
    assert response.status == 201, await response.text()
    data: dict[str, Any] = await response.json()
    return data


async def test_a_scheduled_report_lands_in_the_slack_channel_and_telegram_group(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, telegram=True)
    h.model.add(Reply.call("calc_growth_rate", {"current": 120, "previous": 100}),
                Reply("Weekly sales are up 20%."), Reply("Telegram: sales up 20%."))
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat()
    await create(h, {"id": "weekly", "name": "weekly sales", "prompt": "Report weekly sales",
                     "trigger": {"at": at}, "run_as": "slack:UOWNER",
                     "target": {"channel": "slack", "address": {"channel": "CSALES"}}})
    await h.wait_for(lambda: bool(top_level_posts(h, "CSALES")), timeout=15)
    assert top_level_posts(h, "CSALES")[-1]["text"] == "Weekly sales are up 20%."
    job = await (await h.client.get("/agent/schedules/weekly")).json()
    assert job["next_run_at"] is None and job["last_run"]["task_id"]
    task = await h.wait_task(job["last_run"]["task_id"], "answered")
    assert task["report"]["tools"]["calc_growth_rate"]["calls"] == 1

    await create(h, {"id": "tg", "prompt": "Report to the group", "trigger": {"every": 3600},
                     "run_as": "telegram:42",
                     "target": {"channel": "telegram",
                                "address": {"chat_id": GROUP["id"], "private": False}}})
    ran = await h.client.post("/agent/schedules/tg/run")
    assert ran.status == 202
    await h.wait_for(lambda: any(m["text"] == "Telegram: sales up 20%." for m in sent(h)))
    assert next(m for m in sent(h) if "Telegram" in m["text"])["chat_id"] == GROUP["id"]


async def test_a_failing_run_posts_a_notice_to_the_target_and_the_owner(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    assert h.slack is not None
    h.model.add(Failure(401))
    await create(h, {"id": "broken", "name": "broken report", "prompt": "Report",
                     "trigger": {"every": 3600}, "run_as": "slack:UOWNER",
                     "target": {"channel": "slack", "address": {"channel": "CSALES"}}})
    await h.client.post("/agent/schedules/broken/run")
    await h.wait_for(lambda: bool(top_level_posts(h, "CSALES"))
                     and bool(top_level_posts(h, "DUOWNER")))
    for notice in (top_level_posts(h, "CSALES")[0], top_level_posts(h, "DUOWNER")[0]):
        assert "'broken report'" in notice["text"] and "did not complete" in notice["text"]
        assert "API key" in notice["text"]
    assert h.slack.of("conversations.open")[0]["users"] == "UOWNER"


async def test_unattended_writes_need_a_pre_approval(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    h.model.add(Reply.call("save_daily_report", {"content": "automatic numbers"}),
                Reply("I could not save the report."),
                Reply.call("save_daily_report", {"content": "automatic numbers"}),
                Reply("Saved the report."))
    job = {"prompt": "save today's report", "trigger": {"every": 3600},
           "run_as": "slack:UOWNER",
           "target": {"channel": "slack", "address": {"channel": "CSALES"}}}
    await create(h, {**job, "id": "plain"})
    await create(h, {**job, "id": "trusted", "preapproved_tools": ["save_daily_report"]})
    await h.client.post("/agent/schedules/plain/run")
    await h.wait_for(lambda: any("could not save" in p["text"]
                                 for p in top_level_posts(h, "CSALES")))
    refusal = next(m for m in h.model.requests[1][1]["messages"] if m["role"] == "tool")
    assert "unattended" in refusal["content"]
    reports = Path(h.settings.hermes_data_dir) / "reports"
    assert not reports.exists()
    await h.client.post("/agent/schedules/trusted/run")
    await h.wait_for(lambda: any(p["text"] == "Saved the report."
                                 for p in top_level_posts(h, "CSALES")))
    assert "automatic numbers" in next(reports.glob("*.md")).read_text()
    assert not any(b["type"] == "actions" for c in h.slack.of("chat.postMessage")  # type: ignore[union-attr]
                   for b in c.get("blocks") or []), "no approval was asked for"


async def test_creating_a_schedule_from_chat_needs_the_permission(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, hermes_roles={"admin": ["slack:UADMIN", "api:*"]})
    await send(h, event_body(mention('/schedule "0 9 * * MON" post last week\'s sales',
                                     user="U1")))
    await h.wait_for(lambda: any("permission" in a["text"] for a in answers(h)))
    assert (await (await h.client.get("/agent/schedules")).json())["jobs"] == []

    await send(h, event_body(mention('/schedule "0 9 * * MON" post last week\'s sales',
                                     user="UADMIN")))
    await h.wait_for(lambda: any(a["text"].startswith("Scheduled ") for a in answers(h)))
    [job] = (await (await h.client.get("/agent/schedules")).json())["jobs"]
    assert job["trigger"]["cron"] == "0 9 * * MON" and job["run_as"] == "slack:UADMIN"
    assert job["target"] == {"channel": "slack", "address": {"channel": "C9"}}
    await send(h, event_body(mention("/schedules", user="U1")))
    await h.wait_for(lambda: any(job["id"] in a["text"] and "cron 0 9 * * MON" in a["text"]
                                 for a in answers(h)))
    await send(h, event_body(mention(f"/unschedule {job['id']}", user="U1")))
    await h.wait_for(lambda: any("Only the schedule's owner" in a["text"] for a in answers(h)))
    await send(h, event_body(mention(f"/unschedule {job['id']}", user="UADMIN")))
    await h.wait_for(lambda: any(a["text"] == f"Removed schedule {job['id']}."
                                 for a in answers(h)))
    await send(h, event_body(mention("/schedule sometime maybe", user="UADMIN")))
    await h.wait_for(lambda: any(a["text"].startswith("Usage:") for a in answers(h)))


async def test_the_agent_schedules_a_report_when_asked_in_words(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("boss", "admin"),
                                            api_key("planner", "planner"), api_key("someone")],
                           hermes_role_permissions={"planner": ["read", "schedule"],
                                                    "admin": ["*"], "user": ["read"]})
    h.model.add(Reply.call("schedule_report", {"prompt": "post last week's sales",
                                               "cron": "0 9 * * MON",
                                               "timezone": "Europe/Berlin",
                                               "name": "monday sales"}),
                Reply("Done: every Monday at 09:00."),
                Reply.call("schedule_report", {"prompt": "x", "every_minutes": 5}),
                Reply("You are not allowed to schedule."))
    planner = await (await h.client.post("/agent/run", headers=bearer("planner"), json={
        "text": "every Monday at 9 post last week's sales here"})).json()
    assert planner["status"] == "awaiting_approval", "a non-admin's write waits for approval"
    await h.client.post(f"/agent/approvals/{planner['approval']['id']}",
                        json={"approved": True}, headers=bearer("boss"))
    done = await h.wait_task(planner["task_id"], "answered", headers=bearer("planner"))
    assert done["text"] == "Done: every Monday at 09:00."
    [job] = (await (await h.client.get("/agent/schedules",
                                       headers=bearer("boss"))).json())["jobs"]
    assert job["name"] == "monday sales" and job["trigger"]["timezone"] == "Europe/Berlin"
    assert job["target"]["channel"] == "api" and job["run_as"] == "api:planner"
    assert job["role"] == "planner", "the job runs in its creator's proven role"
    user = await (await h.client.post("/agent/run", json={"text": "schedule x"},
                                      headers=bearer("someone"))).json()
    assert user["text"] == "You are not allowed to schedule."
    refusal = next(m for m in h.model.requests[-1][1]["messages"] if m["role"] == "tool")
    assert json.loads(refusal["content"])["error"] == "permission"


async def test_schedules_load_from_a_file_at_start(make_gateway: GatewayFactory,
                                                  tmp_path: Path) -> None:
    config = tmp_path / "schedules.yaml"
    config.write_text("""
jobs:
  - id: monday-sales
    name: Monday sales
    prompt: Compare this week's sales with last week's and post the conclusion
    trigger: {cron: "0 9 * * MON", timezone: Europe/Berlin}
    target: {channel: slack, address: {channel: CSALES}}
    run_as: slack:UOWNER
    preapproved_tools: [save_daily_report]
""")
    h = await make_gateway(hermes_schedules_file=config)
    [job] = (await (await h.client.get("/agent/schedules")).json())["jobs"]
    assert job["id"] == "monday-sales" and job["preapproved_tools"] == ["save_daily_report"]
    next_run = dt.datetime.fromtimestamp(job["next_run_at"], BERLIN)
    assert next_run.weekday() == 0 and next_run.strftime("%H:%M") == "09:00"


@pytest.mark.parametrize(("method", "path", "body", "status"), [
    ("post", "/agent/schedules", {"prompt": "x", "trigger": {"cron": "bad"},
                                  "target": {"channel": "slack"}}, 400),
    ("post", "/agent/schedules", {"prompt": "x", "trigger": {"every": 60},
                                  "target": {"channel": "irc"}}, 400),
    ("post", "/agent/schedules", {"prompt": "", "trigger": {"every": 60},
                                  "target": {"channel": "api"}}, 400),
    ("post", "/agent/schedules", ["not", "an", "object"], 400),
    ("get", "/agent/schedules/none", None, 404),
    ("delete", "/agent/schedules/none", None, 404),
    ("post", "/agent/schedules/none/run", None, 404),
    ("post", "/agent/schedules/none/explode", None, 404),
])
async def test_schedule_api_refuses_bad_requests(make_gateway: GatewayFactory, method: str,
                                                 path: str, body: Any, status: int) -> None:
    h = await make_gateway()
    kwargs = {"json": body} if body is not None else {}
    response = await getattr(h.client, method)(path, **kwargs)
    assert response.status == status
    assert (await response.json())["error"]


async def test_duplicate_ids_conflict_and_pause_resume_work(make_gateway: GatewayFactory
                                                            ) -> None:
    h = await make_gateway()
    job = {"id": "dup", "prompt": "x", "trigger": {"every": 60},
           "target": {"channel": "api"}}
    await create(h, job)
    assert (await h.client.post("/agent/schedules", json=job)).status == 409
    paused = await (await h.client.post("/agent/schedules/dup/pause")).json()
    assert paused["paused"] is True and paused["next_run_at"] is None
    resumed = await (await h.client.post("/agent/schedules/dup/resume")).json()
    assert resumed["paused"] is False and resumed["next_run_at"] is not None
    assert (await h.client.delete("/agent/schedules/dup")).status == 200


async def test_sales_scenario_live_run(make_gateway: GatewayFactory) -> None:
    """The design's scenario through the gateway with a model: query both weeks, compute the
    growth, write the report (an admin, whose writes this deployment lets run without
    asking), answer with the conclusion."""
    h = await make_gateway(hermes_approval_skip_roles=["admin"])
    h.model.add(
        Reply(tool_calls=[
            {"name": "query_sales_data", "arguments": {"start_date": "2026-11-23",
                                                       "end_date": "2026-11-29"}},
            {"name": "query_sales_data", "arguments": {"start_date": "2026-11-16",
                                                       "end_date": "2026-11-22"}}]),
        Reply.call("calc_growth_rate", {"current": 48311.74, "previous": 41331.27}),
        Reply.call("save_daily_report", {"content": "Sales +16.89% week on week."}),
        Reply("This week's sales grew 16.89% over last week."))
    body = await (await h.client.post("/agent/run", json={
        "text": "Compare this week's sales with last week's, compute the growth rate, write "
                "it to the daily report and tell me the conclusion"})).json()
    assert body["status"] == "answered" and "16.89%" in body["text"]
    observations = [m["content"] for m in h.model.requests[1][1]["messages"]
                    if m["role"] == "tool"]
    assert '"total": 48311.74' in observations[0] and '"total": 41331.27' in observations[1]
    growth = next(m["content"] for m in h.model.requests[2][1]["messages"]
                  if m["role"] == "tool" and "growth_rate_percent" in m["content"])
    assert '"growth_rate_percent": 16.89' in growth
    reports = Path(h.settings.hermes_data_dir) / "reports"
    assert "Sales +16.89%" in next(reports.glob("*.md")).read_text()

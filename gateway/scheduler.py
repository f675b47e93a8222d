"""Scheduled reports: an agent prompt run on a timetable, its answer posted to a group.

APScheduler's triggers compute the fire times (cron, interval, one-off date; timezone
aware). Jobs live in Redis (``Keys.schedules``: the jobs, and each job's next fire
time), so they survive restarts and every replica knows them. Every replica polls for due
jobs; a run is claimed per (job, fire time) with ``SET NX`` and a TTL that is
never released, so two or more gateways never post the same report twice.

After downtime: fire times missed while the gateway was down are coalesced into one run,
made only if the latest missed time is within the job's misfire grace (default one hour,
``HERMES_SCHEDULE_GRACE``); then the schedule continues from now.

A run is an ordinary task, queued in the job's own conversation (``schedule:<id>``) and
answered into the job's target. It runs unattended as the job's identity: tools that need
approval are refused unless the job pre-approves them. A failed run posts a short notice to
the target and to the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from redis.asyncio import Redis

from adapters.base import InboundMessage
from agent_core.ids import new_id
from agent_core.store import Keys, as_text, store_boundary

from .openapi import MAX_EVERY
from .queue import WorkItem, WorkQueue
from .settings import GatewaySettings

log = logging.getLogger(__name__)

Clock = Callable[[], float]
_CLAIM_TTL = 7 * 86400

# Move a job's next run forward unless another replica already did.
# KEYS: due   ARGV: job id, the fire time seen, the next one ('' for none)
_ADVANCE = """
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '-1') ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
"""


class Trigger(BaseModel):
    """When a job runs: exactly one of cron, every (seconds) or at (one-off)."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(None, description='crontab, e.g. "0 9 * * MON"')
    # strict: a JSON true is not a number of seconds (lax mode read it as 1.0).
    # At most ten years: a huge interval overflowed the scheduler's date arithmetic (a 500
    # schemathesis found).
    every: float | None = Field(None, gt=0, le=MAX_EVERY, strict=True,
                                description="seconds between runs")
    at: dt.datetime | None = Field(None, description="a one-off run (ISO 8601)")
    timezone: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Trigger:
        if sum(x is not None for x in (self.cron, self.every, self.at)) != 1:
            raise ValueError("give exactly one of cron, every or at")
        if self.cron is not None:
            try:
                CronTrigger.from_crontab(self.cron)
            except ValueError as exc:
                raise ValueError(f"cron {self.cron!r}: {exc}") from None
        return self

    @field_validator("at", mode="before")
    @classmethod
    def _iso(cls, value: Any) -> Any:
        # Lax mode read a number as seconds since 1970: the documented form is ISO 8601.
        if value is not None and not isinstance(value, str | dt.datetime):
            raise ValueError("at must be an ISO 8601 date-time, e.g. 2026-12-24T09:00:00Z")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown timezone {value!r}") from None
        return value

    def build(self, default_zone: str, created_at: float) -> BaseTrigger:
        """The APScheduler trigger."""
        zone = ZoneInfo(self.timezone or default_zone)
        if self.cron is not None:
            return CronTrigger.from_crontab(self.cron, timezone=zone)
        if self.every is not None:
            start = dt.datetime.fromtimestamp(created_at, zone)
            return IntervalTrigger(seconds=self.every, start_date=start, timezone=zone)
        assert self.at is not None
        at = self.at if self.at.tzinfo else self.at.replace(tzinfo=zone)
        return DateTrigger(run_date=at, timezone=zone)


class Target(BaseModel):
    """Where a job's answer is posted."""

    model_config = ConfigDict(extra="forbid")

    channel: Literal["slack", "telegram", "webhook", "api", "webchat"]
    #: The channel's reply target: {"channel": "C9"} for Slack, {"chat_id": -100123,
    #: "message_thread_id": 7} for Telegram, {"source": "crm", "callback_url": ...} for
    #: webhooks.
    address: dict[str, Any] = Field(default_factory=dict)


class Job(BaseModel):
    """A scheduled agent task."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: new_id(12),
                    pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    name: str = Field("scheduled report", max_length=200)
    prompt: str = Field(min_length=1, max_length=20_000)
    trigger: Trigger
    target: Target
    #: The identity the task runs as (its role follows from HERMES_ROLES, unless ``role``).
    run_as: str = Field(min_length=3, max_length=200)
    #: The role a credential proved for ``run_as`` (an API key's, set by the API from the
    #: caller's key); None: HERMES_ROLES decides.
    role: str | None = None
    #: Who gets failure notices (defaults to run_as).
    owner: str = ""
    preapproved_tools: list[str] = Field(default_factory=list)
    paused: bool = Field(False, strict=True)
    misfire_grace: float | None = Field(None, ge=0, strict=True)
    created_at: float = Field(default_factory=time.time)
    next_run_at: float | None = None
    last_run: dict[str, Any] | None = None

    @property
    def conversation_id(self) -> str:
        """The job's own conversation (its runs share memory)."""
        return f"schedule:{self.id}"


@store_boundary
class Scheduler:
    """Stores jobs and fires them; run one in every replica."""

    def __init__(self, redis: Redis, queue: WorkQueue, settings: GatewaySettings, *,
                 clock: Clock = time.time) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings
        self.keys = Keys.of(redis, settings.redis_prefix).schedules
        self.clock = clock
        self._advance_script = redis.register_script(_ADVANCE)
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    # --- managing jobs -------------------------------------------------------------------
    async def create(self, *, prompt: str, trigger: dict[str, Any], channel: str,
                     reply_target: dict[str, Any], run_as: str, name: str = "scheduled report",
                     room_id: str = "", preapproved_tools: list[str] | None = None,
                     role: str | None = None) -> Job:
        """A new job posting where a message came from (its channel, not its thread).

        Raises ValueError (pydantic's ValidationError) naming what is wrong.
        """
        job = Job.model_validate({
            "name": name, "prompt": prompt, "trigger": trigger, "run_as": run_as,
            "owner": run_as, "role": role, "preapproved_tools": preapproved_tools or [],
            "target": {"channel": channel, "address": place_of(channel, reply_target,
                                                                room_id)}})
        return await self.save(job)

    async def save(self, job: Job) -> Job:
        """Create or replace a job and schedule its next run from now."""
        job.owner = job.owner or job.run_as
        # Interval jobs count from their creation, which cannot lie ahead of this clock.
        job.created_at = min(job.created_at, self.clock())
        job.next_run_at = None if job.paused else self._next(job, None, self.clock())
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.jobs(), job.id, job.model_dump_json())
        if job.next_run_at is None:
            pipe.zrem(self.keys.due(), job.id)
        else:
            pipe.zadd(self.keys.due(), {job.id: job.next_run_at})
        await pipe.execute()
        return job

    async def get(self, job_id: str) -> Job | None:
        """One job, or None (its next run is read from the due set, the source of truth)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self.keys.jobs(), job_id)
        pipe.zscore(self.keys.due(), job_id)
        raw, due = await pipe.execute()
        if not raw:
            return None
        job = Job.model_validate_json(raw)
        job.next_run_at = float(due) if due is not None else None
        return job

    async def jobs(self, *, target: dict[str, Any] | None = None) -> list[Job]:
        """Every job (or those posting to one target), by next run."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hvals(self.keys.jobs())
        pipe.zrange(self.keys.due(), 0, -1, withscores=True)
        raw, due = await pipe.execute()
        next_runs = {as_text(k): float(v) for k, v in due}
        jobs = [Job.model_validate_json(r) for r in raw]
        for job in jobs:
            job.next_run_at = next_runs.get(job.id)
        if target is not None:
            jobs = [j for j in jobs if _same_place(j.target.address, target)]
        return sorted(jobs, key=lambda j: j.next_run_at or float("inf"))

    async def delete(self, job_id: str) -> bool:
        """Remove a job; False if there was none."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.keys.jobs(), job_id)
        pipe.zrem(self.keys.due(), job_id)
        removed, _ = await pipe.execute()
        return bool(removed)

    async def set_paused(self, job_id: str, paused: bool) -> Job | None:
        """Pause or resume a job (resuming schedules from now)."""
        job = await self.get(job_id)
        if job is None:
            return None
        job.paused = paused
        return await self.save(job)

    async def run_now(self, job_id: str) -> str | None:
        """Run a job at once, outside its timetable; the task id, or None."""
        job = await self.get(job_id)
        if job is None:
            return None
        return await self._fire(job, self.clock(), manual=True)

    async def load_file(self, jobs: list[dict[str, Any]]) -> int:
        """Upsert the jobs of the schedules file (ids make this idempotent)."""
        count = 0
        for raw in jobs:
            job = Job.model_validate(raw)
            existing = await self.get(job.id)
            if existing is not None and existing.model_dump(
                    exclude={"created_at", "next_run_at", "last_run"}) == job.model_dump(
                    exclude={"created_at", "next_run_at", "last_run"}):
                continue
            await self.save(job)
            count += 1
        return count

    # --- firing --------------------------------------------------------------------------
    def start(self, every: float = 1.0) -> None:
        """Poll for due jobs in the background."""
        self._task = asyncio.create_task(self._loop(every), name="hermes-scheduler")

    async def stop(self) -> None:
        """Stop polling (a tick in progress finishes first)."""
        self._stop.set()
        if self._task is not None:
            await asyncio.wait([self._task], timeout=10)
            self._task.cancel()

    async def _loop(self, every: float) -> None:
        # A stop flag, not only cancellation: on Python 3.11 a cancel that lands inside a
        # client library's timeout can come out as a TimeoutError and be swallowed.
        while not self._stop.is_set():
            try:
                await self.tick()
            except Exception as exc:
                log.warning("scheduler tick failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), every)

    async def tick(self) -> list[str]:
        """Fire every due job (the ones this replica wins); returns the task ids started."""
        now = self.clock()
        due: Any = await self.redis.zrangebyscore(self.keys.due(), "-inf", now, withscores=True)
        started = []
        for raw_id, fire_time in due:
            job = await self.get(as_text(raw_id))
            if job is None or job.paused:
                continue
            missed_last = self._latest_missed(job, float(fire_time), now)
            grace = job.misfire_grace if job.misfire_grace is not None \
                else self.settings.hermes_schedule_grace
            nxt = self._next(job, missed_last, now)
            await self._advance(job, float(fire_time), nxt)
            if now - missed_last > grace:
                log.warning("job %s missed %s by %.0fs (grace %.0fs); skipped", job.id,
                            _iso(missed_last), now - missed_last, grace)
                continue
            task_id = await self._fire(job, missed_last)
            if task_id is not None:
                started.append(task_id)
        return started

    def _latest_missed(self, job: Job, first_due: float, now: float) -> float:
        """Coalescing: the last fire time at or before ``now`` (one run for a backlog)."""
        trigger = job.trigger.build(self._zone(), job.created_at)
        latest = first_due
        current = dt.datetime.fromtimestamp(first_due, dt.UTC)
        for _ in range(10_000):
            nxt = trigger.get_next_fire_time(current, current)
            if nxt is None or nxt.timestamp() > now or nxt.timestamp() <= latest:
                break
            latest = nxt.timestamp()
            current = nxt
        return latest

    def _next(self, job: Job, previous: float | None, now: float) -> float | None:
        trigger = job.trigger.build(self._zone(), job.created_at)
        prev = dt.datetime.fromtimestamp(previous, dt.UTC) if previous is not None else None
        moment = dt.datetime.fromtimestamp(now, dt.UTC)
        nxt = trigger.get_next_fire_time(prev, moment)
        while nxt is not None and nxt.timestamp() <= now:
            nxt = trigger.get_next_fire_time(nxt, moment + dt.timedelta(microseconds=1))
        return nxt.timestamp() if nxt is not None else None

    async def _advance(self, job: Job, seen: float, nxt: float | None) -> None:
        """Move the job's next run forward (the same result whichever replica does it)."""
        await self._advance_script(keys=[self.keys.due()], args=[
            job.id, repr(seen), "" if nxt is None else repr(nxt)])

    async def _fire(self, job: Job, fire_time: float, *, manual: bool = False) -> str | None:
        """Claim this run (once across replicas) and queue it as a task."""
        if not manual:
            won = await self.redis.set(self.keys.claim(job.id, fire_time), "1", nx=True,
                                       ex=_CLAIM_TTL)
            if not won:
                return None
        task_id = self.queue.new_task_id(job.conversation_id)
        user = job.run_as.partition(":")[2]
        msg = InboundMessage(
            channel=job.target.channel, conversation_id=job.conversation_id,
            user_id=user or job.run_as, user_name=job.name, text=job.prompt,
            is_direct=True, mentions_bot=True, role=job.role,
            platform_message_id=f"{job.id}:{int(fire_time)}",
            reply_target=dict(job.target.address))
        item = WorkItem(kind="scheduled", inbound=msg, task_id=task_id, schedule={
            "job_id": job.id, "name": job.name, "run_as": job.run_as, "owner": job.owner,
            "preapproved_tools": job.preapproved_tools, "fire_time": fire_time})
        await self.queue.ingest(item, dedupe_key=None)
        job.last_run = {"at": fire_time, "task_id": task_id, "manual": manual}
        await self.redis.hset(self.keys.jobs(), job.id, job.model_dump_json())
        log.info("job %s (%s) fired for %s as task %s", job.id, job.name, _iso(fire_time),
                 task_id)
        return task_id

    def _zone(self) -> str:
        return self.settings.hermes_timezone


def place_of(channel: str, reply_target: dict[str, Any], room_id: str = "") -> dict[str, Any]:
    """Where scheduled answers for a chat go: the channel itself, not one thread."""
    match channel:
        case "slack":
            return {"channel": room_id or reply_target.get("channel")}
        case "telegram":
            return {"chat_id": reply_target.get("chat_id"),
                    "message_thread_id": reply_target.get("message_thread_id"),
                    "private": bool(reply_target.get("private"))}
        case "webhook":
            return {"source": reply_target.get("source"),
                    "callback_url": reply_target.get("callback_url")}
        case _:
            return {}


def _same_place(address: dict[str, Any], target: dict[str, Any]) -> bool:
    keys = ("channel", "chat_id", "source")
    return all(address.get(k) == target.get(k) for k in keys if k in address or k in target)



def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")

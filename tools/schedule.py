"""schedule_report: lets the agent set up a scheduled report when someone asks in words
("every Monday at 9 post last week's sales here")."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent_core import ToolContext, ToolError, tool


@tool(side_effect="write", permission="schedule")
async def schedule_report(prompt: str, *, cron: str | None = None,
                          every_minutes: int | None = None, at: dt.datetime | None = None,
                          timezone: str | None = None, name: str = "scheduled report",
                          ctx: ToolContext | None = None) -> dict[str, Any]:
    """Schedule an agent task whose answer is posted to this chat on a timetable.

    Give exactly one of cron, every_minutes or at.

    Args:
        prompt: What to do at each run, written as a request to yourself.
        cron: A crontab expression, e.g. "0 9 * * MON" for Mondays at 09:00.
        every_minutes: Run every N minutes instead.
        at: Run once at this date and time (ISO 8601).
        timezone: IANA timezone of the times, e.g. Europe/Berlin (default: the gateway's).
        name: A short name for listings.
    """
    scheduler = ctx.services.scheduler if ctx is not None else None
    if ctx is None or scheduler is None:
        raise ToolError("scheduling is not available here")
    trigger = {"cron": cron, "every": every_minutes * 60 if every_minutes else None,
               "at": at.isoformat() if at else None, "timezone": timezone}
    try:
        job = await scheduler.create(
            name=name, prompt=prompt, trigger=trigger,
            channel=str(ctx.extra.get("channel", "api")),
            reply_target=dict(ctx.extra.get("reply_target") or {}), run_as=ctx.user_id,
            role=ctx.role)
    except ValueError as exc:
        raise ToolError(f"the schedule is not valid: {exc}") from None
    next_run = dt.datetime.fromtimestamp(job.next_run_at, dt.UTC).isoformat(
        timespec="minutes") if job.next_run_at else None
    return {"id": job.id, "name": job.name, "next_run_utc": next_run}

"""Scheduled jobs: list, create, read, replace, delete, pause, resume, run now (callers
with the 'schedule' permission)."""

from __future__ import annotations

import json

from aiohttp import web
from pydantic import ValidationError

from ..scheduler import Job, Scheduler
from ._http import GATEWAY, bad, identity_of, invalid, json_body


def _scheduler(request: web.Request) -> Scheduler:
    gateway = request.app[GATEWAY]
    caller = identity_of(request)
    if not gateway.roles.allows(caller, "schedule"):
        raise bad(403, f"{caller} lacks the 'schedule' permission")
    return gateway.parts.scheduler


async def _job_body(request: web.Request, job_id: str | None = None) -> Job:
    raw = await json_body(request)
    try:
        data = json.loads(raw or b"null")
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        if job_id is not None and data.setdefault("id", job_id) != job_id:
            raise ValueError(f"the body's id {data['id']!r} is not the path's {job_id!r}")
        data.setdefault("run_as", identity_of(request))
        for computed in ("created_at", "next_run_at", "last_run"):
            data.pop(computed, None)
        return Job.model_validate(data)
    except ValidationError as exc:
        raise bad(400, f"invalid schedule: {invalid(exc)}") from None
    except ValueError as exc:
        raise bad(400, f"invalid schedule: {exc}") from None


async def list_schedules(request: web.Request) -> web.Response:
    """Every scheduled job, by next run."""
    jobs = await _scheduler(request).jobs()
    return web.json_response({"jobs": [j.model_dump(mode="json") for j in jobs]})


async def create_schedule(request: web.Request) -> web.Response:
    """Create a job (409 if its id exists)."""
    scheduler = _scheduler(request)
    job = await _job_body(request)
    if await scheduler.get(job.id) is not None:
        raise bad(409, f"a schedule {job.id!r} exists; PUT replaces it")
    job = await scheduler.save(job)
    return web.json_response(job.model_dump(mode="json"), status=201)


async def get_schedule(request: web.Request) -> web.Response:
    """One job."""
    job = await _scheduler(request).get(request.match_info["job_id"])
    if job is None:
        raise bad(404, "no such schedule")
    return web.json_response(job.model_dump(mode="json"))


async def replace_schedule(request: web.Request) -> web.Response:
    """Create or replace a job under this id."""
    scheduler = _scheduler(request)
    job = await scheduler.save(await _job_body(request, request.match_info["job_id"]))
    return web.json_response(job.model_dump(mode="json"))


async def delete_schedule(request: web.Request) -> web.Response:
    """Remove a job."""
    if not await _scheduler(request).delete(request.match_info["job_id"]):
        raise bad(404, "no such schedule")
    return web.json_response({"deleted": request.match_info["job_id"]})


async def schedule_action(request: web.Request) -> web.Response:
    """pause, resume, or run (now, outside the timetable)."""
    scheduler = _scheduler(request)
    job_id, action = request.match_info["job_id"], request.match_info["action"]
    if action in ("pause", "resume"):
        job = await scheduler.set_paused(job_id, action == "pause")
        if job is None:
            raise bad(404, "no such schedule")
        return web.json_response(job.model_dump(mode="json"))
    if action == "run":
        task_id = await scheduler.run_now(job_id)
        if task_id is None:
            raise bad(404, "no such schedule")
        return web.json_response({"task_id": task_id, "status_url":
                                  f"/agent/tasks/{task_id}"}, status=202)
    raise bad(404, "the action must be pause, resume or run")


def setup(app: web.Application) -> None:
    """Register the schedule routes."""
    app.router.add_get("/agent/schedules", list_schedules)
    app.router.add_post("/agent/schedules", create_schedule)
    app.router.add_get("/agent/schedules/{job_id}", get_schedule)
    app.router.add_put("/agent/schedules/{job_id}", replace_schedule)
    app.router.add_delete("/agent/schedules/{job_id}", delete_schedule)
    app.router.add_post("/agent/schedules/{job_id}/{action}", schedule_action)

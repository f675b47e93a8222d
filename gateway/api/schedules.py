"""Scheduled jobs: list, create, read, replace, delete, pause, resume, run now (callers
with the 'schedule' permission)."""

from __future__ import annotations

import json

from aiohttp import web
from pydantic import ValidationError

from agent_core import TaskState

from ..scheduler import Job, Scheduler
from ._http import GATEWAY, Caller, audited, bad, caller_of, invalid, json_body


def _scheduler(request: web.Request) -> tuple[Scheduler, Caller]:
    gateway = request.app[GATEWAY]
    caller = caller_of(request)
    if not gateway.roles.grants(caller.role, "schedule"):
        raise bad(403, f"{caller.principal.name!r} lacks the 'schedule' permission (its "
                       f"key's role is {caller.role!r})")
    return gateway.parts.scheduler, caller


def _owned(caller: Caller, job: Job | None) -> Job:
    """The job, when the caller may manage it (its own, or any for an admin); 404."""
    if job is None or not (caller.admin or caller.identity in (job.run_as, job.owner)):
        raise bad(404, "no such schedule")
    return job


async def _job_body(request: web.Request, caller: Caller, job_id: str | None = None) -> Job:
    raw = await json_body(request)
    try:
        data = json.loads(raw or b"null")
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        if job_id is not None and data.setdefault("id", job_id) != job_id:
            raise ValueError(f"the body's id {data['id']!r} is not the path's {job_id!r}")
        for computed in ("created_at", "next_run_at", "last_run"):
            data.pop(computed, None)
        if caller.admin:  # an admin may run a job as anyone (HERMES_ROLES gives the role)
            data.setdefault("run_as", caller.identity)
            if data["run_as"] == caller.identity:
                data["role"] = caller.role
        else:  # anyone else: as themselves, in their key's role, answering over the API
            if data.get("run_as", caller.identity) != caller.identity or \
                    data.get("owner", caller.identity) != caller.identity:
                raise ValueError("a schedule runs as its creator; only an admin may name "
                                 "another run_as or owner")
            if (data.get("target") or {}).get("channel") != "api":
                raise ValueError("only an admin may post a schedule's answers into a chat; "
                                 'use {"channel": "api"}')
            data.update(run_as=caller.identity, owner=caller.identity, role=caller.role)
        return Job.model_validate(data)
    except ValidationError as exc:
        raise bad(400, f"invalid schedule: {invalid(exc)}") from None
    except ValueError as exc:
        raise bad(400, f"invalid schedule: {exc}") from None


async def list_schedules(request: web.Request) -> web.Response:
    """Every scheduled job the caller may manage, by next run."""
    scheduler, caller = _scheduler(request)
    jobs = [j for j in await scheduler.jobs()
            if caller.admin or caller.identity in (j.run_as, j.owner)]
    store = request.app[GATEWAY].parts.opened.store
    last = [str((j.last_run or {}).get("task_id") or "") for j in jobs]
    raws = await store.redis.mget([store.keys.task(t) for t in last]) if jobs else []
    views = []
    for job, task_id, raw in zip(jobs, last, raws, strict=True):
        # How its last run went (its task's status; None once the task is forgotten).
        state = TaskState.model_validate_json(raw) if task_id and raw else None
        views.append({**job.model_dump(mode="json"),
                      "last_outcome": state.status if state else None})
    return web.json_response({"jobs": views})


async def create_schedule(request: web.Request) -> web.Response:
    """Create a job (409 if its id exists)."""
    scheduler, caller = _scheduler(request)
    job = await _job_body(request, caller)
    if await scheduler.get(job.id) is not None:
        raise bad(409, f"a schedule {job.id!r} exists; PUT replaces it")
    job = await scheduler.save(job)
    await _audit(request, caller, "create", job.id)
    return web.json_response(job.model_dump(mode="json"), status=201)


async def get_schedule(request: web.Request) -> web.Response:
    """One job."""
    scheduler, caller = _scheduler(request)
    job = _owned(caller, await scheduler.get(request.match_info["job_id"]))
    return web.json_response(job.model_dump(mode="json"))


async def replace_schedule(request: web.Request) -> web.Response:
    """Create or replace a job under this id."""
    scheduler, caller = _scheduler(request)
    job_id = request.match_info["job_id"]
    existing = await scheduler.get(job_id)
    if existing is not None:
        _owned(caller, existing)
    job = await scheduler.save(await _job_body(request, caller, job_id))
    await _audit(request, caller, "replace" if existing is not None else "create", job_id)
    return web.json_response(job.model_dump(mode="json"))


async def delete_schedule(request: web.Request) -> web.Response:
    """Remove a job."""
    scheduler, caller = _scheduler(request)
    job_id = request.match_info["job_id"]
    _owned(caller, await scheduler.get(job_id))
    if not await scheduler.delete(job_id):
        raise bad(404, "no such schedule")
    await _audit(request, caller, "delete", job_id)
    return web.json_response({"deleted": job_id})


async def schedule_action(request: web.Request) -> web.Response:
    """pause, resume, or run (now, outside the timetable)."""
    scheduler, caller = _scheduler(request)
    job_id, action = request.match_info["job_id"], request.match_info["action"]
    if action not in ("pause", "resume", "run"):
        raise bad(404, "the action must be pause, resume or run")
    _owned(caller, await scheduler.get(job_id))
    if action in ("pause", "resume"):
        job = await scheduler.set_paused(job_id, action == "pause")
        if job is None:
            raise bad(404, "no such schedule")
        await _audit(request, caller, action, job_id)
        return web.json_response(job.model_dump(mode="json"))
    task_id = await scheduler.run_now(job_id)
    if task_id is None:
        raise bad(404, "no such schedule")
    await _audit(request, caller, "run", job_id, task_id=task_id)
    return web.json_response({"task_id": task_id, "status_url":
                              f"/agent/tasks/{task_id}"}, status=202)


async def _audit(request: web.Request, caller: Caller, action: str, job_id: str,
                 **more: str) -> None:
    await audited(request, caller, {"type": "schedule", "action": action, "job_id": job_id,
                                    "outcome": "done", **more})


def setup(app: web.Application) -> None:
    """Register the schedule routes."""
    app.router.add_get("/agent/schedules", list_schedules)
    app.router.add_post("/agent/schedules", create_schedule)
    app.router.add_get("/agent/schedules/{job_id}", get_schedule)
    app.router.add_put("/agent/schedules/{job_id}", replace_schedule)
    app.router.add_delete("/agent/schedules/{job_id}", delete_schedule)
    app.router.add_post("/agent/schedules/{job_id}/{action}", schedule_action)

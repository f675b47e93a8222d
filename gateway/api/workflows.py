"""Workflows on the hub (with HERMES_HUB): keep a definition's version, list and read them,
start a run, list, read and cancel runs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from ._http import GATEWAY, bad, caller_of, json_body, number, parse

if TYPE_CHECKING:
    from hub.workflows.store import WorkflowStore

MAX_RUNS = 200


def _store(request: web.Request) -> WorkflowStore:
    """The hub's workflow store, for a caller with the 'workflows' permission."""
    gateway = request.app[GATEWAY]
    caller = caller_of(request)
    if not gateway.roles.grants(caller.role, "workflows"):
        raise bad(403, f"{caller.principal.name!r} lacks the 'workflows' permission (its "
                       f"key's role is {caller.role!r})")
    store = gateway.parts.workflows
    if store is None:
        raise bad(409, "the agent hub is not enabled here (HERMES_HUB=true)")
    return store


async def create_workflow(request: web.Request) -> web.Response:
    """Keep a definition: the next version (or the given one; 409 if that version is kept
    with other steps); 422 naming the step when it is not valid."""
    from hub.discovery import discover
    from hub.workflows import DefinitionError

    store = _store(request)
    raw = await json_body(request)
    try:
        data = json.loads(raw or b"null")
    except ValueError as exc:
        raise bad(400, f"invalid body: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad(400, "invalid body: a workflow is one object {workflow_id, steps, ...}")
    try:
        live = await discover(store.bus, "*")
    except Exception:
        raise web.HTTPServiceUnavailable(
            text=json.dumps({"error": "the hub's discovery does not answer; retry shortly"}),
            content_type="application/json", headers={"Retry-After": "5"}) from None
    known = {c.agent_id for c in live} | {cap for c in live for cap in c.capabilities}
    try:
        workflow = await store.put(data, known=known)
    except DefinitionError as exc:
        status = 409 if "never changes" in exc.reason else 422
        return web.json_response({"error": str(exc), "step": exc.step}, status=status)
    return web.json_response(workflow.model_dump(mode="json", by_alias=True), status=201)


async def list_workflows(request: web.Request) -> web.Response:
    """Every workflow: its versions and its latest definition."""
    store = _store(request)
    versions = await store.versions()
    latest = {w.workflow_id: w for w in await store.latest()}
    return web.json_response({"workflows": [
        {"workflow_id": wid, "versions": kept, "latest": latest[wid].model_dump(
            mode="json", by_alias=True)} for wid, kept in versions.items() if wid in latest]})


async def get_workflow(request: web.Request) -> web.Response:
    """One version of a workflow (the latest unless ?version= says which)."""
    version = number(request, "version", low=1, high=1_000_000, integer=True)
    workflow_id = request.match_info["workflow_id"]
    workflow = await _store(request).get(workflow_id, int(version) if version else None)
    if workflow is None:
        raise bad(404, f"no workflow {workflow_id!r}" + (f" version {int(version)}"
                                                         if version else ""))
    return web.json_response(workflow.model_dump(mode="json", by_alias=True))


class RunBody(BaseModel):
    """Body of POST /agent/workflows/{workflow_id}/runs."""

    model_config = ConfigDict(extra="forbid")

    input: dict[str, Any] = Field(default_factory=dict)
    version: int | None = Field(None, ge=1, le=1_000_000)
    deadline_ms: int = Field(300_000, ge=1000, le=300_000)


async def start_workflow_run(request: web.Request) -> web.Response:
    """Start a run (202: its id; follow it at /agent/workflow-runs/{run_id})."""
    from hub.workflows.client import NoExecutor, start_run

    store = _store(request)
    body = await parse(request, RunBody)
    workflow_id = request.match_info["workflow_id"]
    workflow = await store.get(workflow_id, body.version)
    if workflow is None:
        raise bad(404, f"no workflow {workflow_id!r}" + (f" version {body.version}"
                                                         if body.version else ""))
    try:  # the version read here: the run is on the latest this request saw
        started = await start_run(store.bus, workflow_id, body.input, sender_id="gateway-api",
                                  version=workflow.version, deadline_ms=body.deadline_ms)
    except NoExecutor as exc:
        raise bad(409, str(exc)) from None
    return web.json_response({"run_id": started.run_id, "correlation_id":
                              started.correlation_id, "executor": started.executor,
                              "status_url": f"/agent/workflow-runs/{started.run_id}"},
                             status=202)


async def list_runs(request: web.Request) -> web.Response:
    """Runs, newest first (?workflow_id=, ?limit=)."""
    limit = number(request, "limit", low=1, high=MAX_RUNS, default=50, integer=True)
    runs = await _store(request).list_runs(workflow_id=request.query.get("workflow_id"),
                                           limit=int(limit or 50))
    return web.json_response({"runs": [r.view() for r in runs]})


async def get_run(request: web.Request) -> web.Response:
    """One run: every step's status and the document so far."""
    run = await _store(request).run(request.match_info["run_id"])
    if run is None:
        raise bad(404, "no such run (a run appears once an executor has taken it)")
    return web.json_response(run.view())


async def cancel_run(request: web.Request) -> web.Response:
    """Cancel a running run (202); a finished one is returned as it is (200)."""
    run = await _store(request).cancel(request.match_info["run_id"])
    if run is None:
        raise bad(404, "no such run")
    return web.json_response(run.view(), status=202 if run.status == "running" else 200)


def setup(app: web.Application) -> None:
    """Register the workflow routes."""
    app.router.add_get("/agent/workflows", list_workflows)
    app.router.add_post("/agent/workflows", create_workflow)
    app.router.add_get("/agent/workflows/{workflow_id}", get_workflow)
    app.router.add_post("/agent/workflows/{workflow_id}/runs", start_workflow_run)
    app.router.add_get("/agent/workflow-runs", list_runs)
    app.router.add_get("/agent/workflow-runs/{run_id}", get_run)
    app.router.add_post("/agent/workflow-runs/{run_id}/cancel", cancel_run)

"""The OpenAPI 3.1 description served at /openapi.json."""

from __future__ import annotations

from typing import Any

from agent_core.store.keys import CONVERSATION_ID

from . import openapi_schemas as S
from .openapi_schemas import BASE64, MAX_EVERY

__all__ = ["ATTACHMENT_NAME", "BASE64", "MAX_AUDIT_LIMIT", "MAX_EVERY", "MAX_HISTORY",
           "MAX_UNIX_SECONDS", "spec"]

#: The bounds the audit log's query parameters are held to (gateway/api/audit.py): Unix
#: seconds in the year 5000 (later than anything logged, small enough for a stream id).
MAX_UNIX_SECONDS = 95_617_584_000
MAX_AUDIT_LIMIT = 1000
#: The most tasks GET /agent/conversations/{id}/messages reads back.
MAX_HISTORY = 200

def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


#: The names of attachments (gateway/api/tasks.py checks them).
ATTACHMENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json(S.ERROR, "error with a reason") for c in codes}


def _workflow_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """A workflow definition's JSON Schema (as the hub checks it) and the models it uses,
    for components.schemas."""
    from hub.workflows.definition import Workflow

    schema = Workflow.model_json_schema(by_alias=True,
                                        ref_template="#/components/schemas/{model}")
    return schema, schema.pop("$defs", {})


def _workflow_paths(definition: dict[str, Any]) -> dict[str, Any]:
    workflow_id = {"name": "workflow_id", "in": "path", "required": True,
                   "schema": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,63}$"}}
    run_id = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
    run = {"type": "object", "required": ["run_id", "workflow_id", "version", "status",
                                          "steps"],
           "properties": {"run_id": {"type": "string"}, "workflow_id": {"type": "string"},
                          "version": {"type": "integer"},
                          "status": {"enum": ["running", "success", "failed", "cancelled"]},
                          "steps": {"type": "array", "items": {"type": "object"}},
                          "document": {"type": "object"}}}
    refused = {"type": "object", "required": ["error"], "properties": {
        "error": {"type": "string"}, "step": {"type": ["string", "null"]}}}
    return {
        "/agent/workflows": {
            "get": {"summary": "Workflows on the hub: versions and the latest definition",
                    "responses": {"200": _json({"type": "object"}, "workflows"),
                                  **_errors(401, 403, 409)}},
            "post": {"summary": "Keep a workflow definition (its next version, or the one it "
                                "names); refused naming the step when invalid",
                     "requestBody": {"required": True, "content": {
                         "application/json": {"schema": definition}}},
                     "responses": {"201": _json(definition, "kept"),
                                   "409": _json(refused, "that version is kept with other "
                                                "steps, or the hub is off"),
                                   "422": _json(refused, "invalid: the step and why"),
                                   **_errors(400, 401, 403, 415, 503)}}},
        "/agent/workflows/{workflow_id}": {"get": {
            "summary": "One version of a workflow (the latest by default)",
            "parameters": [workflow_id, {"name": "version", "in": "query", "required": False,
                                         "schema": {"type": "integer", "minimum": 1,
                                                    "maximum": 1_000_000}}],
            "responses": {"200": _json(definition, "the definition"),
                          **_errors(400, 401, 403, 404, 409)}}},
        "/agent/workflows/{workflow_id}/runs": {"post": {
            "summary": "Start a run", "parameters": [workflow_id],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "properties": {
                    "input": {"type": "object"},
                    "version": {"type": ["integer", "null"], "minimum": 1,
                                "maximum": 1_000_000},
                    "deadline_ms": {"type": "integer", "minimum": 1000,
                                    "maximum": 300_000}}}}}},
            "responses": {"202": _json({"type": "object", "required": ["run_id"]}, "started"),
                          **_errors(400, 401, 403, 404, 409, 415)}}},
        "/agent/workflow-runs": {"get": {
            "summary": "Workflow runs, newest first",
            "parameters": [{"name": "workflow_id", "in": "query", "required": False,
                            "schema": {"type": "string"}},
                           {"name": "limit", "in": "query", "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 200}}],
            "responses": {"200": _json({"type": "object"}, "runs"),
                          **_errors(400, 401, 403, 409)}}},
        "/agent/workflow-runs/{run_id}": {"get": {
            "summary": "A run: each step's status and the document", "parameters": [run_id],
            "responses": {"200": _json(run, "the run"), **_errors(401, 403, 404, 409)}}},
        "/agent/workflow-runs/{run_id}/cancel": {"post": {
            "summary": "Cancel a run", "parameters": [run_id],
            "responses": {"200": _json(run, "already finished"),
                          "202": _json(run, "cancelling"), **_errors(401, 403, 404, 409)}}},
    }


def spec() -> dict[str, Any]:
    """The document."""
    definition, models = _workflow_schemas()
    task_id = {"name": "task_id", "in": "path", "required": True, "schema": {"type": "string"}}
    cid = {"name": "conversation_id", "in": "path", "required": True,
           "schema": {"type": "string", "pattern": CONVERSATION_ID.pattern}}
    run_body = {"required": True, "content": {
        "application/json": {"schema": S.RUN},
        "multipart/form-data": {"schema": S.RUN_FORM,
                                "encoding": {"file": {"contentType": "*/*"}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "hermes-gateway", "version": "0.1.0",
                 "description": "Run tool-calling agent tasks and follow them step by step."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                       "schemas": models},
        "security": [{"bearer": []}],
        "paths": {
            "/agent/run": {"post": {
                "summary": "Run a task and wait for its answer", "requestBody": run_body,
                "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                                "schema": {"type": "string"}}],
                "responses": {"200": _json(S.TASK, "finished or paused"),
                              "202": _json(S.TASK, "still running after the timeout"),
                              **_errors(400, 401, 403, 409, 413, 415)}}},
            "/agent/run-async": {"post": {
                "summary": "Queue a task", "requestBody": run_body,
                "responses": {"202": _json({"type": "object"}, "queued"),
                              **_errors(400, 401, 403, 409, 413, 415)}}},
            "/agent/tasks/{task_id}": {"get": {
                "summary": "A task's status, result and report", "parameters": [task_id],
                "responses": {"200": _json(S.TASK, "the task"), **_errors(401, 404)}}},
            "/agent/tasks/{task_id}/events": {"get": {
                "summary": "The task's events as server-sent events (replay, then live)",
                "parameters": [task_id, {"name": "Last-Event-ID", "in": "header",
                                         "required": False, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "text/event-stream",
                                      "content": {"text/event-stream": {}}},
                              **_errors(400, 401, 404)}}},
            "/agent/tasks/{task_id}/attachments/{name}": {"get": {
                "summary": "A file a tool made for the person (e.g. an MCP tool's image); "
                           "raster images and audio inline, anything else as a download",
                "parameters": [task_id, {"name": "name", "in": "path", "required": True,
                                         "schema": {"type": "string",
                                                    "pattern": ATTACHMENT_NAME}}],
                "responses": {"200": {"description": "the file",
                                      "content": {"*/*": {}}},
                              **_errors(400, 401, 404)}}},
            "/agent/tasks/{task_id}/cancel": {"post": {
                "summary": "Stop a running task or drop a queued one", "parameters": [task_id],
                "responses": {"200": _json({"type": "object"}, "cancelled"),
                              "202": _json({"type": "object"}, "stopping"),
                              **_errors(401, 404, 409)}}},
            "/agent/conversations/{conversation_id}/messages": {"get": {
                "summary": "A conversation's recent messages and its open tasks (what a "
                           "chat page shows after a reload)",
                "parameters": [cid, {"name": "limit", "in": "query", "required": False,
                                     "description": "how many of the last tasks (20)",
                                     "schema": {"type": "integer", "minimum": 1,
                                                "maximum": MAX_HISTORY}}],
                "responses": {"200": _json(S.HISTORY, "messages, oldest first"),
                              **_errors(400, 401, 404)}}},
            "/agent/conversations/{conversation_id}": {"delete": {
                "summary": "Forget everything a conversation stored", "parameters": [cid],
                "responses": {"200": _json({"type": "object"}, "deleted"),
                              **_errors(400, 401, 404)}}},
            "/agent/conversations/{conversation_id}/reset": {"post": {
                "summary": "Start a fresh session (the archive stays)", "parameters": [cid],
                "responses": {"200": _json({"type": "object"}, "reset"),
                              **_errors(400, 401, 404)}}},
            "/agent/approvals/{approval_id}": {
                "get": {"summary": "A pending or decided approval",
                        "parameters": [{"name": "approval_id", "in": "path", "required": True,
                                        "schema": {"type": "string"}}],
                        "responses": {"200": _json({"type": "object"}, "the approval"),
                                      **_errors(401, 404)}},
                "post": {"summary": "Approve or reject a paused tool call",
                         "parameters": [{"name": "approval_id", "in": "path",
                                         "required": True, "schema": {"type": "string"}}],
                         "requestBody": {"required": True, "content": {"application/json": {
                             "schema": {"type": "object", "additionalProperties": False,
                                        "required": ["approved"], "properties": {
                                            "approved": {"type": "boolean"},
                                            "note": {"type": "string", "maxLength": 500},
                                            "arguments": {"type": "object", "description":
                                                          "edit-before-approve: checked by "
                                                          "the tool (400 if it would refuse "
                                                          "them); they replace the model's "
                                                          "(kept as proposed_arguments) and "
                                                          "are what runs"},
                                            "user_id": {"type": "string",
                                                        "minLength": 1}}}}}},
                         "responses": {"200": _json({"type": "object"}, "decided"),
                                       **_errors(400, 401, 403, 404, 409, 415)}}},
            "/agent/audit": {"get": {
                "summary": "The audit log, newest first (admins)",
                "parameters": [{"name": n, "in": "query", "required": False, "schema": t}
                               for n, t in (
                    ("conversation_id", {"type": "string"}), ("user", {"type": "string"}),
                    ("tool", {"type": "string"}),
                    ("since", {"type": "number", "minimum": 0, "maximum": MAX_UNIX_SECONDS}),
                    ("until", {"type": "number", "minimum": 0, "maximum": MAX_UNIX_SECONDS}),
                    ("limit", {"type": "integer", "minimum": 1,
                               "maximum": MAX_AUDIT_LIMIT}))],
                "responses": {"200": _json({"type": "object"}, "entries"),
                              **_errors(400, 401, 403)}}},
            "/agent/schedules": {
                "get": {"summary": "Scheduled jobs", "responses": {
                    "200": _json({"type": "object"}, "jobs"), **_errors(401, 403)}},
                "post": {"summary": "Create a scheduled job", "requestBody": {
                    "required": True, "content": {"application/json": {"schema": S.JOB_IN}}},
                    "responses": {"201": _json(S.JOB, "created"),
                                  **_errors(400, 401, 403, 409, 415)}}},
            "/agent/schedules/{job_id}": {
                "get": {"summary": "One job", "parameters": [S.JOB_ID],
                        "responses": {"200": _json(S.JOB, "the job"),
                                      **_errors(401, 403, 404)}},
                "put": {"summary": "Create or replace a job", "parameters": [S.JOB_ID],
                        "requestBody": {"required": True, "content": {
                            "application/json": {"schema": S.JOB_IN}}},
                        "responses": {"200": _json(S.JOB, "saved"),
                                      **_errors(400, 401, 403, 404, 415)}},
                "delete": {"summary": "Remove a job", "parameters": [S.JOB_ID],
                           "responses": {"200": _json({"type": "object"}, "deleted"),
                                         **_errors(401, 403, 404)}}},
            "/agent/schedules/{job_id}/{action}": {"post": {
                "summary": "pause, resume, or run now",
                "parameters": [S.JOB_ID, {"name": "action", "in": "path", "required": True,
                                         "schema": {"enum": ["pause", "resume", "run"]}}],
                "responses": {"200": _json(S.JOB, "paused or resumed"),
                              "202": _json({"type": "object"}, "run queued"),
                              **_errors(401, 403, 404)}}},
            **_workflow_paths(definition),
            "/healthz": {"get": {"summary": "Liveness", "security": [],
                                 "responses": {"200": {"description": "alive: status and "
                                                       "the answering process's pid"}}}},
            "/readyz": {"get": {
                "summary": "Readiness (the store answers); public, so only the status",
                "description": "Answers `{\"status\": \"ready\"}`, or 503 with `stopping` "
                               "or `unavailable`, and nothing else: the parts behind it "
                               "are in GET /agent/status, for admins.",
                "security": [], "responses": {
                    "200": _json(S.READY, "ready"),
                    "503": _json(S.READY, "not ready, or stopping")}}},
            "/agent/status": {"get": {
                "summary": "The gateway's parts (admins): what /readyz does not disclose",
                "description": "The store's location (without credentials), the model, the "
                               "channels, the hub's connection, each MCP server's state, the "
                               "conversations waiting and the tasks running in the answering "
                               "process; 503 with `status` and `reason` when not ready.",
                "responses": {"200": _json(S.STATUS, "ready, and its parts"),
                              "503": _json(S.STATUS, "not ready, or stopping"),
                              **_errors(401, 403)}}},
            "/agent/whoami": {"get": {
                "summary": "The principal the caller's key proves, its role and identity",
                "responses": {"200": _json({"type": "object", "required": ["user", "role"],
                                            "properties": {
                                                "user": {"type": "string"},
                                                "role": {"type": "string"},
                                                "identity": {"type": "string"},
                                                "admin": {"type": "boolean"},
                                                "act_as": {"type": "array", "items": {
                                                    "type": "string"}}}}, "the caller"),
                              **_errors(401, 403)}}},
            "/metrics": {"get": {
                "summary": "Prometheus metrics (text exposition format; same auth as /agent)",
                "responses": {"200": {"description": "the metrics",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}},
                              **_errors(401, 403)}}},
        },
    }

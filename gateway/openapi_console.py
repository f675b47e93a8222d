"""The OpenAPI paths of what the operator's console reads and does (gateway/openapi.py
includes them): the approvals' list, the console's reads and event stream, dead letters,
the hub's agents and messages."""

from __future__ import annotations

from typing import Any

from agent_core.store.keys import CONVERSATION_ID

#: The bounds of their query parameters (the handlers hold them to these).
MAX_APPROVALS = 500
MAX_DEAD_LETTERS = 1000
MAX_SEARCH = 200
MAX_SERIES_MINUTES = 120
MAX_USAGE_DAYS = 8

ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
OBJECT: dict[str, Any] = {"type": "object"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json(ERROR, "error with a reason") for c in codes}


def _query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            **({"description": description} if description else {})}


def _limit(high: int) -> dict[str, Any]:
    return _query("limit", {"type": "integer", "minimum": 1, "maximum": high})


def _get(summary: str, schema: dict[str, Any], *codes: int,
         parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"get": {"summary": summary, **({"parameters": parameters} if parameters else {}),
                    "responses": {"200": _json(schema, summary), **_errors(*codes)}}}


APPROVAL = {"type": "object", "required": ["id", "status", "tool", "arguments"], "properties": {
    "id": {"type": "string"}, "status": {"type": "string"}, "tool": {"type": "string"},
    "task_id": {"type": ["string", "null"]}, "conversation_id": {"type": ["string", "null"]},
    "reason": {"type": ["string", "null"]}, "requester": {"type": ["string", "null"]},
    "created_at": {"type": ["number", "null"]}, "decided_by": {"type": ["string", "null"]},
    "decided_at": {"type": ["number", "null"]}, "arguments": {"type": "object"}}}
OVERVIEW = {"type": "object", "required": ["tasks", "by_channel", "queue", "model"],
            "properties": {"tasks": OBJECT, "by_channel": OBJECT, "queue": OBJECT,
                           "model": OBJECT, "error_rate_last_hour": {"type": ["number", "null"]},
                           "approvals_pending": {"type": "integer"},
                           "dead_letters": {"type": "integer"},
                           "processes": {"type": "array"}, "recent_tasks": {"type": "array"},
                           "hub": {"enum": ["off", "connected", "unreachable"]}}}
LETTER = {"type": "object", "required": ["id"], "properties": {
    "id": {"type": "string"}, "reason": {"type": ["string", "null"]},
    "at": {"type": ["number", "null"]}, "channel": {"type": ["string", "null"]},
    "conversation_id": {"type": ["string", "null"]}, "task_id": {"type": ["string", "null"]},
    "text": {"type": "string"}}}
LETTER_ID = {"name": "letter_id", "in": "path", "required": True, "schema": {"type": "string"}}


def console_paths() -> dict[str, Any]:
    """The paths."""
    return {
        "/agent/approvals": _get(
            "Approvals asked lately, newest first (those the caller may read: an admin's all)",
            {"type": "object", "required": ["approvals"],
             "properties": {"approvals": {"type": "array", "items": APPROVAL}}}, 400, 401, 403,
            parameters=[_query("status", {"enum": ["pending", "decided", "all"]}),
                        _limit(MAX_APPROVALS)]),
        "/agent/console/overview": _get(
            "The system now (admins): open tasks by status and channel, the oldest queued "
            "work, model calls in flight, approvals, dead letters, processes, recent tasks",
            OVERVIEW, 401, 403),
        "/agent/console/series": _get(
            "The last minutes, minute by minute (admins): tasks, errors, model calls and "
            "latency, dead letters, the queue", {"type": "object", "required": ["times"]},
            400, 401, 403, parameters=[_query("minutes", {
                "type": "integer", "minimum": 1, "maximum": MAX_SERIES_MINUTES})]),
        "/agent/console/usage": _get(
            "Tokens of the last days by user, channel and model (admins)",
            {"type": "object", "required": ["user", "channel", "model"]}, 400, 401, 403,
            parameters=[_query("days", {"type": "integer", "minimum": 1,
                                        "maximum": MAX_USAGE_DAYS})]),
        "/agent/console/conversations": _get(
            "Conversations by id, channel or user (admins), most recently active first",
            {"type": "object", "required": ["conversations"]}, 400, 401, 403,
            parameters=[_query("q", {"type": "string", "maxLength": 200}),
                        _limit(MAX_SEARCH)]),
        "/agent/console/conversations/{conversation_id}": _get(
            "One conversation (admins): its tasks and files",
            {"type": "object", "required": ["conversation_id", "tasks", "files"]},
            400, 401, 403, parameters=[{"name": "conversation_id", "in": "path",
                                        "required": True, "schema": {
                                            "type": "string",
                                            "pattern": CONVERSATION_ID.pattern}}]),
        "/agent/console/tasks/{task_id}": _get(
            "One task (admins): its state, its events, its trace id and link",
            {"type": "object", "required": ["task", "events", "trace_id"]}, 401, 403, 404,
            parameters=[{"name": "task_id", "in": "path", "required": True,
                         "schema": {"type": "string"}}]),
        "/agent/console/events": {"get": {
            "summary": "Server-sent events of every replica from now (admins): task, audit, "
                       "dead_letter",
            "parameters": [{"name": "Last-Event-ID", "in": "header", "required": False,
                            "schema": {"type": "string"}}],
            "responses": {"200": {"description": "text/event-stream",
                                  "content": {"text/event-stream": {}}},
                          **_errors(400, 401, 403)}}},
        "/agent/dead-letters": _get(
            "Dead letters, newest first (admins)",
            {"type": "object", "required": ["count", "dead_letters"],
             "properties": {"count": {"type": "integer"},
                            "dead_letters": {"type": "array", "items": LETTER}}},
            400, 401, 403, parameters=[_limit(MAX_DEAD_LETTERS)]),
        "/agent/dead-letters/{letter_id}": {"delete": {
            "summary": "Discard a dead letter (admins; audited)", "parameters": [LETTER_ID],
            "responses": {"200": _json(OBJECT, "discarded"), **_errors(401, 403, 404)}}},
        "/agent/dead-letters/{letter_id}/redeliver": {"post": {
            "summary": "Send a dead letter again (admins; audited); failing again, it is "
                       "dead-lettered again with the new reason",
            "parameters": [LETTER_ID],
            "responses": {"200": _json({"type": "object", "required": ["delivered"],
                                        "properties": {"delivered": {"type": "boolean"},
                                                       "reason": {"type": ["string", "null"]}}},
                                       "sent, or dead again"),
                          **_errors(401, 403, 404)}}},
        "/agent/hub/agents": _get(
            "The hub's live agents (admins): capabilities, load, copies, heartbeat age",
            {"type": "object", "required": ["agents"]}, 401, 403, 409, 503),
        "/agent/hub/messages": _get(
            "Everything that passed through the hub under one correlation id, in order "
            "(admins)", {"type": "object", "required": ["correlation_id", "messages"]},
            400, 401, 403, 409, 503,
            parameters=[{"name": "correlation_id", "in": "query", "required": True,
                         "schema": {"type": "string", "minLength": 1, "maxLength": 200}}]),
    }

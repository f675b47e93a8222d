"""The data schemas of the OpenAPI description (gateway/openapi.py): tasks, history,
readiness, runs, schedules."""

from __future__ import annotations

from typing import Any, cast

from agent_core.task import ALL_STATUSES

#: The longest interval of a schedule, in seconds (gateway/scheduler.py): ten years.
MAX_EVERY = 10 * 366 * 86400
#: A file's data in a JSON body: strict base64.
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

TASK = {
    "type": "object",
    "properties": {
        "task_id": {"type": "string"}, "conversation_id": {"type": "string"},
        "status": {"type": "string", "enum": list(ALL_STATUSES)},
        "text": {"type": ["string", "null"], "description": "what the user was told"},
        "answer": {"type": ["string", "null"]},
        "question": {"type": ["object", "null"]},
        "approval": {"type": ["object", "null"]},
        "error": {"type": ["string", "null"]},
        "report": {"type": ["object", "null"], "description": "TaskReport"},
        "rounds": {"type": "integer"},
        "created_at": {"type": "number"}, "updated_at": {"type": "number"},
        "continued_in": {"type": ["string", "null"]},
        "events_url": {"type": "string"},
    },
    "required": ["task_id", "status", "conversation_id"],
}
HISTORY = {
    "type": "object", "required": ["conversation_id", "messages", "open_tasks"],
    "properties": {
        "conversation_id": {"type": "string"},
        "messages": {"type": "array", "items": {
            "type": "object", "required": ["task_id", "role", "text", "status", "at"],
            "properties": {"task_id": {"type": "string"},
                           "role": {"type": "string", "enum": ["user", "assistant"]},
                           "text": {"type": "string"},
                           "status": {"type": "string", "enum": list(ALL_STATUSES)},
                           "at": {"type": "number"}}}},
        "open_tasks": {"type": "array", "description": "under way or waiting for a person",
                       "items": {"type": "object", "required": ["task_id", "status"],
                                 "properties": {
                                     "task_id": {"type": "string"},
                                     "status": {"type": "string", "enum": list(ALL_STATUSES)},
                                     "text": {"type": ["string", "null"]},
                                     "approval": {"type": ["object", "null"]},
                                     "question": {"type": ["object", "null"]},
                                     "events_url": {"type": "string"}}}},
    },
}
READY = {"type": "object", "required": ["status"], "additionalProperties": False,
          "properties": {"status": {"enum": ["ready", "stopping", "unavailable"]}}}
STATUS = {"type": "object", "required": ["status"], "properties": {
    "status": {"enum": ["ready", "stopping", "unavailable"]},
    "reason": {"type": "string"}, "store": {"type": "string"}, "model": {"type": "string"},
    "channels": {"type": "array", "items": {"type": "string"}},
    "hub": {"enum": ["connected", "unreachable", "off"]},
    "mcp_servers": {"type": "object"}, "conversations_waiting": {"type": "integer"},
    "active_here": {"type": "integer"}}}
ERROR = {"type": "object", "properties": {"error": {"type": "string"}},
          "required": ["error"]}
RUN = {
    "type": "object", "additionalProperties": False, "required": ["text"],
    "properties": {
        "text": {"type": "string", "minLength": 1, "maxLength": 20000},
        "conversation_id": {"type": ["string", "null"],
                            "pattern": "^[A-Za-z0-9][A-Za-z0-9._@+=/-]{0,150}$",
                            "description": "your id for the conversation; memory is kept per id"},
        "user_id": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
        "files": {
            "type": "array", "maxItems": 100,
            "description": "files sent with the message, base64 (at most one file's worth, "
                           "HERMES_MAX_FILE_MB, in a JSON body; more as multipart/form-data); "
                           "more than HERMES_MAX_FILES_PER_MESSAGE or over a limit: 413",
            "items": {"type": "object", "additionalProperties": False,
                      "required": ["name", "data"],
                      "properties": {
                          "name": {"type": "string", "minLength": 1, "maxLength": 255},
                          "content_type": {"type": ["string", "null"], "maxLength": 200},
                          "data": {"type": "string", "contentEncoding": "base64",
                                   "pattern": BASE64}}}},
    },
}
#: A multipart/form-data message: its text (empty when files come with it) and files.
RUN_FORM = {
    "type": "object", "additionalProperties": False,
    "anyOf": [{"required": ["text"], "properties": {"text": {"minLength": 1}}},
              {"required": ["file"], "properties": {"file": {"minItems": 1}}}],
    "properties": {
        "text": {"type": "string", "maxLength": 20000},
        "conversation_id": RUN["properties"]["conversation_id"],  # type: ignore[index]
        "user_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "file": {"type": "array", "items": {"type": "string", "format": "binary"},
                 "description": "the files (each a file field named file)"},
    },
}


def trigger(kind: str, schema: dict[str, Any]) -> dict[str, Any]:
    """One kind of schedule trigger: its own field, the others absent or null."""
    others = {k: {"type": "null"} for k in ("cron", "every", "at") if k != kind}
    return {"type": "object", "additionalProperties": False, "required": [kind],
            "properties": {kind: schema, **others,
                           "timezone": {"type": ["string", "null"]}}}


JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
JOB = {
    "type": "object", "required": ["prompt", "trigger", "target"],
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"},
        "name": {"type": "string", "maxLength": 200},
        "prompt": {"type": "string", "minLength": 1, "maxLength": 20000},
        "trigger": {"description": "exactly one of cron (a valid crontab), every (seconds) "
                                   "or at, and optionally timezone (an IANA zone)",
                    "oneOf": [trigger("cron", {"type": "string"}),
                              trigger("every", {"type": "number", "exclusiveMinimum": 0,
                                                 "maximum": MAX_EVERY}),
                              trigger("at", {"type": "string", "format": "date-time"})]},
        "target": {"type": "object", "additionalProperties": False, "required": ["channel"],
                   "properties": {
                       "channel": {"enum": ["slack", "telegram", "webhook", "api", "webchat"]},
                       "address": {"type": "object"}}},
        "run_as": {"type": "string", "minLength": 3, "maxLength": 200,
                   "description": "an admin's only: anyone else's jobs run as themselves"},
        "role": {"type": ["string", "null"],
                 "description": "the role run_as has (the creating key's); computed"},
        "owner": {"type": "string"},
        "preapproved_tools": {"type": "array", "items": {"type": "string"}},
        "paused": {"type": "boolean"},
        "misfire_grace": {"type": ["number", "null"], "minimum": 0},
        "created_at": {"type": "number"}, "next_run_at": {"type": ["number", "null"]},
        "last_run": {"type": ["object", "null"]},
    },
}
#: What a client sends: the same fields, no others; the computed ones are ignored.
COMPUTED = {"description": "computed by the gateway; ignored when sent"}
JOB_IN = {**JOB, "additionalProperties": False, "properties": {
    **cast(dict[str, Any], JOB["properties"]),
    **dict.fromkeys(("created_at", "next_run_at", "last_run"), COMPUTED)}}

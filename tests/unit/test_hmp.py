"""HMP v1: every rule of every message type, each violation naming its field and rule."""

from __future__ import annotations

import base64
import gzip
import json
import os
from typing import Any

import pytest
from pydantic import ValidationError

from hub.messages import (
    MAX_CONTEXT_BYTES,
    ContextUpdate,
    TaskRequest,
    TaskResponse,
    Violation,
    parse,
    schemas,
)


def packed(size: int) -> str:
    # Random bytes: gzip cannot shrink them, so the decoded size is what is checked.
    return base64.b64encode(gzip.compress(os.urandom(size))).decode()


ENVELOPE = {"sender_id": "gateway", "message_id": "m-1"}
VALID: dict[str, dict[str, Any]] = {
    "task_request": {"task_id": "t-1", "intent": "validate_claim", "arguments": {"claim": 1},
                     "deadline_ms": 5000},
    "task_response": {"task_id": "t-1", "status": "success", "result": {"ok": True}},
    "context_update": {"context_id": "c-1", "version": 3, "data": packed(10),
                       "expires_at": 1.0e10},
    "tool_call": {"tool_name": "lookup", "parameters": {"q": "x"}, "caller_id": "agent-1"},
    "heartbeat": {"agent_id": "validator-1", "load_percent": 12.5, "memory_used_mb": 64,
                  "capabilities": ["validate_claim"], "version": "1.2.0"},
    "log_event": {"level": "warn", "event_type": "slow_tool", "details": {"seconds": 3.1}},
}


@pytest.mark.parametrize("kind", list(VALID))
def test_a_valid_message_of_every_type_parses_flat(kind: str) -> None:
    message = parse(json.dumps({"type": kind, **ENVELOPE, **VALID[kind]}))
    assert message.type == kind and message.sender_id == "gateway"
    assert parse(message.to_json()) == message, "what is sent reads back the same"


BROKEN = [
    ("task_request", {"deadline_ms": None}, "deadline_ms", "Field required"),
    ("task_request", {"deadline_ms": 300_001}, "deadline_ms", "300000"),
    ("task_request", {"deadline_ms": 0}, "deadline_ms", "greater than or equal to 1"),
    ("task_request", {"intent": ""}, "intent", "at least 1"),
    ("task_request", {"arguments": [1]}, "arguments", "dictionary"),
    ("task_request", {"extra": 1}, "extra", "not permitted"),
    ("task_response", {"status": "done"}, "status", "'success', 'failed' or 'partial'"),
    ("task_response", {"status": "partial"}, "result.next_steps", "list of how to continue"),
    ("task_response", {"status": "failed"}, "error_code", "failed response needs"),
    ("context_update", {"version": -1}, "version", "greater than or equal to 0"),
    ("context_update", {"data": "not base64!"}, "data", "base64"),
    ("context_update", {"data": base64.b64encode(b"plain").decode()}, "data", "gzip"),
    ("context_update", {"data": packed(MAX_CONTEXT_BYTES + 100_000)}, "data",
     f"more than {MAX_CONTEXT_BYTES} bytes"),
    ("tool_call", {"tool_name": "rm -rf"}, "tool_name", "pattern"),
    ("tool_call", {"caller_id": None}, "caller_id", "Field required"),
    ("heartbeat", {"load_percent": 101}, "load_percent", "less than or equal to 100"),
    ("heartbeat", {"memory_used_mb": -1}, "memory_used_mb", "greater than or equal to 0"),
    ("heartbeat", {"capabilities": ["can_validate_claim"]}, "capabilities", "nouns"),
    ("heartbeat", {"capabilities": ["Validate Claim"]}, "capabilities.0", "pattern"),
    ("log_event", {"level": "debug"}, "level", "'info', 'warn' or 'error'"),
    ("log_event", {"details": {"nested": {"a": 1}}}, "details", "flat key-value only"),
    ("log_event", {"details": {"list": [1]}}, "details", "flat key-value only"),
]


@pytest.mark.parametrize(("kind", "change", "field", "rule"), BROKEN,
                         ids=[f"{k}-{f}-{i}" for i, (k, _, f, _) in enumerate(BROKEN)])
def test_each_violation_names_the_field_and_the_rule(kind: str, change: dict[str, Any],
                                                     field: str, rule: str) -> None:
    data = {"type": kind, **ENVELOPE, **VALID[kind], **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(Violation) as raised:
        parse(json.dumps(data))
    assert raised.value.field == field, raised.value
    assert rule in raised.value.rule, raised.value.rule
    assert raised.value.sender_id == "gateway" and raised.value.message_id == "m-1"


@pytest.mark.parametrize(("raw", "field"), [
    (b"{not json", "body"), (b"[]", "body"), (b'{"type": "gossip"}', "type"),
    (b'{"type": "task_request"}', "sender_id")])
def test_what_is_not_a_message_at_all_is_named_too(raw: bytes, field: str) -> None:
    with pytest.raises(Violation) as raised:
        parse(raw)
    assert raised.value.field == field


def test_a_two_megabyte_context_update_fits_and_a_larger_one_does_not() -> None:
    fits = ContextUpdate(sender_id="a", context_id="c", version=1, expires_at=1e10,
                         data=packed(MAX_CONTEXT_BYTES))
    assert len(fits.to_json()) > MAX_CONTEXT_BYTES
    with pytest.raises(ValueError, match="more than"):
        ContextUpdate(sender_id="a", context_id="c", version=1, expires_at=1e10,
                      data=packed(int(MAX_CONTEXT_BYTES * 1.05)))


def test_a_context_update_on_the_wire_is_the_json_pydantic_would_write() -> None:
    update = ContextUpdate(sender_id="a", receiver_id="b", context_id="case-7", version=3,
                           expires_at=1e10, data=ContextUpdate.pack(b'{"claim": "C-7"}' * 50))
    wire = update.to_json()
    assert json.loads(wire) == json.loads(update.model_dump_json(exclude_none=True))
    assert parse(wire) == update
    with pytest.raises(ValidationError):  # the spliced data can only be the checked one
        update.data = "not base64 \" but a quote"


def test_defaults_make_a_minimal_request_and_a_partial_answer_valid() -> None:
    request = TaskRequest(sender_id="gw", intent="validate_claim", deadline_ms=100)
    assert request.message_id and request.task_id and request.correlation_id
    partial = TaskResponse(sender_id="a", task_id=request.task_id, status="partial",
                           result={"next_steps": [{"intent": "fetch_policy"}]})
    assert partial.result["next_steps"][0]["intent"] == "fetch_policy"


def test_the_published_schemas_cover_every_type() -> None:
    published = schemas()
    assert sorted(published) == sorted(VALID)
    assert "deadline_ms" in published["task_request"]["required"]

"""A queued task's state, written at ingest without building the model, reads back as the
TaskState it stands for."""

from __future__ import annotations

from agent_core import TaskState
from agent_core.task import queued_json


def test_the_queued_json_reads_back_as_the_queued_task_state() -> None:
    extra = {"channel": "webhook",
             "sent_files": [{"name": "a.pdf", "mime_type": "application/pdf", "size": 3,
                             "kind": "file"}]}
    raw = queued_json(task_id="t1", conversation_id="webhook:crm:7", user_id="crm:u",
                      instruction="hello ünïcode", extra=extra, now=1700000000.25)
    built = TaskState(task_id="t1", trace_id="t1", conversation_id="webhook:crm:7",
                      user_id="crm:u", role="", permissions=[], instruction="hello ünïcode",
                      status="queued", extra=extra, created_at=1700000000.25,
                      updated_at=1700000000.25)
    assert TaskState.model_validate_json(raw) == built


def test_the_queued_json_is_stamped_now_by_default() -> None:
    state = TaskState.model_validate_json(queued_json(
        task_id="t", conversation_id="c", user_id="u", instruction="x", extra={}))
    assert state.status == "queued" and state.created_at == state.updated_at > 0

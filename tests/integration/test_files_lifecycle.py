"""Files over a task's life: a message steered into a running task keeps its files; a
message whose task is started again finds its files as they were received (nothing fetched
twice); a document whose conversion needs more memory than the converter may have is a
clear note, and the gateway goes on."""

from __future__ import annotations

import base64
import io
import zipfile
from pathlib import Path
from typing import Any

from aiohttp import FormData

from adapters.base import Attachment, InboundMessage
from agent_core.models.replay import Reply
from tests.integration import fixture_files as files
from tests.integration.conftest import GatewayFactory
from tests.integration.test_files import text_of, user_content

TOOLS = ["tools.files", "tests.integration.gated_tools"]


def part(name: str, data: bytes) -> dict[str, Any]:
    return {"name": name, "data": base64.b64encode(data).decode()}


async def test_a_message_steered_into_a_running_task_keeps_its_files(
        make_gateway: GatewayFactory, tmp_path: Path) -> None:
    h = await make_gateway(hermes_busy_mode="steer", hermes_tools=TOOLS)
    flag = tmp_path / "go"
    h.model.add(Reply.call("hold", {"flag": str(flag)}), Reply("The budget is 42."))
    first = await h.client.post("/agent/run-async", json={"text": "plan the quarter",
                                                          "conversation_id": "q"})
    task_id = (await first.json())["task_id"]
    await h.wait_for(lambda: len(h.model.requests) == 1)
    steered = await h.client.post("/agent/run-async", json={
        "text": "use these", "conversation_id": "q",
        "files": [part("budget.txt", b"The zebra budget is 42 euros"),
                  part("chart.png", files.png())]})
    assert steered.status == 202, await steered.text()
    events = h.gateway.parts.eventlog
    flag.write_text("go")  # the task goes on, and meets the steered message
    view = await h.wait_task(task_id, "answered")
    assert view["answer"] == "The budget is 42."
    assert len(h.model.requests) == 2, "the steered message started no task of its own"
    content = user_content(h, 1)
    assert isinstance(content, list), content
    said = text_of(content)
    assert "use these" in said and "The zebra budget is 42 euros" in said
    assert "[Attachment: budget.txt (text/plain" in said and "inbox/budget.txt" in said
    assert [p["type"] for p in content if p["type"] == "image_url"] == ["image_url"]
    kept = Path(h.settings.hermes_data_dir) / "sandboxes" / "api_local_q" / "inbox"
    assert sorted(p.name for p in kept.iterdir()) == ["budget.txt", "chart.png"]
    received = [e async for e in _events(events, task_id) if e["type"] == "FILES_RECEIVED"]
    assert [f["name"] for f in received[0]["payload"]["files"]] == ["budget.txt", "chart.png"]


async def _events(eventlog: Any, task_id: str) -> Any:
    async for event in eventlog.follow(task_id):
        if event["type"] == "KEEPALIVE":
            continue
        yield event
        if event["type"] == "AGENT_FINISHED":
            return


async def test_a_task_started_again_finds_its_files_without_fetching_them_again(
        make_gateway: GatewayFactory) -> None:
    """The worker received a message's files, then stopped before its task was saved as
    started: the next worker starts the task again, and reads the files from the manifest
    of what was received, instead of fetching them a second time."""
    h = await make_gateway(slack=True, slack_progress="off")
    assert h.slack is not None
    shared = h.slack.host_file("contract.pdf", files.pdf(["The term is 24 months"]))
    msg = InboundMessage(channel="slack", conversation_id="slack:T1:C9:1.0", user_id="U1",
                         text="read this", platform_message_id=None, attachments=[
                             Attachment(source="slack", ref=shared["url_private_download"],
                                        name="contract.pdf", size=shared["size"])])
    inbox = h.gateway.parts.inbox
    first = await inbox.receive(msg, "task-1")
    again = await inbox.receive(msg, "task-1")
    assert len(h.slack.downloads) == 1
    assert again.to_dict() == first.to_dict()
    assert "The term is 24 months" in again.parts[0].text
    kept = Path(h.settings.hermes_data_dir) / "sandboxes" / "slack_T1_C9_1.0" / "inbox"
    assert sorted(p.name for p in kept.iterdir()) == ["contract.pdf", "contract.pdf.txt"]
    # Another task is another receipt: fetched, and kept beside the first.
    await inbox.receive(msg, "task-2")
    assert len(h.slack.downloads) == 2
    assert "contract-2.pdf" in {p.name for p in kept.iterdir()}


def word_bomb(megabytes: int) -> bytes:
    """A small DOCX whose document part unpacks to ``megabytes`` MB of text: reading it
    takes more memory than a converter capped below that has."""
    out = io.BytesIO()
    source = zipfile.ZipFile(io.BytesIO(files.docx(["placeholder"])))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as bomb:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                bomb.writestr(item, source.read(item))
                continue
            original = source.read(item).decode()
            head, _, tail = original.partition("placeholder")
            with bomb.open("word/document.xml", "w") as part:
                part.write(head.encode())
                chunk = b"budget " * (1024 * 1024 // 7)
                for _ in range(megabytes):
                    part.write(chunk)
                part.write(tail.encode())
    return out.getvalue()


async def test_a_document_that_needs_more_memory_than_the_converter_has_is_a_note(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_file_convert_mb=128, hermes_file_convert_seconds=50)
    bomb = word_bomb(200)
    assert len(bomb) < 2 * 1024 * 1024
    h.model.add(Reply("It was too large to read."), Reply("Still here."))
    form = FormData()
    form.add_field("text", "summarise")
    form.add_field("file", io.BytesIO(bomb), filename="report.docx")
    response = await h.client.post("/agent/run", data=form)
    view = await response.json()
    assert view["answer"] == "It was too large to read.", view
    sent = text_of(user_content(h))
    assert "report.docx could not be read" in sent
    assert "more than 128 MB" in sent and "HERMES_FILE_CONVERT_MB" in sent
    assert "Traceback" not in sent and "MemoryError" not in sent
    # The gateway goes on: the next message is answered as usual.
    after = await h.client.post("/agent/run", json={"text": "are you there?"})
    assert (await after.json())["answer"] == "Still here."

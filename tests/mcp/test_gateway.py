"""MCP tools in the gateway: the reference filesystem server rooted in each task's sandbox,
approvals from a Slack conversation, GET /agent/status and `hermes-gateway tools`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_core.models.replay import Reply
from tests.integration.conftest import GatewayFactory, Harness
from tests.integration.test_approvals import buttons_of, click, prompt_message, shown_text
from tests.integration.test_slack import answers, event_body, mention, send
from tests.integration.test_telegram import post, update
from tests.mcp.conftest import EVERYTHING, FILESYSTEM, TIME, node_server

pytestmark = pytest.mark.usefixtures("no_children")

FILES = {**node_server(FILESYSTEM, "{sandbox}"), "sandbox": True}
EVERY = node_server(EVERYTHING, "stdio")
IMAGE = Reply.call("every__get-tiny-image", {})


def sandbox_files(h: Harness, pattern: str) -> list[Path]:
    return list((Path(h.settings.hermes_data_dir) / "sandboxes").glob(f"*/*/{pattern}"))


async def test_an_mcp_write_asks_approval_in_slack_and_lands_in_the_sandbox(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, hermes_mcp_servers={"files": FILES})
    assert h.slack is not None
    h.model.add(Reply.call("files__write_file", {"path": "notes.txt", "content": "Q3: 1.2M"}),
                Reply.call("files__read_text_file", {"path": "/etc/hostname"}),
                Reply("Saved your notes."))
    await send(h, event_body(mention("write my notes down")))
    await h.wait_for(lambda: any(c.get("blocks") for c in h.slack.of("chat.postMessage")))
    prompt = prompt_message(h)
    assert "files__write_file" in shown_text(prompt)
    assert sandbox_files(h, "notes.txt") == [], "nothing is written before the approval"

    await click(h, buttons_of(prompt)[0]["value"], "U1")
    await h.wait_for(lambda: any(a["text"] == "Saved your notes." for a in answers(h)))
    [written] = sandbox_files(h, "notes.txt")
    assert written.read_text() == "Q3: 1.2M"
    # The read outside the sandbox needed no approval, and the server refused it.
    last_request = json.dumps(h.model.requests[-1])
    assert "Access denied" in last_request and "outside allowed directories" in last_request


async def test_a_read_only_mcp_tool_needs_no_approval(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, hermes_mcp_servers={"time": {"command": TIME}})
    assert h.slack is not None
    h.model.add(Reply.call("time__get_current_time", {"timezone": "Asia/Tokyo"}),
                Reply("It is late in Tokyo."))
    await send(h, event_body(mention("what time is it in Tokyo?")))
    await h.wait_for(lambda: any(a["text"] == "It is late in Tokyo." for a in answers(h)))
    assert not any(c.get("blocks") for c in h.slack.of("chat.postMessage"))
    assert "Asia/Tokyo" in json.dumps(h.model.requests[-1])
    ready = await (await h.client.get("/agent/status")).json()
    assert ready["mcp_servers"] == {"time": {"state": "up", "transport": "stdio", "tools": 2}}


async def test_a_server_that_cannot_start_leaves_the_gateway_ready(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_mcp_servers={"gone": {"command": "/nonexistent/server"}})
    response = await h.client.get("/agent/status")
    assert response.status == 200
    status = (await response.json())["mcp_servers"]["gone"]
    assert status["state"] == "down" and "nonexistent" in status["error"]


def test_the_tools_command_lists_mcp_tools_and_servers(tmp_path: Path) -> None:
    servers = json.dumps({"time": {"command": TIME}, "gone": {"command": "/nonexistent/x"}})
    env = {"PATH": "/usr/bin:/bin", "HERMES_MCP_SERVERS": servers,
           "HERMES_DATA_DIR": str(tmp_path), "HERMES_TOOLS": "tools.recall"}
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "tools"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "time__get_current_time" in out and "recall" in out
    assert "MCP server time (stdio): up, 2 tools" in out
    assert "MCP server gone (stdio): down" in out


async def test_an_mcp_image_is_shared_in_the_slack_thread_before_the_answer(
        make_gateway: GatewayFactory) -> None:
    # Posted, not streamed: the order of the share and the answer is what is checked.
    h = await make_gateway(slack=True, llm_stream=False, hermes_mcp_servers={"every": EVERY})
    assert h.slack is not None
    h.model.add(IMAGE, Reply("Here is the logo."))
    await send(h, event_body(mention("show me the logo", message_ts="1700000000.000100")))
    await h.wait_for(lambda: any(a["text"] == "Here is the logo." for a in answers(h)))
    [share] = h.slack.of("files.completeUploadExternal")
    assert share["channel_id"] == "C9" and share["thread_ts"] == "1700000000.000100"
    [data] = h.slack.uploads.values()
    assert data.startswith(b"\x89PNG")
    methods = [m for m, _ in h.slack.calls]
    last_answer = max(i for i, (m, p) in enumerate(h.slack.calls)
                      if "Here is the logo." in (p.get("text"), p.get("markdown_text")))
    assert methods.index("files.completeUploadExternal") < last_answer


async def test_an_mcp_image_is_a_telegram_photo(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True, hermes_mcp_servers={"every": EVERY})
    assert h.telegram is not None
    h.model.add(IMAGE, Reply("Here is the logo."))
    assert (await post(h, update("show me the logo"))).status == 200
    await h.wait_for(lambda: any(m.get("text") == "Here is the logo."
                                 for m in h.telegram.of("sendMessage")))
    [photo] = h.telegram.of("sendPhoto")
    assert photo["chat_id"] == 42
    assert photo["photo"]["bytes"].startswith(b"\x89PNG")


async def test_the_web_chat_reads_an_attachment_through_the_api(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_mcp_servers={"every": EVERY})
    h.model.add(IMAGE, Reply("Here is the logo."))
    response = await h.client.post("/agent/run", json={"text": "logo",
                                                       "conversation_id": "web-1"})
    task = await response.json()
    assert task["text"] == "Here is the logo."
    [kept] = sandbox_files(h, "attachments/*.png")
    url = f"/agent/tasks/{task['task_id']}/attachments/{kept.name}"
    image = await h.client.get(url)
    assert image.status == 200 and image.content_type == "image/png"
    assert await image.read() == kept.read_bytes()
    assert image.headers["X-Content-Type-Options"] == "nosniff"
    for bad, status in [("..%2Fetc", 400), ("missing.png", 404), (".hidden", 400)]:
        answer = await h.client.get(f"/agent/tasks/{task['task_id']}/attachments/{bad}")
        assert answer.status == status, bad
        assert "error" in await answer.json()
    assert (await h.client.get(f"/agent/tasks/nope/attachments/{kept.name}")).status == 404

"""Files tools made for the person are read inside the task's sandbox and never through a
symbolic link: a link a tool planted in attachments/ (or attachments/ itself swapped for a
link, or a path of the tool's choosing) to a secret outside is neither served by GET
/agent/tasks/{id}/attachments/{name} nor uploaded to Slack or Telegram."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_core.models.replay import Reply
from agent_core.tools.sandbox import sandbox_dir
from tests.integration.conftest import GatewayFactory, Harness
from tests.integration.planting_tools import GENUINE
from tests.integration.test_files import said
from tests.integration.test_slack import event_body, mention, send
from tests.integration.test_telegram import post, update

SECRET = b"TOP-SECRET-deploy-key-8d1f0c"
TOOLS = ["tests.integration.planting_tools"]


def _secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.png"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(SECRET)
    return path


def _plant(h: Harness, target: Path) -> None:
    h.model.add(Reply.call("make_charts", {"target": str(target)}), Reply("Charts are up."))


async def test_a_linked_attachment_is_not_served(make_gateway: GatewayFactory,
                                                 tmp_path: Path) -> None:
    h = await make_gateway(hermes_tools=TOOLS)
    secret = _secret(tmp_path)
    _plant(h, secret)
    response = await h.client.post("/agent/run", json={"text": "charts please",
                                                       "conversation_id": "c-links"})
    task = await response.json()
    assert task["text"] == "Charts are up.", task
    base = f"/agent/tasks/{task['task_id']}/attachments"
    real = await h.client.get(f"{base}/real.png")
    assert real.status == 200 and await real.read() == GENUINE, "the genuine one is served"
    chart = await h.client.get(f"{base}/chart.png")
    body = await chart.read()
    assert chart.status == 404 and SECRET not in body, body
    # attachments/ itself a link to a folder outside, and a FIFO that would block a read.
    sandbox = sandbox_dir(h.settings.hermes_data_dir, task["conversation_id"],
                          task["task_id"])
    os.mkfifo(sandbox / "attachments" / "pipe.png")
    piped = await h.client.get(f"{base}/pipe.png")
    assert piped.status == 404
    (sandbox / "attachments").rename(sandbox / "moved")
    os.symlink(secret.parent, sandbox / "attachments")
    swapped = await h.client.get(f"{base}/secret.png")
    body = await swapped.read()
    assert swapped.status == 404 and SECRET not in body, body


@pytest.mark.parametrize("link_to", ["file", "folder"])
async def test_a_linked_attachment_is_not_uploaded_to_slack(
        make_gateway: GatewayFactory, tmp_path: Path, link_to: str) -> None:
    secret = _secret(tmp_path)
    h = await make_gateway(slack=True, hermes_tools=TOOLS)
    assert h.slack is not None
    _plant(h, secret if link_to == "file" else secret.parent)
    await send(h, event_body(mention("charts please")))
    # The chart is shared as the tool makes it, beside the answer (streamed or posted).
    await h.wait_for(lambda: said(h, "Charts are up.") and bool(h.slack.uploads))  # type: ignore[union-attr]
    await h.wait_idle()
    assert list(h.slack.uploads.values()) == [GENUINE], "only the genuine chart"
    assert SECRET.decode() not in json.dumps(h.slack.calls, default=repr)


@pytest.mark.parametrize("link_to", ["file", "folder"])
async def test_a_linked_attachment_is_not_sent_to_telegram(
        make_gateway: GatewayFactory, tmp_path: Path, link_to: str) -> None:
    secret = _secret(tmp_path)
    h = await make_gateway(telegram=True, hermes_tools=TOOLS)
    telegram = h.telegram
    assert telegram is not None
    _plant(h, secret if link_to == "file" else secret.parent)
    assert (await post(h, update("charts please"))).status == 200
    await h.wait_for(lambda: any(m.get("text") == "Charts are up."
                                 for m in telegram.of("sendMessage")))
    [photo] = telegram.of("sendPhoto")
    assert photo["photo"]["bytes"] == GENUINE, "only the genuine chart"
    assert not telegram.of("sendDocument")
    assert SECRET.decode() not in json.dumps(telegram.calls, default=repr)

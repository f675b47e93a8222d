"""The data directory is for the service's user alone: ``hermes-gateway serve`` with its
embedded Valkey and nats-server writes conversations (AOF, RDB), the JetStream store, the
audit file and a sandbox file, and nothing under the data directory is readable (or
writable) by group or others; what an earlier start left readable is made private, and
the log says so."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_core.datadir import secure_data_dir
from agent_core.models.replay import ReplayModelServer, Reply
from tests.integration.test_serve import Serve, answers


def _open_to_others(root: Path) -> list[str]:
    """Every folder and file under ``root`` (``root`` too) with a group or other bit."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)}")
    return found


@pytest.mark.timeout(90)
async def test_serve_keeps_everything_under_the_data_dir_private(
        tmp_path: Path, callback_server: dict[str, Any]) -> None:
    data = tmp_path / "data"
    # What an earlier version left: the data dir, a server's folder and its log, all
    # readable by everyone.
    (data / "valkey").mkdir(parents=True)
    (data / "valkey" / "valkey.log").write_text("an old log line\n")
    os.chmod(data, 0o755)
    os.chmod(data / "valkey", 0o755)
    os.chmod(data / "valkey" / "valkey.log", 0o644)
    audit = data / "audit" / "audit.jsonl"
    model = ReplayModelServer()
    model.add(Reply.call("write_file", {"path": "notes/today.md", "content": "secret plan"}),
              Reply("Noted."))
    await model.start()
    gateway = Serve(data, model, HERMES_HUB="true", HERMES_AUDIT_FILE=str(audit),
                    HERMES_WRITES_NEED_APPROVAL="false")
    try:
        async with aiohttp.ClientSession() as http:
            await gateway.ready(http)
        await gateway.send("private-1", "note the plan", callback_server["url"])
        assert await answers(callback_server, 1) == ["Noted."], gateway.log.read_text()
        assert await gateway.stop() == 0, gateway.log.read_text()
    finally:
        gateway.kill()
        await model.stop()
    log = gateway.log.read_text()
    written = {p.relative_to(data).parts[0] for p in data.rglob("*") if p.is_file()}
    assert {"valkey", "nats", "audit", "sandboxes"} <= written, written
    assert list(data.glob("valkey/appendonlydir/*.aof")) and (data / "valkey/dump.rdb").exists()
    assert list(data.glob("sandboxes/*/*/notes/today.md"))
    assert "note the plan" not in audit.read_text() and "write_file" in audit.read_text()
    assert _open_to_others(data) == [], log
    assert "private (0700/0600): group or others could read them" in log, log


def test_what_others_could_read_is_made_private(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    for folder in ("nats/store/jetstream", "sandboxes/c1/t1"):
        (data / folder).mkdir(parents=True, mode=0o755)
    (data / "nats/store/jetstream/meta.inf").write_text("x")
    (data / "sandboxes/c1/t1/a.txt").write_text("x")
    for path in (data, *data.rglob("*")):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    secure_data_dir(data)
    # The data dir, each entry in it, the servers' folders to their last file; below a
    # private folder the rest is out of reach already.
    assert _open_to_others(data) == ["data/sandboxes/c1 drwxr-xr-x",
                                     "data/sandboxes/c1/t1 drwxr-xr-x",
                                     "data/sandboxes/c1/t1/a.txt -rw-r--r--"]
    assert "made 6 files and folders" in caplog.text
    caplog.clear()
    secure_data_dir(data)
    assert caplog.text == "", "nothing to say the second time"

"""MCP tools against real servers: mcp-server-time and the reference "everything" server
over stdio and Streamable HTTP — listing, calls, content types, isError, progress,
list_changed, timeouts, a crash mid-call and an outage at start."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from agent_core.mcp import McpServerConfig
from tests.mcp.conftest import (
    EVERYTHING,
    TIME,
    HttpEverything,
    Servers,
    caller,
    children,
    node_server,
    until,
)

pytestmark = pytest.mark.usefixtures("no_children")


def everything(transport: str, http: HttpEverything | None = None, **extra: Any
               ) -> dict[str, Any]:
    if transport == "stdio":
        return {**node_server(EVERYTHING, "stdio"), **extra}
    assert http is not None
    return {"url": http.url, "headers": {"X-Api-Key": "mcp-header-secret-42"}, **extra}


# --- mcp-server-time over stdio ------------------------------------------------------------

async def test_time_tools_are_listed_with_their_schemas_and_hints(mcp: Servers) -> None:
    servers, executor = await mcp(time={"command": TIME})
    registry = executor.registry
    assert set(registry.names()) == {"time__get_current_time", "time__convert_time"}
    current = registry.get("time__get_current_time")
    assert current is not None
    assert current.parameters["required"] == ["timezone"]
    assert current.side_effect == "read", "readOnlyHint: true makes a read tool"
    assert "mcp" in current.tags
    assert servers.status() == {"time": {"state": "up", "transport": "stdio", "tools": 2}}


async def test_a_time_call_is_answered_and_a_bad_zone_is_refused_by_the_server(
        mcp: Servers, tmp_path: Path) -> None:
    _servers, executor = await mcp(time={"command": TIME})
    ctx = caller(tmp_path)
    answer = await executor.execute("time__get_current_time", {"timezone": "Europe/Paris"}, ctx)
    assert answer.ok, answer.error
    assert answer.output["timezone"] == "Europe/Paris"
    assert answer.output["datetime"].startswith(time.strftime("%Y-"))

    refused = await executor.execute("time__get_current_time", {"timezone": "Mars/Olympus"},
                                     ctx)
    assert not refused.ok and refused.error is not None
    assert "Invalid timezone" in refused.error.message, "the server's own error text"

    missing = await executor.execute("time__get_current_time", {}, ctx)
    assert missing.error is not None and missing.error.type == "validation"
    assert "timezone" in missing.error.message, "the server's schema, checked before sending"


async def test_filters_and_overrides_decide_which_tools_and_how(mcp: Servers) -> None:
    _servers, executor = await mcp(time={"command": TIME, "include": ["convert_*"],
                                         "permissions": {"convert_*": "write"}})
    assert executor.registry.names() == ["time__convert_time"]
    assert executor.registry.get("time__convert_time").side_effect == "write"  # type: ignore[union-attr]


def test_tools_without_a_read_only_hint_are_writes() -> None:
    config = McpServerConfig(command="x", permissions={"safe": "read"})
    assert config.permission_of("anything", read_only_hint=None) == "write"
    assert config.permission_of("anything", read_only_hint=False) == "write"
    assert config.permission_of("anything", read_only_hint=True) == "read"
    assert config.permission_of("safe", read_only_hint=None) == "read"


@pytest.mark.parametrize("bad, reason", [
    ({}, "either command"),
    ({"command": "x", "url": "http://h/mcp"}, "either command"),
    ({"url": "ftp://h"}, "http://"),
    ({"url": "http://h/mcp", "args": ["a"]}, "command servers"),
    ({"command": "x", "headers": {"A": "b"}}, "url servers"),
    ({"command": "x", "bogus": 1}, "bogus"),
])
def test_bad_server_settings_are_refused_with_the_reason(bad: dict[str, Any], reason: str
                                                         ) -> None:
    from agent_core.settings import Settings

    with pytest.raises(Exception, match=reason):
        Settings(_env_file=None, hermes_mcp_servers={"s": bad})  # type: ignore[call-arg]
    with pytest.raises(Exception, match="MCP server name"):
        Settings(_env_file=None,  # type: ignore[call-arg]
                 hermes_mcp_servers={"bad__name": {"command": "x"}})


# --- the everything server, over both transports -------------------------------------------

@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def http_or_none(transport: str, request: pytest.FixtureRequest) -> HttpEverything | None:
    return request.getfixturevalue("http_everything") if transport == "http" else None


async def test_every_content_type_reaches_the_model_and_the_chat(
        http_or_none: HttpEverything | None, mcp: Servers, tmp_path: Path, transport: str
        ) -> None:
    _servers, executor = await mcp(every=everything(transport, http_or_none))
    files: list[tuple[str, str, int, str | None]] = []
    ctx = caller(tmp_path, files=files)

    image = await executor.execute("every__get-tiny-image", {}, ctx)
    assert image.ok, image.error
    assert "[image image/png," in image.output and "MCP logo" in image.output
    [(name, mime, size, path)] = files
    assert mime == "image/png" and path == f"attachments/{name}"
    saved = (tmp_path / "sandbox" / path).read_bytes()
    assert saved.startswith(b"\x89PNG") and len(saved) == size

    structured = await executor.execute("every__get-structured-content",
                                        {"location": "New York"}, ctx)
    assert structured.ok and set(structured.output) == {"temperature", "conditions",
                                                        "humidity"}

    embedded = await executor.execute("every__get-resource-reference",
                                      {"resourceType": "Text", "resourceId": 3}, ctx)
    assert embedded.ok and "[resource demo://resource/dynamic/text/3]" in embedded.output

    links = await executor.execute("every__get-resource-links", {"count": 2}, ctx)
    assert links.ok and links.output.count("[link: ") == 2


async def test_an_is_error_result_is_a_tool_error_for_the_model(
        http_or_none: HttpEverything | None, mcp: Servers, tmp_path: Path, transport: str
        ) -> None:
    _servers, executor = await mcp(every=everything(transport, http_or_none))
    tool = executor.registry.get("every__gzip-file-as-resource")
    assert tool is not None and tool.side_effect == "write", "readOnlyHint false: a write"
    result = await executor.execute("every__gzip-file-as-resource",
                                    {"name": "x", "data": "ftp://example.test/x"},
                                    caller(tmp_path), approved=True)
    assert not result.ok and result.error is not None
    assert result.error.type == "exception"
    assert "Unsupported URL protocol" in result.error.message
    assert "Unsupported URL protocol" in result.observation()


async def test_progress_notifications_show_as_progress(
        http_or_none: HttpEverything | None, mcp: Servers, tmp_path: Path, transport: str
        ) -> None:
    _servers, executor = await mcp(every=everything(transport, http_or_none))
    notes: list[str] = []
    result = await executor.execute("every__trigger-long-running-operation",
                                    {"duration": 1, "steps": 3}, caller(tmp_path, notes=notes))
    assert result.ok, result.error
    assert notes == ["1/3", "2/3", "3/3"]


async def test_a_slow_tool_is_cut_off_by_the_call_timeout_and_the_server_stays(
        http_or_none: HttpEverything | None, mcp: Servers, tmp_path: Path, transport: str
        ) -> None:
    servers, executor = await mcp(every=everything(transport, http_or_none, call_timeout=1))
    started = time.monotonic()
    slow = await executor.execute("every__trigger-long-running-operation",
                                  {"duration": 30, "steps": 2}, caller(tmp_path))
    assert time.monotonic() - started < 20, "not the tool's 30 s"
    assert not slow.ok and slow.error is not None
    assert "did not answer within 1s" in slow.error.message and slow.attempts == 1
    assert servers.status()["every"]["state"] == "up"
    after = await executor.execute("every__get-sum", {"a": 2, "b": 3}, caller(tmp_path))
    assert after.ok and "5" in after.output


async def test_list_changed_updates_the_registry_and_roots_are_the_sandbox(
        http_or_none: HttpEverything | None, mcp: Servers, tmp_path: Path, transport: str
        ) -> None:
    # With roots (a sandbox server) "everything" registers get-roots-list after the
    # handshake and says so with notifications/tools/list_changed.
    servers, executor = await mcp(every=everything(transport, http_or_none, sandbox=True))
    session = servers.sessions["every"]
    # Over HTTP the tool is already in the first listing (and the notification, sent before
    # the client's event stream opens, is lost); over stdio it comes with the notification.
    await until(lambda: "every__get-roots-list" in executor.registry
                and (session.refreshes > 0 or transport == "http"))
    result = await executor.execute("every__get-roots-list", {}, caller(tmp_path))
    assert result.ok, result.error
    assert (tmp_path / "sandbox").as_uri() in result.output, "the task's sandbox is its root"


# --- failures ------------------------------------------------------------------------------

async def test_a_server_killed_mid_call_is_unavailable_then_back(mcp: Servers,
                                                                 tmp_path: Path) -> None:
    import asyncio

    servers, executor = await mcp(every=everything("stdio", max_backoff=1))
    ctx = caller(tmp_path)
    call = asyncio.create_task(executor.execute("every__trigger-long-running-operation",
                                                {"duration": 20, "steps": 20}, ctx))
    notes: list[str] = []
    await until(lambda: servers.sessions["every"].in_flight == 1)
    [pid] = children("server-everything")
    os.kill(pid, signal.SIGKILL)
    result = await call
    assert not result.ok and result.error is not None
    assert "went away during the call" in result.error.message
    assert "unavailable" in (await executor.execute("every__get-sum", {"a": 1, "b": 1}, ctx)
                             ).error.message  # type: ignore[union-attr]
    await until(lambda: servers.status()["every"]["state"] == "up")
    back = await executor.execute("every__get-sum", {"a": 1, "b": 1}, caller(tmp_path,
                                                                             notes=notes))
    assert back.ok and "2" in back.output
    [new_pid] = children("server-everything")
    assert new_pid != pid


async def test_a_server_down_at_start_does_not_stop_the_others(
        mcp: Servers, tmp_path: Path) -> None:
    http = HttpEverything()  # not started yet: nothing listens on its port
    servers, executor = await mcp(
        time={"command": TIME},
        every={"url": http.url, "connect_timeout": 5, "max_backoff": 1},
        broken={"command": "/nonexistent/mcp-server"})
    status = servers.status()
    assert status["time"]["state"] == "up"
    assert status["every"]["state"] == "down" and status["broken"]["state"] == "down"
    assert "every__get-sum" not in executor.registry
    assert (await executor.execute("time__get_current_time", {"timezone": "UTC"},
                                   caller(tmp_path))).ok
    http.start()
    try:
        await http.ready()
        await until(lambda: servers.status()["every"]["state"] == "up")
        assert (await executor.execute("every__get-sum", {"a": 1, "b": 2},
                                       caller(tmp_path))).ok
    finally:
        http.stop()


async def test_secrets_of_a_server_never_reach_errors_or_status(
        mcp: Servers, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from agent_core.redaction import register

    secret = "sk-mcp-very-secret-0042"
    register([secret])
    servers, _executor = await mcp(
        broken={"command": f"/nonexistent/{secret}", "env": {"TOKEN": secret}})
    status = str(servers.status())
    assert "down" in status and secret not in status
    assert secret not in caplog.text


async def test_an_image_too_big_for_the_sandbox_is_shown_not_kept(tmp_path: Path) -> None:
    import mcp_types as types

    from agent_core.mcp.results import convert, deliver
    from agent_core.tools import ToolContext

    png = base64.b64encode(b"\x89PNG" + b"x" * 5000).decode()
    result = types.CallToolResult(content=[types.ImageContent(data=png, mime_type="image/png")])
    files: list[Any] = []
    ctx = ToolContext("u", "c", "t", workdir=tmp_path, extra={"sandbox": {
        "max_file_bytes": 100, "max_total_bytes": 1000}},
        attachments=lambda *a: files.append(a))
    output = deliver(convert(result, tool="t"), ctx)
    assert "5004 bytes" in output
    assert files == [(files[0][0], "image/png", 5004, None)]
    assert not (tmp_path / "attachments").exists()


async def test_tools_added_and_removed_while_running_follow_list_changed(
        mcp: Servers, tmp_path: Path) -> None:
    import sys

    script = str(Path(__file__).parent / "changing_server.py")
    servers, executor = await mcp(changing={"command": sys.executable, "args": [script],
                                            "ping_interval": 600})
    session = servers.sessions["changing"]
    assert "changing__late" not in executor.registry
    assert (await executor.execute("changing__add_late", {}, caller(tmp_path))).ok
    await until(lambda: "changing__late" in executor.registry)
    assert session.refreshes >= 1, "announced, not found by the periodic listing"
    late = await executor.execute("changing__late", {}, caller(tmp_path))
    assert late.ok and late.output == "late answer"
    assert (await executor.execute("changing__remove_late", {}, caller(tmp_path))).ok
    await until(lambda: "changing__late" not in executor.registry)
    assert servers.status()["changing"]["tools"] == 2


def test_servers_come_from_the_yaml_settings_file(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_core.settings import Settings

    config = tmp_path / "hermes.yaml"
    config.write_text("mcp_servers:\n  time:\n    command: mcp-server-time\n"
                      "    include: [get_*]\n  crm:\n    url: https://crm.example.test/mcp\n"
                      "    headers: {Authorization: Bearer yaml-secret-777}\n")
    monkeypatch.setenv("HERMES_CONFIG", str(config))
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    servers = settings.hermes_mcp_servers
    assert servers["time"].command == "mcp-server-time" and servers["time"].include == ["get_*"]
    assert servers["crm"].transport == "http"
    assert "Bearer yaml-secret-777" in settings.secret_values()


async def test_a_server_that_never_answers_the_handshake_is_down_not_waited_for(
        mcp: Servers) -> None:
    import sys

    started = time.monotonic()
    servers, _executor = await mcp(mute={
        "command": sys.executable, "args": ["-c", "import time; time.sleep(120)"],
        "connect_timeout": 1, "max_backoff": 60})
    assert time.monotonic() - started < 15
    status = servers.status()["mute"]
    assert status["state"] == "down" and "did not answer in time" in status["error"]


async def test_a_server_that_hangs_while_running_is_restarted(mcp: Servers,
                                                              tmp_path: Path) -> None:
    servers, executor = await mcp(every=everything("stdio", ping_interval=0.5,
                                                   connect_timeout=5, max_backoff=1))
    [pid] = children("server-everything")
    os.kill(pid, signal.SIGSTOP)  # alive, silent: only the liveness listing notices
    try:
        await until(lambda: servers.status()["every"]["state"] == "down")
    finally:
        with contextlib.suppress(ProcessLookupError):  # already ended by the restart
            os.kill(pid, signal.SIGCONT)
    await until(lambda: servers.status()["every"]["state"] == "up"
                and pid not in children("server-everything"))
    assert (await executor.execute("every__get-sum", {"a": 2, "b": 2}, caller(tmp_path))).ok


async def test_an_http_server_killed_mid_call_is_unavailable_then_back(
        http_everything: HttpEverything, mcp: Servers, tmp_path: Path) -> None:
    import asyncio

    servers, executor = await mcp(every=everything("http", http_everything, max_backoff=1,
                                                   ping_interval=1, connect_timeout=8))
    call = asyncio.create_task(executor.execute("every__trigger-long-running-operation",
                                                {"duration": 20, "steps": 20},
                                                caller(tmp_path)))
    await until(lambda: servers.sessions["every"].in_flight == 1)
    http_everything.stop()
    result = await call
    assert not result.ok and result.error is not None
    await until(lambda: servers.status()["every"]["state"] == "down")
    http_everything.start()
    await http_everything.ready()
    await until(lambda: servers.status()["every"]["state"] == "up")
    back = await executor.execute("every__get-sum", {"a": 1, "b": 2}, caller(tmp_path))
    assert back.ok and "3" in back.output

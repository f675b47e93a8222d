"""The hermes-gateway command: run, tools, demo, and its one-line errors."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main


def test_run_without_a_model_says_which_settings_to_set(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--task", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, "one line, no traceback"
    assert "LLM_PROVIDER" in err and "hermes-gateway demo" in err


def test_a_bad_setting_is_one_clear_line(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MAX_ROUND", "lots")
    assert main(["tools"]) == 2
    err = capsys.readouterr().err
    assert "AGENT_MAX_ROUND='lots'" in err and "Traceback" not in err


def test_tools_lists_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "--json"]) == 0
    specs = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in specs] == [
        "query_sales_data", "calc_growth_rate", "save_daily_report", "recall", "read_file",
        "write_file", "append_file", "list_files", "http_fetch", "schedule_report"]
    assert specs[0]["parameters"]["required"] == ["start_date", "end_date"]


def test_demo_replays_the_recorded_session_offline(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("HERMES_DATA_DIR", str(tmp_path))
    assert main(["demo", "--json"]) == 0
    captured = capsys.readouterr()
    assert "replaying a model session recorded" in captured.err
    events = [json.loads(line) for line in captured.out.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "AGENT_STARTED" and types[-1] == "AGENT_FINISHED"
    assert types.count("TOOL_FINISHED") == 4
    growth = next(e for e in events if e["type"] == "TOOL_FINISHED"
              and e["payload"]["tool"] == "calc_growth_rate")
    assert '"growth_rate_percent": 16.89' in growth["payload"]["output"]
    assert events[-1]["payload"]["outcome"] == "answered"
    assert "16.89%" in events[-1]["payload"]["text"]
    assert list((tmp_path / "reports").glob("*.md"))


@contextlib.contextmanager
def scripted_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                   script: list[Any]) -> Iterator[Any]:
    """The scripted model server on a thread of its own (main() runs its own event loop),
    and the settings that point the CLI at it."""
    import asyncio
    import threading

    from agent_core.models.replay import ReplayModelServer

    server = ReplayModelServer(script)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(5)
    try:
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_MODEL_NAME", "scripted")
        monkeypatch.setenv("LLM_BASE_URL", server.openai_url)
        monkeypatch.setenv("LLM_API_KEY", "sk-cli-test-key-0123456789")
        monkeypatch.setenv("HERMES_DATA_DIR", str(tmp_path))
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_run_with_a_configured_model_goes_through_settings_and_the_real_adapter(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from agent_core.models.replay import Reply

    with scripted_model(monkeypatch, tmp_path, [
            Reply.call("calc_growth_rate", {"current": 120, "previous": 100}),
            Reply("Growth is 20%.")]) as server:
        assert main(["run", "--task", "growth from 100 to 120?", "--json"]) == 0
    out = capsys.readouterr().out
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["payload"]["text"] == "Growth is 20%."
    assert server.requests[0][1]["model"] == "scripted"
    assert "sk-cli-test-key" not in out
    # The conversation was kept in the embedded store under the data dir, which stopped.
    assert (tmp_path / "valkey" / "appendonlydir").is_dir()
    assert not (tmp_path / "valkey" / "server.json").exists()


def test_a_cli_task_has_a_sandbox_of_its_own(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    from agent_core.models.replay import Reply

    with scripted_model(monkeypatch, tmp_path, [
            Reply.call("write_file", {"path": "notes.txt", "content": "hello"}),
            Reply.call("read_file", {"path": "notes.txt"}), Reply("Done.")]):
        assert main(["run", "--task", "write and read a note", "--json", "--approve"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert not [e for e in events if e["type"] == "TOOL_ERROR"], "no 'no sandbox' refusal"
    [read] = [e for e in events if e["type"] == "TOOL_FINISHED"
              and e["payload"]["tool"] == "read_file"]
    assert "hello" in read["payload"]["output"]
    [written] = list((tmp_path / "sandboxes").glob("cli_*/*/notes.txt"))
    assert written.read_text() == "hello"


def test_a_cli_write_waits_for_the_operator(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """Writes ask for approval at the terminal too: without one (and without --approve) the
    task stops there and says how to go on; at one, "n" rejects the call."""
    from agent_core.models.replay import Reply

    write = Reply.call("write_file", {"path": "notes.txt", "content": "hello"})
    with scripted_model(monkeypatch, tmp_path, [write]):
        assert main(["run", "--task", "write a note", "--json"]) == 1
    err = capsys.readouterr().err
    assert "waits for an approval of write_file" in err and "--approve" in err
    assert not list((tmp_path / "sandboxes").glob("cli_*/*/notes.txt"))

    asked: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "n")
    with scripted_model(monkeypatch, tmp_path, [write, Reply("I did not save it.")]) as server:
        assert main(["run", "--task", "write a note", "--json"]) == 0
    assert asked == ['Approve write_file {"path": "notes.txt", "content": "hello"}? [y/N] ']
    assert "rejected" in json.dumps(server.requests[-1][1]["messages"][-1])
    assert not list((tmp_path / "sandboxes").glob("cli_*/*/notes.txt"))


def test_the_suggested_commands_are_typed_the_way_the_user_started_it(tmp_path: Path) -> None:
    """Started through dev.py (no hermes-gateway on PATH), the no-model reply and the demo
    suggest `python3 dev.py ...`, which works for that user."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "HERMES_", "VIRTUAL_ENV"))}
    env.update(HERMES_DATA_DIR=str(tmp_path / "data"), HERMES_VENV=str(Path(sys.prefix)),
               PATH="/usr/bin:/bin")
    out = subprocess.run([sys.executable, "dev.py", "run", "--task", "hello"], cwd=root,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert f"`{Path(sys.executable).name} dev.py demo`" in out.stderr, out.stderr
    assert "hermes-gateway demo" not in out.stderr


def _script(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "HERMES_"))},
           **env}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


#: Runs the console script (``gateway.start.script``) on ``sys.argv`` with ``settled``
#: spied on: whether the collector was on, and how many collections had run since the
#: script began, when the command said its start-up was done; then the collector's state.
SETTLE_SPY = """
import gc, sys
import gateway.start as start
real = start.settled
def spy(**kw):
    ran = sum(s["collections"] for s in gc.get_stats()) - before
    print("start-up:", gc.isenabled(), ran, file=sys.stderr)
    real(**kw)
    print("settled:", gc.isenabled(), gc.get_freeze_count(), file=sys.stderr)
start.settled = spy
before = sum(s["collections"] for s in gc.get_stats())
start.script()
"""


def _settling(stderr: str) -> list[list[str]]:
    return [line.split()[1:] for line in stderr.splitlines()
            if line.startswith(("start-up:", "settled:"))]


def test_the_console_script_starts_up_without_the_cyclic_collector(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """~600 modules are imported with the collector off (it walked them ~150 times, 60-75
    ms of a run): no collection until the command settles, then it is on again with what
    start-up made frozen out of its walks."""
    import os

    from agent_core.models.replay import Reply

    with scripted_model(monkeypatch, tmp_path, [Reply("Hi.")]):
        given = {k: v for k, v in os.environ.items() if k.startswith(("LLM_", "HERMES_"))}
        out = _script("import sys\nsys.argv = ['hermes-gateway', 'run', '--task', 'hi']\n"
                      + SETTLE_SPY, **given)
    assert out.returncode == 0 and "Hi." in out.stdout, out.stderr
    [(off, ran), (on, frozen)] = _settling(out.stderr)
    assert (off, ran, on) == ("False", "0", "True")
    assert int(frozen) > 50_000, "the runtime's start-up frozen"
    # A command that does not settle itself does at its settings (collecting first).
    out = _script("import sys\nsys.argv = ['hermes-gateway', 'tools', '--json']\n"
                  + SETTLE_SPY)
    assert out.returncode == 0 and json.loads(out.stdout), out.stderr
    [(off, ran), (on, frozen)] = _settling(out.stderr)
    assert (off, ran, on) == ("False", "0", "True") and int(frozen) > 20_000


def test_settling_leaves_a_collector_it_did_not_turn_off_as_it_was() -> None:
    import gc

    from gateway.start import settled

    frozen = gc.get_freeze_count()
    settled()  # main() called in this process (as here): the tests' collector stays theirs
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_the_console_script_ends_without_teardown_but_runs_exit_handlers() -> None:
    """``script()`` skips the interpreter's teardown (os._exit) after the exit handlers ran
    and the output was flushed: the whole JSON of ``tools --json`` arrives, the handler's
    line comes after it, and the exit code is main's."""
    out = _script("import atexit, sys\nfrom gateway import cli\n"
                  "atexit.register(lambda: print('exit handler ran'))\n"
                  "sys.argv = ['hermes-gateway', 'tools', '--json']\ncli.script()")
    assert out.returncode == 0, out.stderr
    body, _, tail = out.stdout.rpartition("exit handler ran")
    assert tail.strip() == "" and json.loads(body)
    refused = _script("import sys\nfrom gateway import cli\n"
                      "sys.argv = ['hermes-gateway', 'run', '--task', 'hi']\ncli.script()")
    assert refused.returncode == 2 and "LLM_PROVIDER" in refused.stderr


def test_the_console_script_waits_for_a_thread_still_working() -> None:
    out = _script("import sys, threading, time\nfrom gateway import cli\n"
                  "done, real = threading.Event(), cli.main\n"
                  "def main():\n    try:\n        return real()\n    finally:\n"
                  "        done.set()\n"
                  "cli.main = main\n"
                  "def late():  # still at work when the command has returned\n"
                  "    done.wait()\n    time.sleep(0.3)\n    print('thread finished', flush=True)\n"
                  "threading.Thread(target=late).start()\n"
                  "sys.argv = ['hermes-gateway', 'tools', '--json']\ncli.script()")
    assert out.returncode == 0 and out.stdout.rstrip().endswith("thread finished"), out


def test_a_run_that_cannot_build_its_tools_leaves_no_store_server_running(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    with scripted_model(monkeypatch, tmp_path, []):
        monkeypatch.setenv("HERMES_TOOLS", "tools.no_such_module")
        assert main(["run", "--task", "hello"]) == 2
    assert "tools.no_such_module" in capsys.readouterr().err
    assert (tmp_path / "valkey" / "valkey.log").is_file(), "the server had been started"
    assert not (tmp_path / "valkey" / "server.json").exists(), "and was stopped"


def test_a_serving_process_collects_young_cycles_less_often_but_still_does() -> None:
    import gc
    import weakref

    from gateway.start import SERVING_THRESHOLD, settled

    class Node:
        other: Any = None

    was = gc.get_threshold()
    try:
        settled(serving=True)
        assert gc.get_threshold() == (SERVING_THRESHOLD, *was[1:])
        gc.collect()
        freed: list[int] = []
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        weakref.finalize(a, freed.append, 1)
        del a, b
        keep = [Node() for _ in range(SERVING_THRESHOLD // 2)]
        assert not freed, "half the threshold allocated: not collected yet"
        keep += [Node() for _ in range(SERVING_THRESHOLD)]
        assert freed == [1], "past the threshold, the cycle was collected by itself"
        del keep
    finally:
        gc.set_threshold(*was)

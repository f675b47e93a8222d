"""``hermes-gateway serve`` as people start it: its own process, its own embedded Valkey, on
each event loop it can run on, alone or as several processes sharing the port; signed
messages in, the answers at the callback, a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from adapters.webhook import signed_headers
from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.store.embedded import free_port
from tests.integration.conftest import answer_echo

ROOT = Path(__file__).resolve().parents[2]
SECRET = "serve-secret"


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a Prometheus exposition, by name and sorted labels."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


class Serve:
    """A ``hermes-gateway serve`` process with a scripted model."""

    def __init__(self, tmp_path: Path, model: ReplayModelServer, *args: str,
                 **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.data = tmp_path
        self.log = tmp_path / "serve.log"
        environment = {
            **os.environ, "HERMES_DATA_DIR": str(tmp_path), "LLM_PROVIDER": "openai",
            "LLM_MODEL_NAME": "scripted", "LLM_BASE_URL": model.openai_url,
            "LLM_API_KEY": "sk-test-0123456789abcdef", "REDIS_URL": "",
            "HERMES_WEBHOOK_SECRETS": json.dumps({"crm": SECRET}),
            "HERMES_WEBHOOK_CALLBACK_HOSTS": "127.0.0.1",
            "SLACK_BOT_TOKEN": "", "TELEGRAM_BOT_TOKEN": "", "LOG_LEVEL": "INFO", **env}
        with self.log.open("wb") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--port", str(self.port), *args],
                env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=errors)

    async def ready(self, http: aiohttp.ClientSession) -> None:
        for _ in range(300):
            assert self.process.poll() is None, self.log.read_text()
            try:
                async with http.get(f"{self.base}/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        pytest.fail("serve did not become ready:\n" + self.log.read_text())

    @property
    def auth(self) -> dict[str, str]:
        """The API's header: the local token this gateway made in its data directory."""
        return {"Authorization": f"Bearer {(self.data / 'local-token').read_text().strip()}"}

    async def send(self, conversation: str, text: str, callback: str) -> None:
        body = json.dumps({"conversation_id": conversation, "user_id": "u1", "text": text,
                           "callback_url": callback}).encode()
        async with aiohttp.ClientSession() as fresh, fresh.post(
                f"{self.base}/webhook/crm", data=body,
                headers=signed_headers(SECRET, body)) as r:
            assert r.status == 202, await r.text()

    async def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.process.wait, 40)

    def kill(self) -> None:
        """Kill it if it still runs (a failed test), and the store it started, which a
        killed gateway leaves running for the next start to reuse."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
            state = self.data / "valkey" / "server.json"
            with contextlib.suppress(OSError, ValueError, KeyError):
                os.kill(int(json.loads(state.read_text())["pid"]), signal.SIGKILL)


async def answers(callback_server: dict[str, Any], count: int) -> list[str]:
    for _ in range(400):
        if len(callback_server["received"]) >= count:
            break
        await asyncio.sleep(0.05)
    return sorted(p["text"] for _, _, p in callback_server["received"])


@pytest.fixture
async def model() -> Any:
    server = ReplayModelServer(responder=answer_echo)
    await server.start()
    yield server
    await server.stop()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
async def test_serve_answers_a_webhook_message_and_stops_cleanly(
        event_loop: str, tmp_path: Path, model: ReplayModelServer,
        callback_server: dict[str, Any]) -> None:
    if event_loop == "uvloop":
        pytest.importorskip("uvloop")
    gateway = Serve(tmp_path, model, HERMES_EVENT_LOOP=event_loop)
    try:
        async with aiohttp.ClientSession() as http:
            await gateway.ready(http)
        await gateway.send("t1", "ping?", callback_server["url"])
        assert await answers(callback_server, 1) == ["answer to: ping?"], \
            gateway.log.read_text()
        assert await gateway.stop() == 0, gateway.log.read_text()
    finally:
        gateway.kill()
    text = gateway.log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text
    assert not (tmp_path / "valkey" / "server.json").exists(), "its Valkey was stopped too"


@pytest.mark.timeout(120)
async def test_several_processes_share_the_port_and_stop_together(
        tmp_path: Path, model: ReplayModelServer, callback_server: dict[str, Any]) -> None:
    # With the hub on: the parent starts the embedded nats-server, the child reuses it.
    gateway = Serve(tmp_path, model, "--processes", "2", HERMES_HUB="true")
    try:
        async with aiohttp.ClientSession() as http:
            await gateway.ready(http)
        pids, hubs = set(), set()
        for _ in range(40):  # fresh connections: the kernel spreads them over both
            async with aiohttp.ClientSession() as fresh, \
                    fresh.get(f"{gateway.base}/healthz") as r:
                pids.add((await r.json())["pid"])
            async with aiohttp.ClientSession() as fresh, \
                    fresh.get(f"{gateway.base}/agent/status", headers=gateway.auth) as r:
                hubs.add((await r.json())["hub"])
        assert len(pids) == 2 and gateway.process.pid in pids, pids
        assert hubs == {"connected"}, hubs
        await asyncio.gather(*(gateway.send(f"c{n}", f"m{n}", callback_server["url"])
                               for n in range(20)))
        assert await answers(callback_server, 20) == sorted(
            f"answer to: m{n}" for n in range(20)), gateway.log.read_text()
        scraped = set()
        for _ in range(10):  # whichever process answers the scrape counts both
            async with aiohttp.ClientSession() as fresh, \
                    fresh.get(f"{gateway.base}/metrics", headers=gateway.auth) as r:
                samples = parse_metrics(await r.text())
            scraped.add((samples[("hermes_inbound_messages_total",
                                  (("channel", "webhook"), ("status", "queued")))],
                         samples[("hermes_tasks_total", (("outcome", "answered"),))]))
        assert scraped == {(20.0, 20.0)}, scraped
        assert await gateway.stop() == 0, gateway.log.read_text()
    finally:
        gateway.kill()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or \
            "zombie" in Path(f"/proc/{pid}/status").read_text(), f"process {pid} still runs"
    text = gateway.log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text
    assert not (tmp_path / "valkey" / "server.json").exists(), "the store stopped last"
    assert not (tmp_path / "nats" / "server.json").exists(), "and the nats-server with it"


@pytest.mark.timeout(120)
async def test_each_process_keeps_its_live_gauges_current_between_scrapes(
        tmp_path: Path, callback_server: dict[str, Any]) -> None:
    # A scrape sums every process's file, so each process's share must be current even
    # when another process answers the scrape; here nobody scrapes at all.
    model = ReplayModelServer([Reply("done", delay=5.0)], responder=answer_echo)
    await model.start()
    gateway = Serve(tmp_path, model, "--processes", "2")

    def sample(name: str, **labels: str) -> float:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(tmp_path / "metrics" / str(gateway.port)))
        return registry.get_sample_value(name, labels) or 0.0

    def active() -> float:
        return sample("hermes_active_conversations")

    async def until(value: float, read: Callable[[], float] = active) -> None:
        for _ in range(300):
            if read() == value:
                return
            await asyncio.sleep(0.05)
        pytest.fail(f"never read {value}: {read()}")

    try:
        async with aiohttp.ClientSession() as http:
            await gateway.ready(http)
        await gateway.send("held", "take your time", callback_server["url"])
        await until(1.0)  # while the model takes its 5 s
        # The request itself, counted in the process's file within a second or so.
        await until(1.0, lambda: sample("hermes_http_requests_total", route="/webhook/{source}",
                                        method="POST", status="202"))
        assert await answers(callback_server, 1) == ["done"]
        await until(0.0)
        assert await gateway.stop() == 0, gateway.log.read_text()
    finally:
        gateway.kill()
        await model.stop()


@pytest.mark.timeout(90)
async def test_a_child_stops_when_its_parent_is_killed(
        tmp_path: Path, model: ReplayModelServer) -> None:
    gateway = Serve(tmp_path, model, "--processes", "2")
    child = None
    try:
        async with aiohttp.ClientSession() as http:
            await gateway.ready(http)
            for _ in range(40):
                async with aiohttp.ClientSession() as fresh, \
                        fresh.get(f"{gateway.base}/healthz") as r:
                    pid = (await r.json())["pid"]
                if pid != gateway.process.pid:
                    child = pid
                    break
        assert child is not None
        gateway.process.kill()
        gateway.process.wait()
        for _ in range(100):
            if not Path(f"/proc/{child}").exists():
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"the child {child} outlived its parent")
    finally:
        gateway.kill()
        state = tmp_path / "valkey" / "server.json"
        if state.exists():  # the store outlives a killed parent, as with one process
            os.kill(json.loads(state.read_text())["pid"], signal.SIGTERM)


async def _run_on_a_child(gateway: Serve, body: dict[str, str]
                          ) -> tuple[int, asyncio.Task[Any], aiohttp.ClientSession]:
    """Start a synchronous run on a connection a child serves (the run starts there); its
    pid, the request's task and its session."""
    for _ in range(40):
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        async with http.get(f"{gateway.base}/healthz") as r:  # the connection stays open
            pid = (await r.json())["pid"]
        if pid != gateway.process.pid:
            run = asyncio.create_task(http.post(f"{gateway.base}/agent/run", json=body,
                                                headers=gateway.auth))
            return pid, run, http
        await http.close()
    pytest.fail("no connection reached the child")


@pytest.mark.timeout(150)
async def test_a_child_that_dies_is_started_again_and_its_work_finished_by_the_others(
        tmp_path: Path) -> None:
    calls: list[str] = []

    def first_call_held(path: str, body: dict[str, Any]) -> Reply:
        reply = answer_echo(path, body)
        calls.append(reply.text)
        return Reply(reply.text, delay=60.0 if len(calls) == 1 else 0.0)

    model = ReplayModelServer(responder=first_call_held)
    await model.start()
    gateway = Serve(tmp_path, model, "--processes", "2", HERMES_LEASE_SECONDS="3")
    files = tmp_path / "metrics" / str(gateway.port)

    def active() -> float:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(files))
        return registry.get_sample_value("hermes_active_conversations") or 0.0

    async def until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
        for _ in range(600):
            if await check():
                return
            await asyncio.sleep(0.05)
        pytest.fail(f"never {what}:\n" + gateway.log.read_text())

    async def pids() -> set[int]:
        seen = set()
        for _ in range(10):
            async with aiohttp.ClientSession() as fresh, \
                    fresh.get(f"{gateway.base}/healthz") as r:
                seen.add((await r.json())["pid"])
        return seen

    async def answered() -> bool:
        async with aiohttp.ClientSession() as fresh, fresh.get(
                f"{gateway.base}/agent/conversations/api:local:held/messages",
                headers=gateway.auth) as r:
            messages = (await r.json())["messages"]
        return [m["text"] for m in messages if m["role"] == "assistant"] == \
            ["answer to: hold on"]

    http = None
    try:
        async with aiohttp.ClientSession() as probe:
            await gateway.ready(probe)
        child, run, http = await _run_on_a_child(
            gateway, {"text": "hold on", "conversation_id": "held"})

        async def in_the_model() -> bool:
            return calls == ["answer to: hold on"] and active() == 1.0

        await until("the child's task reached the model", in_the_model)
        os.kill(child, signal.SIGKILL)
        with pytest.raises(aiohttp.ClientError):
            await run  # the process that ran it is gone
        await http.close()

        async def replaced() -> bool:
            serving = await pids()
            return len(serving) == 2 and child not in serving

        await until("replaced the child", replaced)
        await until("answered the conversation elsewhere", answered)
        assert calls == ["answer to: hold on"] * 2  # taken up once, when its lease ran out

        async def idle() -> bool:  # the dead child's share is out of the sum
            return active() == 0.0

        await until("counted no active conversation", idle)
        assert await gateway.stop() == 0, gateway.log.read_text()
    finally:
        if http is not None:
            await http.close()
        gateway.kill()
        await model.stop()
    text = gateway.log.read_text()
    assert f"serving process {child} was killed by signal 9; starting another in 1 s" in text
    assert "Traceback" not in text and "ERROR" not in text, text


@pytest.mark.parametrize("processes", ["1", "2"])
def test_serve_refuses_a_port_already_taken_before_anything_starts(
        tmp_path: Path, processes: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port),
             "--processes", processes], env={**os.environ, "HERMES_DATA_DIR": str(tmp_path)},
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert f"cannot serve on 127.0.0.1:{port}" in done.stderr
    assert "gateway ready" not in done.stderr + done.stdout
    assert not (tmp_path / "valkey").exists(), "no store was started for a gateway that " \
                                               "cannot serve"


def test_a_port_whose_last_connections_wait_out_time_wait_is_free(tmp_path: Path) -> None:
    """A gateway stopped a moment ago leaves its closed connections in TIME_WAIT; the port
    is still free to serve on at once (as asyncio's own bind with SO_REUSEADDR sees it)."""
    from gateway.processes import check_port_free

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server closes first: its side waits in TIME_WAIT
        client.recv(1)
        client.close()
    check_port_free("127.0.0.1", port)


#: ``hermes-gateway`` with a garbage collection at exit: an object left unclosed (an aiohttp
#: session) is then always found and reported, whatever order the interpreter tears down in.
EXIT_COLLECTED = ("import atexit, gc, runpy, sys; atexit.register(gc.collect); "
                  "sys.argv[0] = 'hermes-gateway'; "
                  "runpy.run_module('gateway.cli', run_name='__main__')")


def test_a_channel_that_cannot_start_leaves_no_session_open(tmp_path: Path) -> None:
    """Telegram's bot opens its HTTP sessions, then asks getMe; when that fails the gateway
    does not start, and the sessions it opened are closed, not reported unclosed at exit.
    Whether the interpreter's own teardown gets to a leaked session (and reports it)
    depends on the order it tears things down in; a collection at exit always does, so
    the process runs ``serve`` with one (``EXIT_COLLECTED``)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-c", EXIT_COLLECTED, "serve", "--port", str(port)],
        env={**os.environ, "HERMES_DATA_DIR": str(tmp_path),
             "TELEGRAM_BOT_TOKEN": "123456789:AAbbccddeeffgghhiijjkkllmmnnooppqqr",
             "TELEGRAM_API_URL": f"http://127.0.0.1:{nobody}"},
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "Cannot connect to host" in done.stderr, done.stderr[-2000:]
    assert "Unclosed client session" not in done.stderr, done.stderr[-2000:]


async def test_a_telegram_token_refused_at_start_is_named_never_printed(tmp_path: Path) -> None:
    """Telegram answers getMe 401 for a wrong token; python-telegram-bot's error quotes the
    token, and serve used to print it in a traceback. It says which setting to check."""
    from tests.standins.telegram_api import TelegramAPI

    api = TelegramAPI("987654321:the-token-the-stand-in-knows-0123456789")
    await api.start()
    token = "123456789:AAbbccddeeffgghhiijjkkllmmnnooppqqr"
    try:
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "gateway.cli", "serve", "--port",
                             str(free_port())],
            env={**os.environ, "HERMES_DATA_DIR": str(tmp_path), "TELEGRAM_BOT_TOKEN": token,
                 "TELEGRAM_API_URL": api.url},
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    finally:
        await api.stop()
    assert done.returncode == 2
    assert "Telegram refused TELEGRAM_BOT_TOKEN" in done.stderr, done.stderr[-2000:]
    assert "AAbbccddeeffgghhiijjkkllmmnnooppqqr" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr

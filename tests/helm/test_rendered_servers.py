"""The chart's configuration, run for real: the bundled NATS's nats.conf under a real
nats-server, Valkey's valkey.conf under a real valkey-server, and an agent pod's process
started as its container is (its arguments, its environment), reading only the secret
files its pod mounts, laid out as the kubelet lays out a mounted Secret. The one thing
changed is the cluster's names: the NATS and Valkey Services become 127.0.0.1 and the
test's ports (and the servers' listen addresses and data directories follow)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.store import connect
from agent_core.store.embedded import binary_path as valkey_binary
from agent_core.store.embedded import free_port
from hub import Bus, HubSettings, TaskRequest
from hub.connection import open_connection
from hub.errors import HubUnreachable
from hub.server import binary_path as nats_binary

from .chart import by_kind, env_of, mounted_files, pod_spec, render
from .conftest import CHART

MODEL_KEY = "sk-the-agents-model-key"
SLACK_TOKEN = "xoxb-the-gateways-alone"
HUB = ["-f", str(CHART / "examples" / "hub.yaml"), "--set-string",
       f"secrets.LLM_API_KEY={MODEL_KEY}", "--set-string", f"secrets.SLACK_BOT_TOKEN={SLACK_TOKEN}"]


def _lay_out(root: Path, files: dict[str, dict[str, str]]) -> dict[str, Path]:
    """Each mount path's files under ``root`` as the kubelet writes a Secret volume: the
    files in a timestamped folder, ``..data`` linking to it, each name linking through it."""
    where: dict[str, Path] = {}
    for mount, content in files.items():
        target = root / mount.strip("/").replace("/", "_")
        real = target / "..2024_05_01_00_00_00.000000001"
        real.mkdir(parents=True)
        for name, value in content.items():
            (real / name).write_text(value)
            (target / name).symlink_to(f"..data/{name}")
        (target / "..data").symlink_to(real.name)
        where[mount] = target
    return where


async def _started(*args: str, ready: str, stderr_log: list[str]
                   ) -> asyncio.subprocess.Process:
    """A server process, once its log says ``ready`` (its log lines kept)."""
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert process.stdout is not None
    async with asyncio.timeout(30):
        while not any(ready in line for line in stderr_log):
            line = await process.stdout.readline()
            assert line, f"{args[0]} exited: {''.join(stderr_log)}"
            stderr_log.append(line.decode())
    return process


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            async with asyncio.timeout(30):
                await process.communicate()


@pytest.fixture
async def chart_nats(helm: Path, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The hub example rendered, its NATS running on the chart's nats.conf."""
    docs = render(helm, *HUB)
    config = mounted_files(docs, "rel-hermes-gateway-nats")["/etc/nats/hermes"]["nats.conf"]
    assert 'store_dir: "/data"' in config
    (tmp_path / "nats.conf").write_text(
        config.replace('store_dir: "/data"', f'store_dir: "{tmp_path / "jetstream"}"'))
    port, monitor = free_port(), free_port()
    log: list[str] = []
    server = await _started(str(nats_binary()), "-c", str(tmp_path / "nats.conf"),
                            "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor),
                            ready="Server is ready", stderr_log=log)
    try:
        yield {"docs": docs, "port": port, "monitor": monitor, "log": log}
    finally:
        await _stop(server)


def _settings(url: str, data: Path) -> HubSettings:
    return HubSettings(_env_file=None, nats_url=url, hermes_data_dir=data)  # type: ignore[call-arg]


def _here(url: str, port: int) -> str:
    """A NATS_URL of the chart with the Service's name swapped for the test's server."""
    return url.replace("rel-hermes-gateway-nats:4222", f"127.0.0.1:{port}")


async def test_the_bundled_nats_admits_each_workload_as_itself_and_no_one_else(
        chart_nats: dict[str, Any], tmp_path: Path) -> None:
    docs, port = chart_nats["docs"], chart_nats["port"]
    log = "".join(chart_nats["log"])
    # Monitoring listens on the loopback only (the config's http), JetStream is on.
    assert re.search(rf"http monitor on 127\.0\.0\.1:{chart_nats['monitor']}", log), log
    assert "JetStream" in log
    urls = {name: mounted_files(docs, name, {"summarizer-model-key": {}})[
        "/etc/hermes/secrets/chart"]["NATS_URL"] for name in (
        "rel-hermes-gateway", "rel-hermes-gateway-hub", "rel-hermes-gateway-agent-validator")}
    for url in urls.values():
        nc, _ = await open_connection(_settings(_here(url, port), tmp_path))
        await nc.close()
    # Without credentials, as another workload with a guessed password, or as one
    # workload with another's password: refused.
    validator = re.match(r"nats://([^:]+):([^@]+)@", urls["rel-hermes-gateway-agent-validator"])
    assert validator is not None
    for attempt in (f"nats://127.0.0.1:{port}",
                    f"nats://gateway:{validator.group(2)}@127.0.0.1:{port}",
                    f"nats://{validator.group(2)}@127.0.0.1:{port}"):
        with pytest.raises(HubUnreachable, match="Authorization"):
            await open_connection(_settings(attempt, tmp_path))


async def test_an_agent_pod_runs_from_the_files_it_mounts(
        chart_nats: dict[str, Any], tmp_path: Path) -> None:
    """The validator agent, started as its container is, finds its NATS user and the
    model's key in its mounted files (nothing secret in its environment) and answers
    a request the gateway sends on the bus as itself."""
    docs, port = chart_nats["docs"], chart_nats["port"]
    name = "rel-hermes-gateway-agent-validator"
    container = pod_spec(by_kind(docs, "Deployment")[name])["containers"][0]
    files = mounted_files(docs, name)
    assert SLACK_TOKEN not in str(files)
    files["/etc/hermes/secrets/chart"]["NATS_URL"] = _here(
        files["/etc/hermes/secrets/chart"]["NATS_URL"], port)
    where = _lay_out(tmp_path / "mounts", files)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "HERMES_", "NATS_", "HUB_", "REDIS_", "SLACK_",
                                "TELEGRAM_"))}
    for var, spec in env_of(container).items():
        assert "valueFrom" not in spec, var
        env[var] = spec["value"]
    env["HERMES_SECRETS_DIR"] = ":".join(
        str(where[d]) for d in env["HERMES_SECRETS_DIR"].split(":"))
    env["HERMES_DATA_DIR"] = str(tmp_path / "data")
    asked: list[str] = []

    def answer(path: str, body: dict[str, Any]) -> Reply:
        asked.append(body["model"])
        return Reply("claim C-7 lacks the invoice")

    async with ReplayModelServer(responder=answer) as model:
        env["LLM_BASE_URL"] = model.openai_url  # the model API, wherever it is
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.cli", *container["args"], env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        gateway_url = mounted_files(docs, "rel-hermes-gateway")[
            "/etc/hermes/secrets/chart"]["NATS_URL"]
        bus = await Bus.connect(_settings(_here(gateway_url, port), tmp_path / "gateway"))
        try:
            response = await bus.request("validator", TaskRequest(
                sender_id="gateway", intent="validate_claim", deadline_ms=40_000,
                arguments={"text": "is claim C-7 complete?"}))
        finally:
            await bus.close()
            agent.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(agent.communicate(), 30)
    assert response.status == "success", (response, err.decode()[-2000:])
    assert response.result["answer"] == "claim C-7 lacks the invoice"
    assert asked == ["gpt-4o-mini"]  # the chart's LLM_MODEL_NAME
    assert model.authorizations == [f"Bearer {MODEL_KEY}"]  # the key from its file
    assert agent.returncode == 0


async def test_the_bundled_valkey_takes_its_password_from_the_config_file(
        helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "--set", "image.repository=r/x")
    config = mounted_files(docs, "rel-hermes-gateway-valkey")["/etc/valkey"]["valkey.conf"]
    (tmp_path / "valkey.conf").write_text(config)
    port = free_port()
    args = pod_spec(by_kind(docs, "StatefulSet")["rel-hermes-gateway-valkey"])[
        "containers"][0]["args"]
    assert args[1] == "/etc/valkey/valkey.conf"
    log: list[str] = []
    server = await _started(str(valkey_binary()), str(tmp_path / "valkey.conf"),
                            *(a.replace("/data", str(tmp_path)) for a in args[2:]),
                            "--port", str(port), "--bind", "127.0.0.1",
                            ready="Ready to accept connections", stderr_log=log)
    try:
        url = mounted_files(docs, "rel-hermes-gateway")["/etc/hermes/secrets/chart"][
            "REDIS_URL"].replace("rel-hermes-gateway-valkey:6379", f"127.0.0.1:{port}")
        client = connect(url)
        assert await client.ping()
        await client.aclose()
        stranger = connect(f"redis://127.0.0.1:{port}/0")
        with pytest.raises(Exception, match=r"(?i)auth"):
            await stranger.ping()
        await stranger.aclose()
    finally:
        await _stop(server)

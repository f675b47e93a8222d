"""``hermes-gateway hub`` and ``hermes-gateway agent`` as processes on a real nats-server:
the services and an agent start, ``hub status`` lists the agent, a request is answered
(without a model, with the settings to set), and SIGTERM stops both cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_core.models.replay import ReplayModelServer, Reply
from hub import TaskRequest
from hub.enrolment import Enrolment
from tests.conftest import NatsServer
from tests.hub.conftest import BusFactory, unique


async def cli(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


def environment(nats: NatsServer, tmp_path: Path, identity: str = "hub",
                **more: str) -> dict[str, str]:
    """A process's environment: NATS_URL and the credentials of ``identity``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "HERMES_", "NATS_", "HUB_"))}
    env.update(NATS_URL=nats.url, NATS_CREDS_FILE=nats.creds(identity),
               HERMES_DATA_DIR=str(tmp_path), **more)
    return env


async def test_hub_and_agent_commands_serve_status_and_stop(
        nats: NatsServer, tmp_path: Path, make_bus: BusFactory) -> None:
    env = environment(nats, tmp_path)
    agent_id = unique("cli-agent")
    services = await cli("hub", env=env)
    agent = await cli("agent", "--id", agent_id, "--capabilities", "cli_check",
                      env=environment(nats, tmp_path, agent_id))
    try:
        listed = ""
        async with asyncio.timeout(40):
            while agent_id not in listed:
                status = await cli("hub", "status", env=env)
                out, _ = await status.communicate()
                listed = out.decode()
                await asyncio.sleep(0.2)
        assert "stream HMP_TASKS" in listed and "offers cli_check" in listed
        bus = await make_bus()
        response = await bus.request(agent_id, TaskRequest(
            sender_id=unique("caller"), intent="cli_check", deadline_ms=20_000,
            arguments={"text": "hello"}))
        assert response.status == "failed" and response.error_code == "NOT_CONFIGURED"
        assert "LLM_PROVIDER" in response.result["error"]
    finally:
        for process in (agent, services):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(p.wait(), 30) for p in (agent, services)]
    assert codes == [0, 0]


async def test_an_agent_runs_on_a_model_of_its_own(nats: NatsServer, tmp_path: Path,
                                                   make_bus: BusFactory) -> None:
    """--env-file gives the agent its own model settings, --model its own model name: what
    the gateway's .env says does not matter to it."""
    asked: list[str] = []

    def answer(path: str, body: dict[str, Any]) -> Reply:
        asked.append(body["model"])
        return Reply("claim C-7 is valid")

    agent_id = unique("own-model")
    env = environment(nats, tmp_path, agent_id, LLM_PROVIDER="anthropic",
                      LLM_MODEL_NAME="the-gateways-model")
    bus = await make_bus()
    enrolment = Enrolment(bus)  # the hub's core, which makes the agent's consumer
    await enrolment.start()
    async with ReplayModelServer(responder=answer) as server:
        own = tmp_path / "validator.env"
        own.write_text(f"LLM_PROVIDER=openai\nLLM_BASE_URL={server.openai_url}\n"
                       "LLM_API_KEY=validator-key-123\nLLM_MODEL_NAME=from-the-file\n")
        agent = await cli("agent", "--id", agent_id, "--capabilities", "validate_claim",
                          "--env-file", str(own), "--model", "validator-7b", env=env)
        try:
            # The request waits in the stream for the agent to start.
            response = await bus.request(agent_id, TaskRequest(
                sender_id=unique("caller"), intent="validate_claim", deadline_ms=30_000,
                arguments={"text": "is claim C-7 valid?"}))
        finally:
            agent.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(agent.wait(), 30)
            await enrolment.stop()
    assert response.status == "success", response
    assert response.result["answer"] == "claim C-7 is valid"
    assert asked == ["validator-7b"]
    assert code == 0


async def test_an_agent_with_a_missing_env_file_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "NATS_"))}
    agent = await cli("agent", "--id", "a", "--capabilities", "x", "--env-file",
                      str(tmp_path / "nope.env"), env=env)
    _, err = await asyncio.wait_for(agent.communicate(), 60)
    assert agent.returncode == 2
    assert "nope.env: no such file" in err.decode()


async def test_workflows_from_the_command_line(nats: NatsServer, tmp_path: Path,
                                               make_bus: BusFactory) -> None:
    """``hub load`` keeps a file's definitions (refusing a bad one with its step named),
    the services' executor runs one, and ``hub runs``, ``show`` and ``replay <run id>``
    show it."""
    from tests.hub.test_bus import Echo

    env = environment(nats, tmp_path)
    workflow_id = unique("cli-flow")
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"workflow_id: {workflow_id}\nsteps:\n  - id: a\n    capability: x\n"
                   "    input: {q: '$.b.result['}\n")
    refused = await cli("hub", "load", str(bad), env=env)
    _, err = await refused.communicate()
    assert refused.returncode != 0 and "step 'a'" in err.decode() and "JSONPath" in err.decode()
    good = tmp_path / "flow.yaml"
    echo_id = unique("cli-echo")
    good.write_text(f"workflows:\n  - workflow_id: {workflow_id}\n    steps:\n"
                    f"      - id: echo\n        agent: {echo_id}\n        intent: echo\n"
                    "        input: {said: $.input.text}\n")
    loaded = await cli("hub", "load", str(good), env=env)
    out, _ = await loaded.communicate()
    assert loaded.returncode == 0 and f"kept {workflow_id} v1" in out.decode()
    services = await cli("hub", env=env)
    bus = await make_bus()
    from hub import AgentRunner

    runner = AgentRunner(bus, Echo(echo_id))
    await runner.start()
    try:
        request = TaskRequest(sender_id=unique("caller"), intent="run_workflow",
                              deadline_ms=30_000, arguments={"workflow_id": workflow_id,
                                                             "input": {"text": "hi"}})
        response = await bus.request("workflow-executor", request)
        assert response.status == "success", response
        run_id = response.result["run_id"]
        listed = await cli("hub", "runs", env=env)
        out, _ = await listed.communicate()
        assert f"{run_id}: {workflow_id} v1 success" in out.decode()
        shown = await cli("hub", "show", run_id, env=env)
        out, err = await shown.communicate()
        assert shown.returncode == 0, (out + err).decode()[-3000:]
        run = json.loads(out)
        assert run["status"] == "success" and run["steps"][0]["status"] == "success"
        assert run["document"]["echo"]["result"]["echo"] == {"said": "hi"}
        replayed = await cli("hub", "replay", run_id, env=env)
        out, _ = await replayed.communicate()
        kinds = [(line["message"]["type"], line["message"].get("intent"))
                 for line in map(json.loads, out.decode().splitlines())]
        requests = [k for k in kinds if k[0] == "task_request"]
        assert requests == [("task_request", "run_workflow"), ("task_request", "echo")]
        assert kinds[-1][0] in ("task_response", "log_event")
    finally:
        await runner.stop()
        if services.returncode is None:
            services.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(services.wait(), 30) == 0


async def _prompted_over_the_protocol(data: Path, env: dict[str, str], agent_id: str,
                                      url: str) -> None:
    import nats
    from synadia_ai.agents import (
        Agents,
        DiscoverFilter,
        Identity,
        ProtocolError,
        signer_from_creds_file,
    )

    issued = await cli("hub", "credentials", "--protocol", "alice", env=env)
    out, err = await issued.communicate()
    assert issued.returncode == 0, err.decode()[-2000:]
    creds = out.decode().strip()
    assert creds == str(data / "nats" / "creds" / "sap-alice.creds")
    nc = await nats.connect(url, user_credentials=creds, inbox_prefix="_INBOX.sap-alice")
    agents = Agents(nc=nc, identity=Identity(signer=signer_from_creds_file(creds)))
    try:
        async with asyncio.timeout(30):
            while not (found := [a for a in await agents.discover(
                    filter=DiscoverFilter(owner="hermes-hub"))
                    if a.metadata.get("hmp_agent_id") == agent_id]):
                await asyncio.sleep(0.2)
        with pytest.raises(ProtocolError, match="NOT_CONFIGURED"):
            [m async for m in found[0].prompt("hello")]
    finally:
        await agents.close()
        await nc.close()


async def test_the_embedded_server_gives_each_process_an_identity(tmp_path: Path) -> None:
    """No NATS_URL: the hub's first process starts the embedded server in operator mode
    (no shared token), ``hub credentials --agent`` issues an agent's credentials (0600,
    under the data directory), and ``agent --id`` logs in with them and is enrolled."""
    from hub import Bus, HubSettings

    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "HERMES_", "NATS_", "HUB_"))}
    env.update(HERMES_DATA_DIR=str(data), HUB_AGENT_PROTOCOL_SCAN="0.5")
    services = await cli("hub", env=env)
    agent_id = unique("local-agent")
    agent = None
    try:
        assert services.stderr is not None
        async with asyncio.timeout(40):
            while b"are running" not in await services.stderr.readline():
                pass
        issued = await cli("hub", "credentials", "--agent", agent_id, env=env)
        out, err = await issued.communicate()
        assert issued.returncode == 0, err.decode()[-2000:]
        creds = Path(out.decode().strip())
        assert creds == data / "nats" / "creds" / f"{agent_id}.creds"
        assert creds.stat().st_mode & 0o777 == 0o600
        assert (creds.parent.stat().st_mode & 0o777) == 0o700
        config = (data / "nats" / "nats.conf").read_text()
        assert "operator:" in config and "token" not in config
        assert not (data / "nats" / "token").exists()
        agent = await cli("agent", "--id", agent_id, "--capabilities", "cli_check", env=env)
        bus = await Bus.connect(HubSettings(_env_file=None, hermes_data_dir=data))  # type: ignore[call-arg]
        assert bus.nc.connected_url is not None
        url = f"nats://{bus.nc.connected_url.netloc}"
        try:
            response = await bus.request(agent_id, TaskRequest(
                sender_id=unique("caller"), intent="cli_check", deadline_ms=30_000,
                arguments={"text": "hello"}))
        finally:
            await bus.close()
        assert (response.status, response.error_code) == ("failed", "NOT_CONFIGURED")
        # The bridge runs there too (its own identity): a protocol participant whose
        # credentials `hub credentials --protocol` issued finds the agent and prompts it.
        await _prompted_over_the_protocol(data, env, agent_id, url)
    finally:
        for process in (agent, services):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(process.wait(), 30) == 0

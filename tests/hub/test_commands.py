"""``hermes-gateway hub`` and ``hermes-gateway agent`` as processes on a real nats-server:
the services and an agent start, ``hub status`` lists the agent, a request is answered
(without a model, with the settings to set), and SIGTERM stops both cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from hub import TaskRequest
from tests.hub.conftest import BusFactory, unique


async def cli(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def test_hub_and_agent_commands_serve_status_and_stop(
        nats_url: str, tmp_path: Path, make_bus: BusFactory) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "HERMES_", "NATS_", "HUB_"))}
    env.update(NATS_URL=nats_url, HERMES_DATA_DIR=str(tmp_path))
    agent_id = unique("cli-agent")
    services = await cli("hub", env=env)
    agent = await cli("agent", "--id", agent_id, "--capabilities", "cli_check", env=env)
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

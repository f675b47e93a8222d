"""A real nats-server (the pinned embedded one) for the hub's tests, and buses on it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hub import Agent, AgentRunner, Bus, HubSettings
from tests.conftest import NatsServer

BusFactory = Callable[..., Awaitable[Bus]]


@pytest.fixture
async def make_bus(nats: NatsServer, tmp_path: Path) -> AsyncIterator[BusFactory]:
    """Connected buses (settings overridable), as the hub's core unless ``identity`` names
    another (an agent's id, ``schema-admin``); each is closed afterwards."""
    made: list[Bus] = []

    async def factory(*, identity: str = "hub", **overrides: Any) -> Bus:
        settings = HubSettings(_env_file=None, hermes_data_dir=tmp_path,  # type: ignore[call-arg]
                               **{**nats.settings(identity), **overrides})
        bus = await Bus.connect(settings, identity=identity)
        made.append(bus)
        return bus

    yield factory
    for bus in made:
        await bus.close()


RunnerFactory = Callable[[Bus, Agent], Awaitable[AgentRunner]]


@pytest.fixture
async def run_agent() -> AsyncIterator[RunnerFactory]:
    """Started agent runners; each is stopped afterwards."""
    runners: list[AgentRunner] = []

    async def factory(bus: Bus, agent: Agent) -> AgentRunner:
        runner = AgentRunner(bus, agent)
        await runner.start()
        runners.append(runner)
        return runner

    yield factory
    for runner in runners:
        await runner.stop()


def unique(prefix: str) -> str:
    """An agent id of this test's own (streams are shared by the session)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"

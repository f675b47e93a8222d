"""Shared fixtures. Each is a factory that cleans up what it creates."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_core import Event, EventBus, LoopConfig, TaskLoop, ToolExecutor, ToolRegistry
from agent_core.context import EstimateCounter
from agent_core.models import AnthropicModel, ModelAdapter, OllamaModel, OpenAICompatModel
from agent_core.models._http import ModelHTTP
from agent_core.models.replay import ReplayModelServer
from agent_core.store import (
    ConversationStore,
    MemoryConversationStore,
    RedisConversationStore,
    connect,
)
from agent_core.store.embedded import EmbeddedValkey
from agent_core.tools import ApprovalRules, BreakerBoard


@pytest.fixture(autouse=True)
def _no_real_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests talk to loopback only: any other address fails loudly."""
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and self.family in (socket.AF_INET, socket.AF_INET6):
            host = str(address[0])
            if not (host.startswith("127.") or host in ("::1", "localhost")):
                raise OSError(f"test tried to reach the network: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    for var in [k for k in os.environ if k.startswith(("LLM_", "HERMES_", "SLACK_",
                                                        "TELEGRAM_", "AGENT_", "OTEL_"))]:
        monkeypatch.delenv(var)
    yield


@pytest.fixture(scope="session")
def redis_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One Redis-protocol server for the session: TEST_REDIS_URL if set (e.g. Debian's
    redis-server in CI), otherwise the embedded Valkey server the gateway itself uses.
    Its URL as the gateway would use it (a Unix socket, for the embedded one) and over
    TCP."""
    external = os.environ.get("TEST_REDIS_URL")
    if external:
        yield external, external
        return
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey"))
    info = asyncio.run(server.start())
    yield info.url, f"redis://:{info.password}@127.0.0.1:{info.port}/0"
    asyncio.run(server.stop())


@pytest.fixture(scope="session")
def redis_url(redis_urls: tuple[str, str]) -> str:
    return redis_urls[0]


@pytest.fixture(scope="session")
def redis_tcp_url(redis_urls: tuple[str, str]) -> str:
    return redis_urls[1]


StoreFactory = Callable[..., RedisConversationStore]


@pytest.fixture
async def make_store(redis_url: str) -> AsyncIterator[StoreFactory]:
    """Stores with a unique key prefix each; their keys are deleted afterwards."""
    made: list[RedisConversationStore] = []

    def factory(prefix: str | None = None, url: str | None = None,
                cls: type[RedisConversationStore] = RedisConversationStore,
                **options: Any) -> RedisConversationStore:
        store = cls(connect(url or redis_url), prefix=prefix or f"t{uuid.uuid4().hex[:12]}",
                    **options)
        made.append(store)
        return store

    yield factory
    for store in made:
        try:
            keys = [k async for k in store.redis.scan_iter(match=f"{store.keys.prefix}:*")]
            if keys:
                await store.redis.unlink(*keys)
        except Exception:  # a test may have stopped its own server on purpose
            pass
        await store.aclose()


@dataclass(frozen=True)
class NatsServer:
    """The session's nats-server, and the credentials of the identities on it."""

    url: str
    server: Any  # hub.server.EmbeddedNats

    def creds(self, identity: str = "hub") -> str:
        """The credentials ``identity`` logs in with (an agent's id, ``hub`` the core,
        ``schema-admin``), issued on first use."""
        return str(self.server.creds(identity))

    def settings(self, identity: str = "hub") -> dict[str, Any]:
        """NATS_URL and NATS_CREDS_FILE for a process connecting as ``identity``."""
        return {"nats_url": self.url, "nats_creds_file": self.creds(identity)}


@pytest.fixture(scope="session")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One real nats-server with JetStream for the session: the embedded one the hub
    itself starts (from the pinned wheel), in operator mode, with the built-in schemas
    published by the schema admin as its first start does."""
    from hub import HubSettings
    from hub.schemas import publish_builtin_schemas
    from hub.server import EmbeddedNats

    directory = tmp_path_factory.mktemp("nats")
    server = EmbeddedNats(directory)
    info = asyncio.run(server.start())
    hub = NatsServer(info.url, server)
    asyncio.run(publish_builtin_schemas(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=directory, **hub.settings("schema-admin"))))
    yield hub
    asyncio.run(server.stop())


@pytest.fixture(scope="session")
def nats_url(nats: NatsServer) -> str:
    """The session nats-server's URL (each identity logs in with ``nats.creds``)."""
    return nats.url


@pytest.fixture
def hub_env(nats: NatsServer) -> dict[str, Any]:
    """NATS_URL and NATS_CREDS_FILE of the hub's core on the session's server."""
    return nats.settings()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh data directory."""
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
async def model_server() -> AsyncIterator[ReplayModelServer]:
    """A running local model server; script it with .add(...)."""
    async with ReplayModelServer() as server:
        yield server


class SleepRecorder:
    """Records the backoff delays an adapter asks for, without waiting them out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


ModelFactory = Callable[..., ModelAdapter]


@pytest.fixture
async def make_model(model_server: ReplayModelServer, sleeps: SleepRecorder
                     ) -> AsyncIterator[ModelFactory]:
    """Builds real adapters pointed at the local model server."""
    made: list[ModelAdapter] = []

    def factory(provider: str = "openai", *, native_tools: bool = True, max_retries: int = 2,
                timeout: float = 5.0, base_url: str | None = None,
                headers: dict[str, str] | None = None) -> ModelAdapter:
        url = base_url or (model_server.openai_url if provider == "openai"
                           else model_server.root)
        http = ModelHTTP(provider=provider, base_url=url, headers=headers or {},
                         timeout=timeout, max_retries=max_retries, sleep=sleeps)
        cls = {"openai": OpenAICompatModel, "anthropic": AnthropicModel,
               "ollama": OllamaModel}[provider]
        model = cls(http, "test-model", native_tools=native_tools)
        made.append(model)
        return model

    yield factory
    for m in made:
        await m.aclose()


class Recorder:
    """Subscribes to a bus and keeps every event."""

    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        bus.subscribe(self.events.append)

    def types(self) -> list[str]:
        return [str(e.type) for e in self.events]

    def of(self, name: str) -> list[Event]:
        return [e for e in self.events if e.type == name]


@pytest.fixture
def make_loop(make_model: ModelFactory) -> Callable[..., tuple[TaskLoop, Recorder]]:
    """A TaskLoop over a real adapter and the given tools; returns (loop, recorder)."""

    def factory(tools: list[Any], *, provider: str = "openai", store: ConversationStore | None
                = None, model: ModelAdapter | None = None, native_tools: bool = True,
                board: BreakerBoard | None = None, tool_timeout: float = 5.0,
                rules: ApprovalRules | None = None, **config: Any) -> tuple[TaskLoop, Recorder]:
        bus = EventBus()
        executor = ToolExecutor(ToolRegistry(tools), board=board, timeout=tool_timeout,
                                rules=rules)
        loop = TaskLoop(
            model=model or make_model(provider, native_tools=native_tools),
            executor=executor, store=store or MemoryConversationStore(), bus=bus,
            config=LoopConfig(**{"replan_every": 0, **config}), counter=EstimateCounter())
        return loop, Recorder(bus)

    return factory

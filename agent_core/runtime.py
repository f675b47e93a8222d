"""Builds the agent runtime (model, tools, store, loop) from settings: what the gateway,
the CLI and every hub agent run their tasks on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .budget.base import Budget
from .context import counter_for
from .context.compressor import ContextCompressor, ModelSummariser
from .errors import ConfigError
from .events import EventBus
from .loop import Compressor, LoopConfig, TaskLoop
from .models import (
    ModelAdapter,
    ModelRequest,
    ModelResponse,
    build_adapter,
    build_model,
)
from .settings import Settings, missing_model_message
from .store import ConversationStore
from .tools import ApprovalRules, AuditSink, BreakerBoard, ToolExecutor, ToolRegistry

if TYPE_CHECKING:
    from .mcp import McpServers


class UnconfiguredModel(ModelAdapter):
    """Stands in until a model is configured; the gateway answers with set-up steps."""

    name = "not-configured"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ConfigError(missing_model_message())


@dataclass
class Runtime:
    """Everything a task needs, built once per process."""

    settings: Settings
    model: ModelAdapter
    registry: ToolRegistry
    executor: ToolExecutor
    store: ConversationStore
    bus: EventBus
    loop: TaskLoop
    #: The MCP servers whose tools are in ``registry`` (after ``start_mcp``).
    mcp: McpServers | None = None

    async def aclose(self) -> None:
        """Disconnect the MCP servers, close the model's connections and the store."""
        if self.mcp is not None:
            await self.mcp.aclose()
        await self.bus.drain()
        await self.close_models()
        await self.store.aclose()

    async def close_models(self) -> None:
        """Close the connections of the model and of the context summariser's model."""
        await self.model.aclose()
        if isinstance(self.loop.compressor, ModelSummariser):
            await self.loop.compressor.model.aclose()


async def start_mcp(runtime: Runtime) -> McpServers | None:
    """Connect the MCP servers of HERMES_MCP_SERVERS and add their tools to the runtime's
    registry (none configured: nothing is imported). A server that cannot start does not
    fail this: it is retried in the background."""
    servers = runtime.settings.hermes_mcp_servers
    if not servers or runtime.mcp is not None:
        return runtime.mcp
    from .mcp import McpServers

    runtime.mcp = McpServers(servers, runtime.registry,
                             data_dir=runtime.settings.hermes_data_dir)
    await runtime.mcp.start()
    return runtime.mcp


def build_registry(settings: Settings) -> ToolRegistry:
    """The tools named by HERMES_TOOLS."""
    return ToolRegistry.from_modules(settings.hermes_tools)


def build_executor(settings: Settings, registry: ToolRegistry, *,
                   audit: AuditSink | None = None) -> ToolExecutor:
    """The policy chain every tool call of ``registry`` goes through (permissions,
    approvals, argument schemas, breaker, retries, timeout)."""
    board = BreakerBoard(failures=settings.tool_breaker_failures,
                         window=settings.tool_breaker_window,
                         cooldown=settings.tool_breaker_cooldown)
    rules = ApprovalRules(writes_need_approval=settings.hermes_writes_need_approval,
                          skip_roles=frozenset(settings.hermes_approval_skip_roles),
                          skip_tools=frozenset(settings.hermes_approval_skip_tools),
                          egress_allow=frozenset(h.lower() for h in settings.hermes_fetch_allow),
                          egress_after_private=settings.hermes_egress_after_private)
    return ToolExecutor(registry, board=board, timeout=settings.tool_timeout, rules=rules,
                        audit=audit)


def build_runtime(
    settings: Settings,
    *,
    store: ConversationStore,
    model: ModelAdapter | None = None,
    registry: ToolRegistry | None = None,
    bus: EventBus | None = None,
    audit: AuditSink | None = None,
    on_store_outage: Literal["fail", "raise"] = "fail",
    budget: Budget | None = None,
) -> Runtime:
    """Wire model, tools, store and loop together (``on_store_outage``: see LoopConfig;
    ``budget``: what each model call is reserved against)."""
    registry = registry if registry is not None else build_registry(settings)
    executor = build_executor(settings, registry, audit=audit)
    model = model if model is not None else build_model(settings)
    bus = bus or EventBus()
    counter = counter_for(settings.llm_provider)
    compressor: Compressor = ContextCompressor(counter)
    if settings.context_summary_model is not None:
        compressor = ModelSummariser(build_adapter(settings.context_summary_model, settings),
                                     fallback=ContextCompressor(counter))
    loop = TaskLoop(model=model, executor=executor, store=store, bus=bus,
                    config=LoopConfig.from_settings(settings, on_store_outage=on_store_outage),
                    counter=counter,
                    compressor=compressor, budget=budget)
    return Runtime(settings, model, registry, executor, store, bus, loop)

"""What the gateway's start wires together beside its parts: the hub and what it offers
(delegation, workflows), the schedules file, callbacks that tell several listeners, and
the figures a process reports to the console."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.base import InboundMessage, Routed
from agent_core import ConfigError
from agent_core.runtime import Runtime
from agent_core.store import ConversationStore
from agent_core.tools import Delegation

from .queue import WorkQueue
from .scheduler import Scheduler
from .settings import GatewaySettings
from .worker import WorkerPool

if TYPE_CHECKING:
    from hub import Bus
    from hub.workflows.store import WorkflowStore

    from .service import Gateway

log = logging.getLogger(__name__)


async def start_hub(settings: GatewaySettings, stack: contextlib.AsyncExitStack,
                    store: ConversationStore, gateway: Gateway | None = None) -> Bus:
    """The hub's bus, with its services (discovery, the deadline watch, contexts, tools,
    the bridges) in this process; other copies of them may run elsewhere (``hermes-gateway
    hub``). ``gateway``: its own agent is a Synadia Agent Protocol agent too. Imported only
    when HERMES_HUB is on."""
    from hub import Bus
    from hub.services import start_services

    from .sap_agent import GatewayAgent

    bus = await Bus.connect(settings)
    stack.push_async_callback(bus.close)
    await start_services(bus, settings, stack, store=store,
                         local=[GatewayAgent(gateway)] if gateway is not None else [])
    return bus


def workflows_of(bus: Bus | None) -> WorkflowStore | None:
    """The hub's workflow store (None without the hub)."""
    if bus is None:
        return None
    from hub.workflows.store import WorkflowStore

    return WorkflowStore(bus)


def delegation_of(bus: Bus | None) -> Delegation | None:
    """Delegation over the hub, as the gateway's agent (None without the hub)."""
    if bus is None:
        return None
    from hub.delegation import HubDelegation

    return HubDelegation(bus, "gateway")


async def load_schedules(scheduler: Scheduler, path: Path) -> None:
    """Create or update the jobs of HERMES_SCHEDULES_FILE; ConfigError saying what is
    wrong."""
    import yaml  # only with a schedules file: PyYAML is ~1 MB of a gateway's memory

    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        data = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"HERMES_SCHEDULES_FILE={str(path)!r}: {exc}") from exc
    jobs = data.get("jobs", []) if isinstance(data, dict) else data
    if not isinstance(jobs, list):
        raise ConfigError(f"HERMES_SCHEDULES_FILE={str(path)!r}: expected a list of jobs")
    try:
        changed = await scheduler.load_file(jobs)
    except ValueError as exc:
        raise ConfigError(f"HERMES_SCHEDULES_FILE={str(path)!r}: {exc}") from None
    log.info("schedules file: %d of %d jobs created or updated", changed, len(jobs))


async def quietly(close: Any) -> None:
    """A closing step whose failure must not keep the others from running."""
    try:
        await close()
    except Exception as exc:
        log.warning("while stopping: %s: %s", type(exc).__name__, exc)


def both(*listeners: Callable[[InboundMessage, Routed], None]
          ) -> Callable[[InboundMessage, Routed], None]:
    """One router callback telling each of ``listeners``."""
    def told(msg: InboundMessage, routed: Routed) -> None:
        for listener in listeners:
            listener(msg, routed)

    return told


async def figures(queue: WorkQueue, workers: WorkerPool, runtime: Runtime) -> dict[str, Any]:
    """This process's figures for the console (and the queue's, sampled)."""
    oldest = await queue.oldest()
    return {"active": workers.active, "in_flight": runtime.loop.model_turn.in_flight,
            "model_waiting": runtime.model.calls_waiting, "waiting": await queue.waiting(),
            "oldest_seconds": max(0.0, time.time() - oldest[1]) if oldest else 0.0}

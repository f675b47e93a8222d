"""Gateway: every part of a running service, started in order and stopped in reverse.

``start`` builds the parts (``Parts``: store, runtime, queue, router, channels, workers,
...) and registers how to stop each as it starts it; a start that fails half-way stops
what it had started. ``stop`` first stops taking work (``begin_stop``), gives running tasks
HERMES_SHUTDOWN_GRACE seconds from the signal, then closes everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.base import Channel
from adapters.errors import GatewayStopping
from agent_core import EventBus, tracing
from agent_core.background import repeating
from agent_core.datadir import secure_data_dir
from agent_core.models import ModelAdapter
from agent_core.redaction import register as register_secrets
from agent_core.runtime import Runtime, UnconfiguredModel, build_runtime, start_mcp
from agent_core.store import MultiplexedRedis, OpenStore, open_store
from agent_core.tools import Services

from .access import AccessPolicy, Roles
from .approvals import ApprovalService
from .audit import AuditLog
from .budgets import BudgetNotices, announce_prices, open_budget
from .channels import Channels, build_channels, telegram_leadership
from .collect import Collector
from .commands import Commands
from .console import Console
from .delivery import Deliverer
from .edits import Edits
from .eventlog import EventLog
from .execution import Execution
from .feedback import Feedback
from .forgetting import forget_files
from .inbox import Inbox
from .interactions import Interactions
from .live import LiveReplies
from .live_record import ReplyBook
from .metrics import FLUSH_EVERY, Metrics
from .outage import StoreOutage
from .progress import ProgressRelay
from .queue import WorkQueue
from .ratelimit import RateLimit
from .replies import Replies
from .router import Router
from .scheduler import Scheduler
from .settings import GatewaySettings
from .startup import (
    both,
    delegation_of,
    figures,
    load_schedules,
    quietly,
    start_hub,
    workflows_of,
)
from .worker import WorkerPool
from .workflows import WorkflowTasks

if TYPE_CHECKING:
    from agent_core.budget import StoreBudget
    from hub import Bus
    from hub.workflows.store import WorkflowStore

log = logging.getLogger(__name__)

#: Store connections opened at start for what cannot share the multiplexed one (MULTI and
#: WATCH: a window's eviction, approvals, the scheduler, dead letters); more are opened as
#: they are needed. Not one per worker: the answer path shares one connection.
TRANSACTION_CONNECTIONS = 8
#: Seconds between refreshes of a process's live gauges when several serve one port.
GAUGE_REFRESH = 1.0


@dataclass(frozen=True, slots=True)
class Parts:
    """Every part of a started gateway."""

    opened: OpenStore
    runtime: Runtime
    queue: WorkQueue
    eventlog: EventLog
    audit: AuditLog
    deliverer: Deliverer
    scheduler: Scheduler
    router: Router
    approvals: ApprovalService
    channels: Channels
    workers: WorkerPool
    #: Receives the files that come with messages (and keeps those the API received).
    inbox: Inbox
    #: What the operator's console records and reads.
    console: Console
    #: The hub's bus, with HERMES_HUB.
    bus: Bus | None = None
    #: The hub's workflows and runs (one per process: its buckets are opened once and a
    #: kept version is read once), with HERMES_HUB.
    workflows: WorkflowStore | None = None
    #: The budgets every model call is reserved against (HERMES_BUDGETS).
    budget: StoreBudget | None = None


class Gateway:
    """The parts of one gateway process, once started."""

    def __init__(self, settings: GatewaySettings, *, model: ModelAdapter | None = None) -> None:
        self.settings = settings
        self.roles = Roles.from_settings(settings)
        self.metrics = Metrics()
        self._model_override = model
        self._parts: Parts | None = None
        self._stack = contextlib.AsyncExitStack()
        self._stopping = asyncio.Event()
        self._stop_began = 0.0

    @property
    def parts(self) -> Parts:
        """The started parts; RuntimeError before ``start`` has finished."""
        if self._parts is None:
            raise RuntimeError("the gateway has not started")
        return self._parts

    @property
    def model_ready(self) -> bool:
        """Whether a model is configured (otherwise chats get the set-up instructions)."""
        return self._model_override is not None or self.settings.model_configured

    async def start(self) -> None:
        """Open the store and start every part (or, failing, stop what had started)."""
        try:
            self._parts = await self._start(self._stack)
        except BaseException:
            await self._stack.aclose()
            raise
        log.info("gateway ready: channels %s; model %s",
                 ", ".join(sorted(self._parts.channels.by_name)), self._model_status())

    async def _start(self, stack: contextlib.AsyncExitStack) -> Parts:
        settings = self.settings
        register_secrets(settings.secret_values())
        await asyncio.to_thread(secure_data_dir, settings.hermes_data_dir)
        if tracing.configure("hermes-gateway"):
            # Closed last: what the stop itself recorded is exported too.
            stack.push_async_callback(asyncio.to_thread, tracing.flush)
        opened = await open_store(settings, pooled=TRANSACTION_CONNECTIONS)
        stack.push_async_callback(opened.close)
        store = opened.store
        model = self._model_override or (None if settings.model_configured
                                         else UnconfiguredModel())
        audit = AuditLog(store.redis, settings.redis_prefix, file=settings.hermes_audit_file)
        bus = await start_hub(settings, stack, store, self) if settings.hermes_hub else None
        workflow_store = workflows_of(bus)
        if bus is not None:
            settings = settings.model_copy(update={
                "hermes_tools": [*settings.hermes_tools, "tools.delegate"]})
        named: dict[str, Channel] = {}
        deliverer = Deliverer(named, store.redis, settings.redis_prefix,
                              counted=self.metrics.delivered)
        events = EventBus()
        notices = BudgetNotices(metrics=self.metrics, audit=audit, deliverer=deliverer,
                                bus=events)
        stack.push_async_callback(notices.aclose)
        budget = open_budget(settings, store.redis, notices=notices)
        stack.push_async_callback(budget.aclose)  # before the store closes: what is queued
        # A task that loses the store waits for it and goes on (the worker), instead of
        # telling its user to try again a message that will still be answered.
        runtime = build_runtime(settings, store=store, model=model, audit=audit,
                                on_store_outage="raise", bus=events, budget=budget)
        if self.model_ready:
            announce_prices(budget, runtime.model)
        mcp = await start_mcp(runtime)
        if mcp is not None:
            stack.push_async_callback(mcp.aclose)
        stack.push_async_callback(quietly, runtime.close_models)
        stack.push_async_callback(quietly, runtime.bus.drain)
        queue = WorkQueue(store.redis, settings.redis_prefix,
                          lease=settings.hermes_lease_seconds, blocking=opened.blocking,
                          conversations=store.parse_snapshot)
        eventlog = EventLog(store.redis, store.keys, retention=settings.task_retention,
                            blocking=opened.blocking)
        eventlog.start()
        stack.push_async_callback(eventlog.stop)
        progress = ProgressRelay(data_dir=settings.hermes_data_dir)
        stack.push_async_callback(progress.aclose)
        for subscriber in (eventlog, progress, self.metrics):
            runtime.bus.subscribe(subscriber)

        console = Console.open(store.redis, settings.redis_prefix, deliverer)
        runtime.bus.subscribe(console.activity)
        audit.listener = console.activity.audited
        deliverer.on_done = lambda message, done: runtime.bus.emit(done.event(message))
        scheduler = Scheduler(store.redis, queue, settings)
        runtime.loop.services = Services(scheduler=scheduler,
                                         delegation=delegation_of(bus))
        commands = Commands(queue=queue, store=store, model_status=self._model_status,
                            settings=settings, scheduler=scheduler,
                            workflows=bus is not None, budget=budget)
        rate = settings.rate_limit
        router = Router(queue=queue, policy=AccessPolicy.from_settings(settings),
                        deliverer=deliverer, commands=commands, settings=settings,
                        counted=both(self.metrics.routed, console.activity.routed),
                        rate=RateLimit(store.redis, settings.redis_prefix, count=rate[0],
                                       seconds=rate[1], timezone=settings.hermes_timezone)
                        if rate else None)
        approvals = ApprovalService(store.redis, settings=settings, channels=named,
                                    router=router, audit=audit, tools=runtime.registry)
        book = ReplyBook(store.redis, store.keys, ttl=settings.task_retention)
        edits = Edits(redis=store.redis, prefix=settings.redis_prefix, queue=queue,
                      store=store, deliverer=deliverer)
        router.follow_edits(edits)
        channels = build_channels(
            settings, ingest=router.ingest,
            interact=Interactions(approvals=approvals, router=router, store=store,
                                  roles=Roles.from_settings(settings),
                                  feedback=Feedback(book=book, audit=audit,
                                                    counted=self.metrics.rated),
                                  edits=edits), into=named)
        for channel in list(channels.by_name.values()):
            # Stopped even when its start fails half way (Telegram's bot opens its HTTP
            # sessions before getMe answers): nothing is left open at exit.
            stack.push_async_callback(quietly, channel.stop)
            await channel.start()

        # Back is when it takes writes again: a demoted primary still answers PING.
        outage = StoreOutage(store.writable, wait=settings.hermes_store_outage_wait)
        live = LiveReplies(book=book, deliverer=deliverer)
        runtime.bus.subscribe(live)
        replies = Replies(runtime=runtime, deliverer=deliverer, channels=named,
                          approvals=approvals, outage=outage, scheduler=scheduler,
                          live=live)
        inbox = Inbox(settings=settings, redis=store.redis, keys=store.keys, channels=named,
                      counter=runtime.loop.counter,
                      budget_tokens=runtime.loop.config.prompt_budget)
        execution = Execution(runtime=runtime, queue=queue, channels=named, progress=progress,
                              replies=replies, settings=settings, model_ready=self.model_ready,
                              live=live, inbox=inbox,
                              workflows=WorkflowTasks(
                                  workflow_store, store, runtime.bus,
                                  shutting_down=lambda: runtime.loop.shutting_down)
                              if workflow_store is not None else None)
        collector = Collector(redis=store.redis, queue=queue, store=store,
                              window_ms=settings.hermes_collect_window_ms) \
            if settings.hermes_busy_mode == "collect" else None
        workers = WorkerPool(queue=queue, execution=execution, replies=replies,
                             concurrency=settings.hermes_workers, outage=outage,
                             collector=collector)
        if isinstance(store.redis, MultiplexedRedis):
            log.debug("%d Lua scripts loaded", await store.redis.load_scripts())
        # Before the workers: stopped after them, so what their last tasks did is recorded.
        await console.start(stack, lambda: figures(queue, workers, runtime))
        await workers.start()
        stack.push_async_callback(self._stop_workers, workers)
        if settings.hermes_schedules_file is not None:
            await load_schedules(scheduler, settings.hermes_schedules_file)
        scheduler.start()
        stack.push_async_callback(scheduler.stop)
        if channels.telegram is not None:
            leader = telegram_leadership(settings, channels.telegram, store.redis,
                                         store.keys.leader("telegram"))
            leader.start()
            stack.push_async_callback(leader.stop)
        stack.push_async_callback(repeating(approvals.expire_due, 2.0, "approval expiry").stop)
        metrics = self.metrics

        async def flush_metrics() -> None:
            metrics.flush()

        # Flushed once more as the gateway stops: with serve --processes a stopped
        # process's counters stay in the sums.
        stack.callback(metrics.flush)
        stack.push_async_callback(repeating(flush_metrics, FLUSH_EVERY, "request metrics").stop)
        if self.metrics.multiprocess:
            # A scrape reaches one of the processes and sums every process's file: each keeps
            # its own share current, not only when it is the one scraped.
            async def refresh() -> None:
                self._set_gauges(workers, runtime)

            stack.push_async_callback(repeating(refresh, GAUGE_REFRESH, "live gauges").stop)
        if settings.conversation_ttl > 0:
            ttl = settings.conversation_ttl
            async def sweep_idle() -> None:
                for cid in await opened.store.sweep_idle(ttl):
                    await forget_files(settings.hermes_data_dir, cid)

            sweep = repeating(sweep_idle, min(3600.0, max(10.0, ttl / 10)), "idle sweep")
            stack.push_async_callback(sweep.stop)
        return Parts(opened, runtime, queue, eventlog, audit, deliverer, scheduler, router,
                     approvals, channels, workers, inbox, console, bus, workflow_store,
                     budget)

    @property
    def stopping(self) -> bool:
        """Whether the gateway has begun to stop (/readyz answers 503)."""
        return self._stopping.is_set()

    async def begin_stop(self) -> None:
        """The first step of a stop, as soon as the server stops accepting: claim no more
        conversations, and end the requests that only follow tasks (SSE streams resume
        elsewhere with Last-Event-ID; POST /agent/run answers 202 with the task to poll), so
        the server's wait for open requests is short. Running tasks go on until ``stop``."""
        if self._stopping.is_set():
            return
        self._stop_began = time.monotonic()
        self._stopping.set()
        if self._parts is not None:
            await self._parts.workers.pause()
            self._parts.eventlog.close_followers()

    async def stop(self) -> None:
        """Stop taking work, finish running tasks (for up to HERMES_SHUTDOWN_GRACE seconds)
        or hand them back, close everything."""
        await self.begin_stop()
        await self._stack.aclose()

    async def _stop_workers(self, workers: WorkerPool) -> None:
        # The grace counts from the start of the stop (SIGTERM), not from here.
        spent = time.monotonic() - self._stop_began
        await workers.stop(max(0.0, self.settings.hermes_shutdown_grace - spent))

    def _model_status(self) -> str:
        if not self.model_ready:
            return "not configured (set LLM_PROVIDER, LLM_MODEL_NAME, LLM_API_KEY)"
        return self._parts.runtime.model.name if self._parts else "configured"

    def _set_gauges(self, workers: WorkerPool, runtime: Runtime) -> None:
        """This process's conversations and model calls (under way, waiting) now."""
        self.metrics.active_tasks.set(workers.active)
        self.metrics.model_waiting.set(runtime.model.calls_waiting)
        self.metrics.model_in_flight.set(runtime.loop.model_turn.in_flight)

    async def scrape(self) -> bytes:
        """The metrics exposition, with the gauges read now."""
        parts = self._parts
        if parts is not None:
            self._set_gauges(parts.workers, parts.runtime)
            with contextlib.suppress(Exception):  # the store's own state shows in /readyz
                self.metrics.waiting.set(await parts.queue.waiting())
                self.metrics.sample(await parts.console.gauges(parts.bus))
        return self.metrics.exposition()

    async def ready(self) -> None:
        """Return when the gateway takes work (what /readyz says): the store takes writes
        (a store that refuses them, a demoted primary's READONLY, is an outage);
        GatewayStopping, or the store's error, when not."""
        if self.stopping:
            raise GatewayStopping("the gateway is stopping")
        await self.parts.opened.store.writable()

    async def health(self) -> dict[str, Any]:
        """What GET /agent/status reports to an admin: :meth:`ready`, and the parts."""
        await self.ready()
        parts = self.parts
        return {"status": "ready", "store": parts.opened.location,
                "channels": sorted(parts.channels.by_name), "model": self._model_status(),
                "hub": "connected" if parts.bus is not None and parts.bus.nc.is_connected
                else ("unreachable" if parts.bus is not None else "off"),
                "mcp_servers": parts.runtime.mcp.status() if parts.runtime.mcp else {},
                "conversations_waiting": await parts.queue.waiting(),
                "active_here": parts.workers.active}

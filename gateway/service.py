"""Gateway: every component of a running service, started and stopped in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import yaml

from adapters.base import Channel, Interact
from adapters.errors import GatewayStopping
from adapters.pacing import Pacer
from adapters.slack import SlackChannel
from adapters.telegram import TelegramChannel
from adapters.webchat import PullChannel
from adapters.webhook import WebhookChannel
from agent_core import ConfigError
from agent_core.models import ModelAdapter
from agent_core.redaction import register as register_secrets
from agent_core.runtime import Runtime, UnconfiguredModel, build_runtime
from agent_core.store.factory import OpenStore, open_store
from agent_core.store.multiplex import MultiplexedRedis
from agent_core.tools import Services

from .access import AccessPolicy, Roles
from .approvals import ApprovalService
from .audit import AuditLog
from .commands import Commands
from .delivery import Deliverer
from .eventlog import EventLog
from .interactions import Interactions
from .leader import Leadership
from .metrics import Metrics
from .progress import ProgressRelay
from .queue import WorkQueue
from .router import Router
from .scheduler import Scheduler
from .settings import GatewaySettings
from .worker import WorkerPool

log = logging.getLogger(__name__)


class Gateway:
    """Store, runtime, queue, router, channels and workers of one gateway process."""

    def __init__(self, settings: GatewaySettings, *, model: ModelAdapter | None = None) -> None:
        self.settings = settings
        self.roles = Roles.from_settings(settings)
        self._model_override = model
        self.opened: OpenStore | None = None
        self.runtime: Runtime | None = None
        self.queue: WorkQueue | None = None
        self.router: Router | None = None
        self.workers: WorkerPool | None = None
        self.eventlog: EventLog | None = None
        self.channels: dict[str, Channel] = {}
        self.slack: SlackChannel | None = None
        self.telegram: TelegramChannel | None = None
        self.webhook: WebhookChannel | None = None
        self.approvals: ApprovalService | None = None
        self.scheduler: Scheduler | None = None
        self.audit: AuditLog | None = None
        self._background: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._stop_began = 0.0
        self._leaders: list[Leadership] = []
        self.metrics = Metrics()

    @property
    def model_ready(self) -> bool:
        """Whether a model is configured (otherwise chats get the set-up instructions)."""
        return self._model_override is not None or self.settings.model_configured

    async def start(self) -> None:
        """Open the store and start every component."""
        settings = self.settings
        register_secrets(settings.secret_values())
        self.opened = await open_store(settings, pooled=min(settings.hermes_workers + 8, 128))
        store = self.opened.store
        model = self._model_override or (None if settings.model_configured
                                         else UnconfiguredModel())
        self.audit = AuditLog(store.redis, settings.redis_prefix, file=settings.hermes_audit_file)
        self.runtime = runtime = build_runtime(settings, store=store, model=model,
                                               audit=self.audit)
        self.queue = queue = WorkQueue(store.redis, settings.redis_prefix,
                                       lease=settings.hermes_lease_seconds,
                                       blocking=self.opened.blocking,
                                       conversations=store.parse_snapshot)
        self.eventlog = EventLog(store.redis, store.keys, retention=settings.task_retention,
                                 blocking=self.opened.blocking)
        self.eventlog.start()
        runtime.bus.subscribe(self.eventlog)
        progress = ProgressRelay()
        runtime.bus.subscribe(progress)
        runtime.bus.subscribe(self.metrics)

        self.channels = {"api": PullChannel("api"), "webchat": PullChannel("webchat")}
        deliverer = Deliverer(self.channels, store.redis, settings.redis_prefix,
                              counted=self.metrics.delivered)
        self.scheduler = Scheduler(store.redis, queue, settings)
        runtime.loop.services = Services(scheduler=self.scheduler)
        commands = Commands(queue=queue, store=store, model_status=self._model_status,
                            settings=settings, scheduler=self.scheduler)
        self.router = router = Router(queue=queue, policy=AccessPolicy.from_settings(settings),
                                      deliverer=deliverer, commands=commands, settings=settings,
                                      counted=self.metrics.routed)
        self.approvals = ApprovalService(store.redis, settings=settings, channels=self.channels,
                                         router=router, audit=self.audit)
        self._build_channels(router, Interactions(approvals=self.approvals, router=router,
                                                  store=store))
        for channel in list(self.channels.values()):
            await channel.start()
        self.workers = WorkerPool(queue=queue, runtime=runtime, channels=self.channels,
                                  deliverer=deliverer, progress=progress, settings=settings,
                                  model_ready=self.model_ready, approvals=self.approvals)
        if isinstance(store.redis, MultiplexedRedis):
            log.debug("%d Lua scripts loaded", await store.redis.load_scripts())
        await self.workers.start()
        if settings.hermes_schedules_file is not None:
            await self._load_schedules(settings.hermes_schedules_file)
        self.scheduler.start()
        self._start_telegram_leadership()
        if settings.conversation_ttl > 0:
            self._background.append(asyncio.create_task(self._sweep_idle()))
        self._background.append(asyncio.create_task(self._expire_approvals()))
        log.info("gateway ready: channels %s; model %s", ", ".join(sorted(self.channels)),
                 self._model_status())

    def _build_channels(self, router: Router, interact: Interact) -> None:
        settings = self.settings
        pacer = Pacer()
        if settings.hermes_webhook_secrets:
            self.webhook = WebhookChannel(
                {k: v.get_secret_value() for k, v in settings.hermes_webhook_secrets.items()},
                ingest=router.ingest, callback_hosts=settings.hermes_webhook_callback_hosts)
            self.channels["webhook"] = self.webhook
        if settings.slack_enabled:
            assert settings.slack_bot_token is not None
            self.slack = SlackChannel(
                bot_token=settings.slack_bot_token.get_secret_value(),
                signing_secret=_secret(settings.slack_signing_secret),
                app_token=_secret(settings.slack_app_token), api_url=settings.slack_api_url,
                ingest=router.ingest, interact=interact, progress=settings.slack_progress,
                pacer=pacer)
            self.channels["slack"] = self.slack
        if settings.telegram_enabled:
            assert settings.telegram_bot_token is not None
            self.telegram = TelegramChannel(
                token=settings.telegram_bot_token.get_secret_value(),
                webhook_secret=_secret(settings.telegram_webhook_secret),
                api_url=settings.telegram_api_url, ingest=router.ingest, interact=interact,
                pacer=pacer)
            self.channels["telegram"] = self.telegram

    def _start_telegram_leadership(self) -> None:
        telegram = self.telegram
        if telegram is None or self.opened is None:
            return
        settings = self.settings
        mode = settings.telegram_mode
        if mode == "auto":
            mode = "webhook" if settings.telegram_webhook_secret and settings.hermes_public_url \
                else "polling"
        if mode == "webhook" and not settings.hermes_public_url:
            raise ConfigError("TELEGRAM_MODE=webhook needs HERMES_PUBLIC_URL (where Telegram "
                              "can reach /telegram/webhook) and TELEGRAM_WEBHOOK_SECRET")
        url = f"{(settings.hermes_public_url or '').rstrip('/')}/telegram/webhook"

        async def elected() -> None:
            if mode == "webhook":
                await telegram.set_webhook(url)
            else:
                await telegram.start_polling()

        leader = Leadership(self.opened.store.redis, self.opened.store.keys.leader("telegram"),
                            on_elected=elected, on_lost=telegram.stop_polling)
        self._leaders.append(leader)
        leader.start()

    async def _load_schedules(self, path: Path) -> None:
        assert self.scheduler is not None
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
            data = yaml.safe_load(text) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"HERMES_SCHEDULES_FILE={str(path)!r}: {exc}") from exc
        jobs = data.get("jobs", []) if isinstance(data, dict) else data
        if not isinstance(jobs, list):
            raise ConfigError(f"HERMES_SCHEDULES_FILE={str(path)!r}: expected a list of jobs")
        try:
            changed = await self.scheduler.load_file(jobs)
        except ValueError as exc:
            raise ConfigError(f"HERMES_SCHEDULES_FILE={str(path)!r}: {exc}") from None
        log.info("schedules file: %d of %d jobs created or updated", changed, len(jobs))

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
        if self.workers is not None:
            await self.workers.pause()
        if self.eventlog is not None:
            self.eventlog.close_followers()

    async def stop(self) -> None:
        """Stop taking work, finish running tasks (for up to HERMES_SHUTDOWN_GRACE seconds)
        or hand them back, close everything."""
        await self.begin_stop()
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self._background:
            await asyncio.wait(self._background, timeout=10)
        for task in self._background:
            task.cancel()
        for leader in self._leaders:
            await leader.stop()
        if self.workers is not None:
            # The grace counts from the start of the stop (SIGTERM), not from here.
            spent = time.monotonic() - self._stop_began
            await self.workers.stop(max(0.0, self.settings.hermes_shutdown_grace - spent))
        for channel in self.channels.values():
            with contextlib.suppress(Exception):
                await channel.stop()
        if self.eventlog is not None:
            await self.eventlog.stop()
        if self.runtime is not None:
            with contextlib.suppress(Exception):
                await self.runtime.bus.drain()
                await self.runtime.model.aclose()
        if self.opened is not None:
            await self.opened.close()

    def _model_status(self) -> str:
        if not self.model_ready:
            return "not configured (set LLM_PROVIDER, LLM_MODEL_NAME, LLM_API_KEY)"
        return self.runtime.model.name if self.runtime else "configured"

    async def _pause(self, seconds: float) -> bool:
        """Sleep, unless the gateway stops first; False once it is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return not self._stopping.is_set()

    async def _expire_approvals(self, every: float = 2.0) -> None:
        assert self.approvals is not None
        while await self._pause(every):
            try:
                await self.approvals.expire_due()
            except Exception as exc:
                log.warning("approval expiry failed: %s", exc)

    async def _sweep_idle(self) -> None:
        assert self.opened is not None
        while await self._pause(min(3600.0, max(10.0, self.settings.conversation_ttl / 10))):
            try:
                await self.opened.store.sweep_idle(self.settings.conversation_ttl)
            except Exception as exc:
                log.warning("idle sweep failed: %s", exc)

    async def scrape(self) -> bytes:
        """The metrics exposition, with the gauges read now."""
        if self.workers is not None:
            self.metrics.active_tasks.set(self.workers.active)
        if self.queue is not None:
            with contextlib.suppress(Exception):  # the store's own state shows in /readyz
                self.metrics.waiting.set(await self.queue.waiting())
        return self.metrics.exposition()

    async def health(self) -> dict[str, Any]:
        """What /readyz reports."""
        assert self.opened is not None and self.queue is not None and self.workers is not None
        if self.stopping:
            raise GatewayStopping("the gateway is stopping")
        await self.opened.store.ping()
        return {"status": "ready", "store": self.opened.location,
                "channels": sorted(self.channels), "model": self._model_status(),
                "conversations_waiting": await self.queue.waiting(),
                "active_here": self.workers.active}


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None

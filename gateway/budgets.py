"""The gateway's budgets: ``StoreBudget`` on the gateway's store (HERMES_BUDGETS,
HERMES_MODEL_PRICES, windows in HERMES_TIMEZONE), and what the gateway does with what it
decides (``BudgetNotices``): Prometheus counters of tokens and dollars, every refusal in the
audit log, and the once-a-window warning posted in the conversation (and told as a
BUDGET_WARNING event, which the web chat and the API's event streams show).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from redis.asyncio import Redis

from adapters.base import ChannelName, OutboundMessage
from agent_core import Event, EventBus, EventType
from agent_core.budget import (
    BudgetUse,
    Calendar,
    Charge,
    Overrun,
    Prices,
    Scope,
    StoreBudget,
    announce,
)
from agent_core.budget import words as budget_words
from agent_core.budget.periods import Clock
from agent_core.models import ModelAdapter, Usage
from agent_core.store import Keys

from .settings import GatewaySettings

if TYPE_CHECKING:  # a hub agent's process audits refusals, and loads neither
    from .audit import AuditLog
    from .delivery import Deliverer
    from .metrics import Metrics

log = logging.getLogger(__name__)


def open_budget(settings: GatewaySettings, redis: Redis, *,
                notices: BudgetNotices | None = None, clock: Clock | None = None
                ) -> StoreBudget:
    """The deployment's budgets on ``redis``."""
    prices = Prices(settings.hermes_model_prices)
    calendar = Calendar(settings.hermes_timezone, clock) if clock is not None \
        else Calendar(settings.hermes_timezone)
    if notices is not None:
        notices.calendar = calendar
    return StoreBudget(redis, Keys(settings.redis_prefix).budgets, settings.hermes_budgets,
                       prices=prices, calendar=calendar, lease=settings.hermes_lease_seconds,
                       listener=notices)


def announce_prices(budget: StoreBudget, model: ModelAdapter) -> None:
    """Say at start which of the models this process calls have no price (their calls
    count tokens only)."""
    chain = getattr(model, "models", None) or [model]
    announce(budget.prices, budget.rules, [str(getattr(m, "name", "")) for m in chain])


class BudgetNotices:
    """A ``BudgetListener``: counts, audits, and tells the conversation."""

    def __init__(self, *, metrics: Metrics | None = None, audit: AuditLog | None = None,
                 deliverer: Deliverer | None = None, bus: EventBus | None = None,
                 calendar: Calendar | None = None) -> None:
        self.metrics = metrics
        self.audit = audit
        self.deliverer = deliverer
        self.bus = bus
        #: The budget's calendar, for the time words of the notices (set by the gateway).
        self.calendar = calendar or Calendar()
        self._tasks: set[asyncio.Task[None]] = set()

    def spent(self, charge: Charge, usage: Usage, usd: float | None,
              scopes: tuple[Scope, ...]) -> None:
        if self.metrics is not None:
            self.metrics.spent(charge.model, charge.channel or "none", scopes,
                               usage.prompt_tokens + usage.completion_tokens, usd)

    def refused(self, charge: Charge, overrun: Overrun) -> None:
        log.info("budget %s refused a call of task %s: %s %s of %s used, %s wanted",
                 overrun.rule, charge.task_id, overrun.used, overrun.unit, overrun.limit,
                 overrun.wanted)
        if self.metrics is not None:
            self.metrics.budget_refused(overrun.scope, overrun.window)
        if self.audit is not None:
            self._spawn(self.audit.record({
                "type": "budget_refused", "requester": charge.user_id, "role": charge.role,
                "conversation_id": charge.conversation_id, "task_id": charge.task_id,
                "model": charge.model, "channel": charge.channel,
                **overrun.model_dump()}))

    def warned(self, charge: Charge, use: BudgetUse) -> None:
        if self.metrics is not None:
            self.metrics.budget_warned(use.scope, use.window)
        text = budget_words.warning(use, now=self.calendar.now())
        if self.bus is not None:
            self.bus.emit(Event(EventType.BUDGET_WARNING, charge.task_id,
                                charge.conversation_id, 0,
                                {**use.model_dump(), "text": text}, task_id=charge.task_id))
        channel = charge.channel
        if self.deliverer is None or channel not in self.deliverer.channels:
            return
        target: Any = charge.extra.get("reply_target")
        self._spawn(self._deliver(OutboundMessage(
            channel=cast(ChannelName, channel),  # one of the enabled channels
            conversation_id=charge.conversation_id,
            reply_target=dict(target) if isinstance(target, dict) else {}, text=text,
            kind="notice", task_id=charge.task_id)))

    async def _deliver(self, message: OutboundMessage) -> None:
        assert self.deliverer is not None
        await self.deliverer.deliver(message)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(self._quietly(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _quietly(work: Any) -> None:
        try:
            await work
        except Exception as exc:  # a notice or an audit line must not fail a task
            log.warning("budget notice failed: %s: %s", type(exc).__name__, exc)

    async def aclose(self) -> None:
        """Wait (briefly) for the notices and audit lines under way."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)

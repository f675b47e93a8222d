"""StoreBudget: the budgets kept in the Redis-protocol store, shared by every replica.

Each call's worst case is held on every counter of the budgets that apply to it, in one
Lua script (``_scripts.STEP``): either all have room and all hold it, or none does and the
call is refused. Replicas share the counters, so together they overshoot a budget by at most
what calls under way were allowed to hold: never more.

A settle is not a round trip of its own: it is queued and goes with this process's next
reserve (the same script settles, then reserves), or on its own after ``linger`` seconds
when no reserve comes first; so a model call costs one round trip. A hold expires
``lease`` seconds after it was taken (or last renewed: this process renews its holds while
their calls run), so the holds of a process that died are released by the next reserve
that meets them, as a dead worker's conversation lease is.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from ..background import Background, repeating
from ..errors import BudgetExceeded, ConfigError
from ..ids import new_id
from ..models.base import Usage
from ..store.client import store_boundary
from ..store.keys import CONVERSATION_ID, BudgetKeys
from . import _scripts, words
from .base import BudgetListener, BudgetRule, BudgetUse, Charge, Hold, ModelPrice, Overrun
from .periods import Calendar, Span
from .prices import NANO, Prices, cost, worst_case

log = logging.getLogger(__name__)

#: Counters stay this long after their window ends (for GET /agent/usage of late calls).
_KEEP = 86400


@dataclass(frozen=True, slots=True)
class _Counter:
    """One budget's counter for one subject in one window, with what the script is told
    of it: its limits and warning shares (-1: none), and how long its keys live."""

    rule: BudgetRule
    subject: str
    span: Span
    key: str
    holds: str
    limits: tuple[int, int]
    warn: tuple[int, int]
    ttl: int


@dataclass(slots=True)
class _Hold(Hold):
    tokens: int = 0
    nano: int = 0
    price: ModelPrice | None = None
    counters: tuple[_Counter, ...] = ()
    #: Its entry in each counter's holds: ``id|tokens|nano``.
    member: str = ""


@dataclass(frozen=True, slots=True)
class _Settled:
    hold: _Hold
    tokens: int
    nano: int


@store_boundary
class StoreBudget:
    """A ``Budget`` on the store: ``reserve`` and ``settle`` around each model call."""

    def __init__(self, redis: Redis, keys: BudgetKeys, rules: Sequence[BudgetRule], *,
                 prices: Prices | None = None, calendar: Calendar | None = None,
                 lease: float = 30.0, listener: BudgetListener | None = None,
                 linger: float = 0.05) -> None:
        ids = [r.key for r in rules]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ConfigError(f"HERMES_BUDGETS: two budgets count the same thing ({twice}): "
                              "give each an id, or put tokens and usd in one entry")
        self.rules = tuple(rules)
        self.keys = keys
        self.prices = prices or Prices()
        self.calendar = calendar or Calendar()
        self.lease = lease
        self.listener = listener
        self.linger = linger
        self._step = redis.register_script(_scripts.STEP)
        self._renew = redis.register_script(_scripts.RENEW)
        self.redis = redis
        self._pending: list[_Settled] = []
        self._live: dict[str, _Hold] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._renewer: Background | None = None
        self._counters: dict[tuple[str, str, str], _Counter] = {}
        #: Per caller (its fields the rules look at): the counters that count its calls,
        #: and when the first of their windows began and ends.
        self._applying: dict[tuple[str | None, ...], tuple[float, float, tuple[_Counter, ...]]] = {}

    # --- the Budget protocol ------------------------------------------------------------
    async def reserve(self, charge: Charge) -> Hold:
        """Hold the call's worst case on every budget that applies (BudgetExceeded, and
        nothing held, when one has no room); settles queued here go in the same step."""
        price = self.prices.of(charge.model)
        nano = worst_case(price, charge.prompt_tokens, charge.max_tokens)
        hold_id = new_id(12)
        hold = _Hold(charge, hold_id, tokens=charge.tokens, price=price, nano=nano,
                     member=f"{hold_id}|{charge.tokens}|{nano}")
        counters = self._applicable(charge)
        settled = self._take()
        if not counters and not settled:
            return hold
        try:
            reply = await self._call(settled, counters, hold)
        except BaseException:
            self._pending[:0] = settled  # sent again: a settle counted twice errs on the safe side
            raise
        self._heard(settled, reply)
        if reply[0] == 0:
            self._refuse(hold, counters[int(reply[1]) - 1], int(reply[2]), int(reply[3]),
                         int(reply[4]))
        hold.counters = counters
        if counters:
            self._live[hold.id] = hold
            self._keep_renewing()
        return hold

    async def settle(self, hold: Hold, usage: Usage | None, *, model: str = "") -> None:
        """Queue the call's usage in place of its hold (sent with the next step)."""
        if not isinstance(hold, _Hold):
            raise TypeError(f"not a hold of this budget: {hold!r}")
        self._live.pop(hold.id, None)
        price = self.prices.of(model, hold.charge.model) if model else hold.price
        used = usage or Usage()
        nano = cost(price, used)
        if usage is not None and self.listener is not None:
            self.listener.spent(hold.charge, usage, nano / NANO if price else None,
                                tuple(c.rule.scope for c in hold.counters))
        if not hold.counters:
            return
        self._pending.append(_Settled(hold, used.prompt_tokens + used.completion_tokens, nano))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.linger, self._flush_soon)

    # --- reading ----------------------------------------------------------------------
    def applying(self, charge: Charge) -> list[tuple[BudgetRule, str, bool]]:
        """The budgets ``charge`` falls under: (rule, subject, exempt by its role)."""
        found = []
        for rule in self.rules:
            subject = charge.subject(rule.scope)
            if subject is not None and rule.match.allows(charge):
                found.append((rule, subject, charge.role in rule.exempt_roles))
        return found

    def of_subject(self, scope: str, subject: str) -> list[tuple[BudgetRule, str, bool]]:
        """The budgets of ``scope`` that count ``subject`` (their other conditions, on the
        calls' other fields, are not checked)."""
        found = []
        for rule in self.rules:
            patterns: tuple[str, ...] = getattr(rule.match, scope, ()) \
                if scope != "global" else ()
            if rule.scope == scope and (not patterns or _matches(subject, patterns)):
                found.append((rule, "all" if scope == "global" else subject, False))
        return found

    async def uses(self, budgets: Iterable[tuple[BudgetRule, str, bool]]) -> list[BudgetUse]:
        """Where each budget stands in its current window (one round trip)."""
        chosen = list(budgets)
        if not chosen:
            return []
        counters = [self._counter_of(rule, subject) for rule, subject, _ in chosen]
        pipe = self.redis.pipeline(transaction=False)
        for counter in counters:
            pipe.hmget(counter.key, "t", "u", "rt", "ru")
        rows = await pipe.execute()
        return [self._use(c, *[int(v or 0) for v in row], exempt=exempt)
                for c, row, (_, _, exempt) in zip(counters, rows, chosen, strict=True)]

    # --- life ------------------------------------------------------------------------
    async def flush(self) -> None:
        """Send the settles queued here now."""
        settled = self._take()
        if not settled:
            return
        try:
            reply = await self._call(settled, (), None)
        except BaseException:
            self._pending[:0] = settled
            raise
        self._heard(settled, reply)

    async def aclose(self) -> None:
        """Send what is queued, stop renewing holds."""
        self._cancel_timer()
        if self._flushes:
            await asyncio.wait(list(self._flushes), timeout=5)
        try:
            await self.flush()
        except Exception as exc:
            log.warning("budgets: %d settles not recorded at stop: %s", len(self._pending), exc)
        self._cancel_timer()  # one a failed flush set: nothing will retry now
        if self._renewer is not None:
            await self._renewer.stop()
            self._renewer = None

    # --- inside -----------------------------------------------------------------------
    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _take(self) -> list[_Settled]:
        # A timer set for these stays: it finds nothing to send (cheaper than cancelling it
        # on every call).
        settled, self._pending = self._pending, []
        return settled

    def _flush_soon(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self._flush_quietly())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # kept queued: the next reserve, or the next try, sends it
            log.warning("budgets: settling %d calls failed (%s); trying again",
                        len(self._pending), exc)
            if self._timer is None and self._pending:
                self._timer = asyncio.get_running_loop().call_later(1.0, self._flush_soon)

    async def _call(self, settled: list[_Settled], counters: Sequence[_Counter],
                    hold: _Hold | None) -> list[Any]:
        keys: list[str] = []
        entries: list[Any] = []
        for s in settled:
            for c in s.hold.counters:
                keys += (c.key, c.holds)
                entries += (s.hold.member, s.tokens, s.nano, c.ttl, *c.warn)
        n_settled = len(keys) // 2
        for c in counters:
            keys += (c.key, c.holds)
            entries += (*c.limits, c.ttl)
        head = (n_settled, len(counters), int(self.lease * 1000),
                hold.member if hold else "", hold.tokens if hold else 0,
                hold.nano if hold else 0)
        reply: list[Any] = await self._step(keys=keys, args=[*head, *entries])
        return reply

    def _heard(self, settled: list[_Settled], reply: list[Any]) -> None:
        """Tell the listener of each budget the settles took past its warning share."""
        start = 1 if reply[0] == 1 else 5
        if len(reply) <= start or self.listener is None:
            return
        flat = [(s.hold, c) for s in settled for c in s.hold.counters]
        for i in range(start, len(reply), 3):
            hold, counter = flat[int(reply[i]) - 1]
            self.listener.warned(hold.charge, self._use(counter, int(reply[i + 1]),
                                                        int(reply[i + 2]), 0, 0))

    def _refuse(self, hold: _Hold, counter: _Counter, unit: int, used: int,
                reserved: int) -> None:
        rule, scale = counter.rule, (1 if unit == 0 else NANO)
        limit = rule.tokens if unit == 0 else rule.usd
        overrun = Overrun(
            rule=rule.key, scope=rule.scope, subject=counter.subject, window=rule.window,
            unit="tokens" if unit == 0 else "usd", limit=float(limit or 0),
            used=used / scale, reserved=reserved / scale,
            wanted=(hold.tokens if unit == 0 else hold.nano) / scale,
            resets_at=counter.span.end, timezone=self.calendar.timezone)
        if self.listener is not None:
            self.listener.refused(hold.charge, overrun)
        raise BudgetExceeded(overrun, user_message=words.refusal(
            overrun, started=hold.charge.started, now=self.calendar.now()))

    def _use(self, c: _Counter, t: int, u: int, rt: int, ru: int, *,
             exempt: bool = False) -> BudgetUse:
        rule = c.rule
        return BudgetUse(rule=rule.key, scope=rule.scope, subject=c.subject,
                         window=rule.window, tokens=rule.tokens, usd=rule.usd,
                         used_tokens=t, used_usd=u / NANO, reserved_tokens=rt,
                         reserved_usd=ru / NANO, resets_at=c.span.end,
                         timezone=self.calendar.timezone, exempt=exempt)

    def _applicable(self, charge: Charge) -> tuple[_Counter, ...]:
        """The counters of the budgets that count ``charge``, in their current windows
        (worked out once per caller and window)."""
        who = (charge.user_id, charge.conversation_id, charge.channel, charge.schedule,
               charge.agent, charge.role)
        now = self.calendar.now()
        kept = self._applying.get(who)
        if kept is not None and kept[0] <= now < kept[1]:
            return kept[2]
        counters = tuple(self._counter_of(r, charge.subject(r.scope) or "")
                         for r in self.rules if r.applies(charge))
        if len(self._applying) > 10_000:
            self._applying.clear()
        self._applying[who] = (max((c.span.start for c in counters), default=-math.inf),
                               min((c.span.end for c in counters), default=math.inf),
                               counters)
        return counters

    def _counter_of(self, rule: BudgetRule, subject: str) -> _Counter:
        span = self.calendar.span(rule.window)
        found = self._counters.get((rule.key, subject, span.label))
        if found is None or found.span is not span:
            if len(self._counters) > 10_000:
                self._counters.clear()
            name = _key_part(subject)
            found = self._counters[(rule.key, subject, span.label)] = _Counter(
                rule, subject, span, self.keys.counter(rule.key, span.label, name),
                self.keys.holds(rule.key, span.label, name),
                limits=(-1 if rule.tokens is None else rule.tokens,
                        -1 if rule.usd is None else round(rule.usd * NANO)),
                warn=_warn_at(rule),
                # Counted from now, kept with the counter: at most a window longer than
                # needed, never shorter.
                ttl=max(1, int(span.end - self.calendar.now()) + _KEEP))
        return found

    def _keep_renewing(self) -> None:
        if self._renewer is None:
            self._renewer = repeating(self._renew_live, self.lease / 3, "budget holds")

    async def _renew_live(self) -> None:
        live = list(self._live.values())
        if live:
            pairs = [(c.holds, h.member) for h in live for c in h.counters]
            await self._renew(keys=[k for k, _ in pairs],
                              args=[int(self.lease * 1000), *[m for _, m in pairs]])


def _warn_at(rule: BudgetRule) -> tuple[int, int]:
    """The used amounts (tokens, nano-dollars) at which the rule warns; -1: never."""
    if rule.warn_at is None:
        return -1, -1
    return (-1 if rule.tokens is None else int(rule.tokens * rule.warn_at),
            -1 if rule.usd is None else int(rule.usd * rule.warn_at * NANO))


def _key_part(subject: str) -> str:
    """A subject as it may appear in a key: plain ids as they are, others hashed (after a
    ``#``, which no plain id has)."""
    if len(subject) <= 120 and CONVERSATION_ID.match(subject):
        return subject
    return "#" + hashlib.sha256(subject.encode()).hexdigest()[:32]


def _matches(value: str, patterns: tuple[str, ...]) -> bool:
    from fnmatch import fnmatchcase

    return any(fnmatchcase(value, p) for p in patterns)


def announce(prices: Prices, rules: Sequence[BudgetRule], models: Iterable[str]) -> None:
    """Say at start which models have no price: their calls count tokens only."""
    missing = prices.unpriced(m for m in models if m)
    if not missing or not (prices or rules):  # nothing is counted: nothing to say
        return
    level = logging.WARNING if any(r.usd is not None for r in rules) else logging.INFO
    for model in missing:
        log.log(level, "model %r has no price in HERMES_MODEL_PRICES: its calls count "
                "tokens only (dollar budgets do not see them)", model)

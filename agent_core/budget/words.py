"""What people are told about budgets: a refusal, a warning, their usage (``/usage``).

Each names the budget (whose, which window, tokens or dollars), what is used of it and
when it resets, in the deployment's time zone.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from .base import BudgetUse, Overrun, Period, Scope, Unit

_ADJECTIVE: dict[Period, str] = {"hour": "hourly", "day": "daily", "month": "monthly"}


def amount(unit: Unit, value: float, *, bare: bool = False) -> str:
    """``12,345 tokens`` (``bare``: ``12,345``) or ``$1.23`` (``$0.0042`` under a dollar)."""
    if unit == "tokens":
        return f"{int(value):,}" if bare else f"{int(value):,} tokens"
    whole_cents = abs(value * 100 - round(value * 100)) < 1e-9
    return f"${value:,.2f}" if value >= 1 or whole_cents else f"${value:.4f}"


def of(unit: Unit, used: float, limit: float) -> str:
    """``9,000 of 10,000 tokens``, ``$1.20 of $5.00``."""
    return f"{amount(unit, used, bare=True)} of {amount(unit, limit)}"


def budget_name(scope: Scope, subject: str, window: Period, unit: Unit) -> str:
    """``your daily token budget``, ``the deployment's monthly USD budget``, ..."""
    kind = f"{_ADJECTIVE[window]} {'token' if unit == 'tokens' else 'USD'} budget"
    match scope:
        case "user":
            return f"your {kind}"
        case "conversation":
            return f"this conversation's {kind}"
        case "channel":
            return f"the {kind} of the {subject} channel"
        case "schedule":
            return f"this schedule's {kind}"
        case "agent":
            return f"the {kind} of agent {subject!r}"
        case _:
            return f"the deployment's {kind}"


def when(resets_at: float, timezone: str, now: float) -> str:
    """``today at 15:00 (Europe/Berlin)``, ``tomorrow at 00:00 (UTC)``, ``on 2026-06-01 at
    00:00 (UTC)``."""
    zone = ZoneInfo(timezone)
    at = dt.datetime.fromtimestamp(resets_at, zone)
    today = dt.datetime.fromtimestamp(now, zone).date()
    if at.date() == today:
        day = "today"
    elif at.date() == today + dt.timedelta(days=1):
        day = "tomorrow"
    else:
        day = f"on {at:%Y-%m-%d}"
    return f"{day} at {at:%H:%M} ({timezone})"


def refusal(o: Overrun, *, started: bool, now: float) -> str:
    """Why a model call was not made, for the person whose task it was."""
    left = max(0.0, o.limit - o.used - o.reserved)
    head = "I stopped here" if started else "I can't start on this"
    held = f", {amount(o.unit, o.reserved)} held by requests under way" if o.reserved else ""
    kept = " What I did so far is kept." if started else ""
    return (f"{head}: the next step needs up to {amount(o.unit, o.wanted)} and "
            f"{budget_name(o.scope, o.subject, o.window, o.unit)} has "
            f"{amount(o.unit, left)} left ({of(o.unit, o.used, o.limit)} used{held}). "
            f"It resets {when(o.resets_at, o.timezone, now)}.{kept}")


def fullest(use: BudgetUse) -> tuple[Unit, float, float]:
    """The unit of ``use`` closest to its limit: (unit, used, limit)."""
    shares: list[tuple[float, Unit, float, float]] = []
    if use.tokens:
        shares.append((use.used_tokens / use.tokens, "tokens", use.used_tokens, use.tokens))
    if use.usd:
        shares.append((use.used_usd / use.usd, "usd", use.used_usd, use.usd))
    if not shares:
        return ("tokens", float(use.used_tokens), float(use.tokens or 0))
    _, unit, used, limit = max(shares)
    return unit, used, limit


def warning(use: BudgetUse, *, now: float) -> str:
    """The once-a-window notice that a budget is nearly used up."""
    unit, used, limit = fullest(use)
    share = int(used * 100 // limit) if limit else 100
    return (f"Heads-up: {share}% of {budget_name(use.scope, use.subject, use.window, unit)} "
            f"is used ({of(unit, used, limit)}). It resets "
            f"{when(use.resets_at, use.timezone, now)}.")


def usage(uses: list[BudgetUse], *, now: float) -> str:
    """A person's budgets in their current windows (``/usage``)."""
    if not uses:
        return "No budget applies to you here: your use of the model is not limited."
    lines = ["Your use of the model, in the current windows:"]
    for use in uses:
        parts = []
        rows: tuple[tuple[Unit, float, float | None, float], ...] = (
            ("tokens", use.used_tokens, use.tokens, use.reserved_tokens),
            ("usd", use.used_usd, use.usd, use.reserved_usd))
        for unit, used, limit, held in rows:
            if limit is None:
                continue
            share = f" ({int(used * 100 // limit)}%)" if limit else ""
            busy = f", {amount(unit, held)} held by requests under way" if held else ""
            parts.append(f"{of(unit, used, limit)}{share}{busy}")
        name = budget_name(use.scope, use.subject, use.window, "tokens").replace(
            " token budget", " budget")
        exempt = " (your role is exempt from it)" if use.exempt else ""
        lines.append(f"• {name[0].upper()}{name[1:]}{exempt}: {' and '.join(parts)}; resets "
                     f"{when(use.resets_at, use.timezone, now)}")
    return "\n".join(lines)

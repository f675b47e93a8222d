"""Calendar: the current hour, day and month of a time zone, as budget windows.

A window is named by its start on the local calendar (``d20260501``), so a new window has
new counters and nothing needs resetting; days and months begin at local midnight (a day
across a DST change is 23 or 25 hours long). Each window is worked out once and kept until
it ends: a budget check costs a comparison, not a time-zone conversion.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from .base import Period

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Span:
    """One window: its name and its bounds (Unix seconds, end excluded)."""

    label: str
    start: float
    end: float


class Calendar:
    """Windows in one time zone, by a clock (``time.time``; tests give their own)."""

    def __init__(self, timezone: str = "UTC", clock: Clock = time.time) -> None:
        self.timezone = timezone
        self.zone = ZoneInfo(timezone)
        self.clock = clock
        self._current: dict[Period, Span] = {}

    def now(self) -> float:
        """The clock's time."""
        return self.clock()

    def span(self, period: Period, now: float | None = None) -> Span:
        """The window of ``period`` that holds ``now`` (the clock's time by default)."""
        at = self.clock() if now is None else now
        kept = self._current.get(period)
        if kept is not None and kept.start <= at < kept.end:
            return kept
        span = self._compute(period, at)
        if now is None:
            self._current[period] = span
        return span

    def _compute(self, period: Period, at: float) -> Span:
        local = dt.datetime.fromtimestamp(at, self.zone)
        if period == "hour":
            start = local.replace(minute=0, second=0, microsecond=0)
            # An hour is an hour (also in zones whose offset is not whole hours).
            begins = start.timestamp()
            return Span(f"h{start:%Y%m%d%H}", begins, begins + 3600.0)
        if period == "day":
            first = local.date()
            following = first + dt.timedelta(days=1)
            label = f"d{first:%Y%m%d}"
        else:
            first = local.date().replace(day=1)
            following = (first + dt.timedelta(days=32)).replace(day=1)
            label = f"m{first:%Y%m}"
        return Span(label, self._midnight(first), self._midnight(following))

    def _midnight(self, day: dt.date) -> float:
        return dt.datetime.combine(day, dt.time(), self.zone).timestamp()

"""Failure policies: the circuit breaker shared across tasks, and per-task failure memory."""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]

#: Identical failing calls allowed before the tool is withdrawn for the task (2 retries).
SAME_FAILURE_LIMIT = 3
#: Consecutive failures of one tool after which the model is warned.
CONSECUTIVE_HINT_AFTER = 2


class CircuitBreaker:
    """Opens after ``failures`` failures within ``window`` seconds; half-opens after
    ``cooldown`` seconds, letting one trial call through; closes again when it succeeds."""

    def __init__(self, *, failures: int = 5, window: float = 60.0, cooldown: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures
        self.window = window
        self.cooldown = cooldown
        self._clock = clock
        self._recent: deque[float] = deque()
        self._opened_at: float | None = None
        self._trial_running = False

    @property
    def state(self) -> BreakerState:
        """closed, open or half_open, as of now."""
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.cooldown:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """Whether a call may go through now (claims the single half-open trial)."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._trial_running:
            self._trial_running = True
            return True
        return False

    def retry_in(self) -> float:
        """Seconds until the breaker half-opens (0 when it is not open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self.cooldown - (self._clock() - self._opened_at))

    def record_success(self) -> None:
        """A call succeeded: a half-open breaker closes."""
        self._recent.clear()
        self._opened_at = None
        self._trial_running = False

    def record_failure(self) -> None:
        """A call failed: count it, and open (or re-open) when over the threshold."""
        now = self._clock()
        if self._trial_running or self.state == "half_open":
            self._opened_at, self._trial_running = now, False
            return
        self._recent.append(now)
        while self._recent and now - self._recent[0] > self.window:
            self._recent.popleft()
        if len(self._recent) >= self.failures:
            self._opened_at = now

    def release_trial(self) -> None:
        """A trial call ended without a verdict (e.g. it was rejected before running)."""
        self._trial_running = False


class BreakerBoard:
    """One CircuitBreaker per tool, shared by every task of the process."""

    def __init__(self, *, failures: int = 5, window: float = 60.0, cooldown: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._options = {"failures": failures, "window": window, "cooldown": cooldown}
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def for_tool(self, name: str) -> CircuitBreaker:
        """The breaker of one tool, created on first use."""
        breaker = self._breakers.get(name)
        if breaker is None:
            breaker = self._breakers[name] = CircuitBreaker(
                failures=int(self._options["failures"]), window=self._options["window"],
                cooldown=self._options["cooldown"], clock=self._clock)
        return breaker

    def states(self) -> dict[str, BreakerState]:
        """Every breaker's state, for /status and metrics."""
        return {name: b.state for name, b in self._breakers.items()}


@dataclass
class TaskFailures:
    """What one task has seen fail; decides when a tool is withdrawn or the model warned."""

    same: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    consecutive: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unavailable: set[str] = field(default_factory=set)

    def record_failure(self, tool: str, arguments: dict[str, object], error: str
                       ) -> tuple[bool, str | None]:
        """Count a failure; returns (tool now unavailable, hint for the model or None)."""
        key = (tool, json.dumps(arguments, sort_keys=True, default=str), error)
        self.same[key] += 1
        self.consecutive[tool] += 1
        if self.same[key] >= SAME_FAILURE_LIMIT:
            self.unavailable.add(tool)
            return True, (f"{tool} failed {self.same[key]} times with the same arguments and "
                          "error; it is unavailable for the rest of this task. Use another "
                          "approach or explain the problem to the user.")
        if self.consecutive[tool] >= CONSECUTIVE_HINT_AFTER:
            return False, (f"{tool} has failed {self.consecutive[tool]} times in a row and may "
                           "be unavailable; consider another approach.")
        return False, None

    def record_success(self, tool: str) -> None:
        """A success resets the consecutive count."""
        self.consecutive[tool] = 0

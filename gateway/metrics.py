"""Prometheus metrics at ``GET /metrics``: HTTP requests, inbound messages, tasks, model
calls (their latency, those under way) and tokens, what model calls cost and the budgets'
refusals and warnings, tools, deliveries, feedback on answers, the queue (its depth and
oldest work), dead letters, pending approvals, and the hub's live agents.

Task, model and tool figures come from the event bus (a task's AGENT_FINISHED carries its
report), so the agent loop knows nothing of them. Requests are counted by route template
(``/agent/tasks/{task_id}``), never by raw path, so the number of series stays bounded.

With several serving processes on one port (``serve --processes N``) a scrape reaches any
one of them, so the processes share prometheus_client's multiprocess files
(``PROMETHEUS_MULTIPROC_DIR``, set by ``serve``) and every scrape sums them all.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess
from prometheus_client import values as prometheus_values

from adapters.base import InboundMessage, Routed
from agent_core import Event, EventType
from agent_core.task import PAUSED

#: The Content-Type of ``Metrics.exposition()``.
CONTENT_TYPE = CONTENT_TYPE_LATEST

#: The environment variable prometheus_client reads at import for multiprocess mode.
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"

#: Seconds between two flushes of the requests' counts and durations into their metrics
#: (``Metrics.flush``): what another process's scrape may miss of this one's, at most.
FLUSH_EVERY = 1.0

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """The gateway's metrics, in a registry of their own."""

    def __init__(self) -> None:
        #: Report totals a resumed run started from, by task (until it finishes).
        self._counted: dict[str, dict[str, Any]] = {}
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_DIR))
        # In multiprocess mode values live in files and a scrape reads them all; the
        # metrics are then registered nowhere (a registry would read only this process).
        self.registry = CollectorRegistry()
        reg = None if self.multiprocess else self.registry
        self.requests = Counter(
            "hermes_http_requests_total", "HTTP requests answered, by route template, method "
            "and status", ["route", "method", "status"], registry=reg)
        self.request_seconds = Histogram(
            "hermes_http_request_duration_seconds", "Time to answer an HTTP request (SSE "
            "streams: until they end)", ["route"], buckets=_FAST, registry=reg)
        self.inbound = Counter(
            "hermes_inbound_messages_total", "Messages from the channels, by what the router "
            "did with them (queued, duplicate, steered, command, refused, ignored)",
            ["channel", "status"], registry=reg)
        self.tasks = Counter("hermes_tasks_total", "Agent tasks ended, by outcome",
                             ["outcome"], registry=reg)
        self.task_seconds = Histogram("hermes_task_duration_seconds", "Wall time of a task",
                                      buckets=_SLOW, registry=reg)
        self.model_calls = Counter("hermes_model_calls_total", "Model calls made by tasks",
                                   registry=reg)
        self.model_seconds = Counter("hermes_model_seconds_total",
                                     "Seconds tasks spent waiting for the model", registry=reg)
        self.tokens = Counter("hermes_model_tokens_total", "Tokens, by kind",
                              ["kind"], registry=reg)
        self.model_retries = Counter("hermes_model_retries_total",
                                     "Model calls retried after an error", registry=reg)
        self.model_fallbacks = Counter("hermes_model_fallbacks_total",
                                       "Switches to a fallback model", registry=reg)
        self.spent_tokens = Counter(
            "hermes_spent_tokens_total", "Tokens of settled model calls, by model, channel "
            "and the scope of the budgets they were charged to (none: no budget applied; a "
            "call charged to budgets of several scopes counts under each)",
            ["model", "channel", "scope"], registry=reg)
        self.spent_usd = Counter(
            "hermes_spent_usd_total", "US dollars of settled model calls (priced models "
            "only: HERMES_MODEL_PRICES), by model, channel and budget scope, as the tokens",
            ["model", "channel", "scope"], registry=reg)
        self.budget_refusals = Counter(
            "hermes_budget_refusals_total", "Model calls a budget refused, by its scope and "
            "window", ["scope", "window"], registry=reg)
        self.budget_warnings = Counter(
            "hermes_budget_warnings_total", "Budgets that passed their warning share (once "
            "per window and subject), by scope and window", ["scope", "window"], registry=reg)
        self.tool_calls = Counter("hermes_tool_calls_total", "Tool calls, by tool and result",
                                  ["tool", "result"], registry=reg)
        self.tool_seconds = Histogram("hermes_tool_duration_seconds", "Time a tool call took",
                                      ["tool"], buckets=_FAST, registry=reg)
        self.deliveries = Counter(
            "hermes_deliveries_total", "Attempts to send replies to the channels, by result "
            "(sent; failed: retried unless dead; dead: given up)", ["channel", "result"],
            registry=reg)
        self.feedback = Counter(
            "hermes_feedback_total", "👍 / 👎 pressed under answers, by channel, model and "
            "rating (good, bad)", ["channel", "model", "rating"], registry=reg)
        self.active_tasks = Gauge("hermes_active_conversations", "Conversations being worked "
                                  "on by this gateway", multiprocess_mode="livesum",
                                  registry=reg)
        self.model_waiting = Gauge("hermes_model_calls_waiting", "Model calls waiting for "
                                   "their turn under LLM_MAX_CONCURRENCY, this process",
                                   multiprocess_mode="livesum", registry=reg)
        self.waiting = Gauge("hermes_conversations_waiting", "Conversations with queued work "
                             "(all replicas; read from the store at scrape)",
                             multiprocess_mode="mostrecent", registry=reg)
        self.model_call_seconds = Histogram(
            "hermes_model_call_duration_seconds", "Time one model call took (retries "
            "included), by model", ["model"], buckets=_SLOW, registry=reg)
        self.model_in_flight = Gauge("hermes_model_calls_in_flight", "Model calls under way "
                                     "(this process; summed over processes)",
                                     multiprocess_mode="livesum", registry=reg)
        # Read from the store at scrape: the same for every replica.
        self.oldest = Gauge("hermes_queue_oldest_seconds", "Seconds the conversation waiting "
                            "longest has had unfinished work (0: none)",
                            multiprocess_mode="mostrecent", registry=reg)
        self.dead_letters = Gauge("hermes_dead_letters", "Replies given up on and kept as "
                                  "dead letters (all replicas)",
                                  multiprocess_mode="mostrecent", registry=reg)
        self.approvals_pending = Gauge("hermes_approvals_pending", "Tool calls waiting for "
                                       "a person's approval (all replicas)",
                                       multiprocess_mode="mostrecent", registry=reg)
        self.hub_agents = Gauge("hermes_hub_agents", "Agents live on the hub, as its discovery "
                                "says (with HERMES_HUB)", multiprocess_mode="mostrecent",
                                registry=reg)
        # The children counted on every request, message and task, by their label values
        # (each of a bounded set: route templates, statuses, channels, outcomes).
        self._request = _Children(self.requests)
        self._request_seconds = _Children(self.request_seconds)
        self._inbound = _Children(self.inbound)
        self._deliveries = _Children(self.deliveries)
        self._tasks = _Children(self.tasks)
        self._spent_tokens = _Children(self.spent_tokens)
        self._spent_usd = _Children(self.spent_usd)
        self._prompt_tokens = self.tokens.labels("prompt")
        self._completion_tokens = self.tokens.labels("completion")
        #: HTTP requests answered since the last ``flush``, by (route, method, status), and
        #: their durations by route: kept in plain Python, handed to the two metrics above at
        #: each scrape and every :data:`FLUSH_EVERY` seconds. Counted into them directly,
        #: they cost ~12 us a request in a burst of 200 webhooks (their locks and bucket
        #: search, on the way to every acknowledgement), ~1.3 us a request in a loop at flush.
        self._answered: dict[tuple[str, str, str], int] = {}
        self._timed: dict[str, list[float]] = {}

    # --- the event bus -------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        """EventBus handler."""
        payload = event.payload
        match event.type:
            case EventType.AGENT_STARTED if payload.get("resumed"):
                # A resumed run's report goes on from the totals so far: count the rest.
                self._counted[event.task_id] = payload.get("report") or {}
            case EventType.AGENT_FINISHED:
                report = payload.get("report") or {}
                counted = self._counted.pop(event.task_id, {})

                def more(name: str) -> float:
                    return max(0.0, float(report.get(name) or 0) - float(counted.get(name) or 0))

                outcome = str(payload.get("outcome") or report.get("outcome") or "unknown")
                self._tasks(outcome).inc()
                if outcome not in PAUSED:  # a paused task's run resumes later
                    self.task_seconds.observe(float(report.get("wall_time") or 0.0))
                self.model_calls.inc(more("model_calls"))
                self.model_seconds.inc(more("model_time"))
                self._prompt_tokens.inc(more("prompt_tokens"))
                self._completion_tokens.inc(more("completion_tokens"))
            case EventType.TOOL_FINISHED | EventType.TOOL_ERROR:
                tool = str(payload.get("tool") or "unknown")
                ok = event.type == EventType.TOOL_FINISHED
                self.tool_calls.labels(tool, "ok" if ok else "error").inc()
                self.tool_seconds.labels(tool).observe(float(payload.get("seconds") or 0.0))
            case EventType.MODEL_CALLED:
                self.model_call_seconds.labels(str(payload.get("model") or "unknown")).observe(
                    float(payload.get("seconds") or 0.0))
            case EventType.MODEL_RETRY:
                self.model_retries.inc()
            case EventType.MODEL_FALLBACK:
                self.model_fallbacks.inc()
            case _:
                pass

    def routed(self, msg: InboundMessage, routed: Routed) -> None:
        """Router callback: what became of an inbound message."""
        self._inbound(msg.channel, routed.status).inc()

    def spent(self, model: str, channel: str, scopes: tuple[str, ...], tokens: int,
              usd: float | None) -> None:
        """Budget listener: one settled model call."""
        for scope in dict.fromkeys(scopes) or ("none",):
            self._spent_tokens(model, channel, scope).inc(tokens)
            if usd is not None:
                self._spent_usd(model, channel, scope).inc(usd)

    def budget_refused(self, scope: str, window: str) -> None:
        """Budget listener: a refused call."""
        self.budget_refusals.labels(scope, window).inc()

    def budget_warned(self, scope: str, window: str) -> None:
        """Budget listener: a warning posted."""
        self.budget_warnings.labels(scope, window).inc()

    def delivered(self, channel: str, result: str) -> None:
        """Deliverer callback: one attempt's result."""
        self._deliveries(channel, result).inc()

    def rated(self, channel: str, model: str, good: bool) -> None:
        """Feedback callback: a 👍 or 👎 under an answer."""
        self.feedback.labels(channel, model or "unknown", "good" if good else "bad").inc()

    # --- HTTP ----------------------------------------------------------------------------
    def request_done(self, request: web.Request, status: int, started: float) -> None:
        """Count and time one answered request (``started``: its ``time.perf_counter()``);
        in the metrics from the next ``flush``."""
        seconds = time.perf_counter() - started
        route = request.match_info.route.resource
        # Any method on any path is counted as one "unmatched" route, never by its path.
        template = "unmatched" if route is None else route.canonical
        key = (template, request.method, str(status))
        self._answered[key] = self._answered.get(key, 0) + 1
        timed = self._timed.get(template)
        if timed is None:
            self._timed[template] = [seconds]
        else:
            timed.append(seconds)

    def flush(self) -> None:
        """Hand the requests answered since the last flush to their metrics (every scrape
        does, and the gateway every :data:`FLUSH_EVERY` seconds and as it stops)."""
        answered, self._answered = self._answered, {}
        timed, self._timed = self._timed, {}
        for key, count in answered.items():
            self._request(*key).inc(count)
        for template, durations in timed.items():
            histogram = self._request_seconds(template)
            for seconds in durations:
                histogram.observe(seconds)

    def sample(self, figures: dict[str, float]) -> None:
        """Set the gauges read from the store (or the hub) at scrape, by name:
        ``oldest_seconds``, ``dead_letters``, ``approvals_pending``, ``hub_agents``."""
        gauges = {"oldest_seconds": self.oldest, "dead_letters": self.dead_letters,
                  "approvals_pending": self.approvals_pending, "hub_agents": self.hub_agents}
        for name, value in figures.items():
            gauges[name].set(value)

    def exposition(self) -> bytes:
        """The text a scrape gets."""
        self.flush()
        if self.multiprocess:
            registry = CollectorRegistry()
            prometheus_multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)


class _Children:
    """A metric's children by their label values, each looked up once: ``labels()``
    checks and locks on every call (~1.2 us against ~0.3 for the kept child)."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


def use_multiprocess_dir(path: Path) -> None:
    """Share metrics through files in ``path`` (emptied first): for the first of several
    serving processes, before any metric exists; the others inherit the setting."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ[MULTIPROCESS_DIR] = str(path)
    # prometheus_client picks its value class when it is imported, from the environment.
    prometheus_values.ValueClass = prometheus_values.get_value_class()  # type: ignore[no-untyped-call]


def forget_process(pid: int) -> None:
    """Leave a dead serving process's live gauges out of the sums from now on (its counters
    stay counted: what it did happened)."""
    if os.environ.get(MULTIPROCESS_DIR):
        prometheus_multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]

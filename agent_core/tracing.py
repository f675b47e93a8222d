"""OpenTelemetry traces, exported over OTLP/HTTP when the standard variables say where
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; also
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_SDK_DISABLED``).

Unset, nothing of the SDK is imported and every ``span()`` is a shared no-op object.

A trace's id is the task's id (a 32-digit hex uuid), the trace id our logs and events
already carry, so one id finds a message's log lines, its events and its spans. Spans
cross processes as W3C ``traceparent`` strings: in the work item between the router and a
worker, in the task's state across a pause for approval, in NATS headers across the hub.
Span attributes never carry message text, tool arguments or exception messages (they may
hold anything, secrets included): names, ids, counts, outcomes and error types only.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import random
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

#: The NATS/HTTP header a span's context travels in.
TRACEPARENT = "traceparent"

_state: dict[str, Any] = {"tracer": None, "provider": None}
_next_trace_id: ContextVar[int | None] = ContextVar("hermes_next_trace_id", default=None)


class _NoSpan:
    """What ``span()`` is, and yields, when tracing is off: accepts everything, records
    nothing (a context manager of its own, not a generator per block)."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing: an exception goes on."""

    def set_attribute(self, key: str, value: Any) -> None:
        """Nothing."""

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Nothing."""

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Nothing."""

    def fail(self, error_type: str) -> None:
        """Nothing."""


NO_SPAN = _NoSpan()


def endpoint_configured() -> bool:
    """Whether the environment asks for traces."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def enabled() -> bool:
    """Whether spans are being recorded in this process."""
    return _state["tracer"] is not None


def configure(service: str) -> bool:
    """Start exporting when the environment names an endpoint (once per process; later
    calls keep the first service name). Returns whether tracing is on."""
    if _state["tracer"] is not None:
        return True
    if not endpoint_configured():
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.error("OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not "
                  "installed: pip install 'hermes-gateway[otel]'; no traces are exported")
        return False

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
    provider = TracerProvider(resource=Resource.create(attributes), id_generator=_ids())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _state.update(provider=provider, tracer=provider.get_tracer("hermes"))
    atexit.register(shutdown)
    log.info("exporting traces over OTLP as %s", os.environ.get("OTEL_SERVICE_NAME", service))
    return True


def flush(timeout_seconds: float = 10.0) -> bool:
    """Export what has been recorded (blocks this thread up to ``timeout_seconds``)."""
    provider = _state["provider"]
    return bool(provider.force_flush(int(timeout_seconds * 1000))) if provider else True


def shutdown() -> None:
    """Export what is left and stop; tracing is off afterwards."""
    provider = _state["provider"]
    _state.update(provider=None, tracer=None)
    if provider is not None:
        provider.shutdown()


def _ids() -> Any:
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    class TaskIds(IdGenerator):
        """A new trace takes the id ``span(trace_id=...)`` asked for (the task's)."""

        def generate_span_id(self) -> int:
            return random.getrandbits(64) or 1

        def generate_trace_id(self) -> int:
            return _next_trace_id.get() or random.getrandbits(128) or 1

    return TaskIds()


def _trace_id_of(value: str | None) -> int | None:
    if value and len(value) == 32:
        with contextlib.suppress(ValueError):
            return int(value, 16) or None
    return None


def _start(tracer: Any, name: str, attributes: Mapping[str, Any] | None, *,
           parent: str | None, trace_id: str | None, start_time: float | None,
           kind: str) -> Any:
    from opentelemetry import context as otel_context
    from opentelemetry.trace import SpanKind

    ctx = None
    if parent:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        ctx = TraceContextTextMapPropagator().extract({TRACEPARENT: parent})
    elif trace_id is not None:
        ctx = otel_context.Context()  # a root: no current span is its parent
    wanted = _trace_id_of(trace_id) if trace_id is not None and not parent else None
    token = _next_trace_id.set(wanted) if wanted else None
    try:
        return tracer.start_span(
            name, context=ctx, attributes=dict(attributes or {}),
            kind=getattr(SpanKind, kind.upper()),
            start_time=int(start_time * 1e9) if start_time is not None else None)
    finally:
        if token is not None:
            _next_trace_id.reset(token)


def span(name: str, attributes: Mapping[str, Any] | None = None, *,
         parent: str | None = None, trace_id: str | None = None,
         start_time: float | None = None, kind: str = "internal"
         ) -> contextlib.AbstractContextManager[Any]:
    """A span around the block: the current span's child, or ``parent``'s (a traceparent
    string) when given, or the root of a new trace whose id is ``trace_id``. An exception
    leaving the block marks it failed with the exception's type (never its message)."""
    tracer = _state["tracer"]
    if tracer is None:
        return NO_SPAN
    return _recording(tracer, name, attributes, parent=parent, trace_id=trace_id,
                      start_time=start_time, kind=kind)


@contextlib.contextmanager
def _recording(tracer: Any, name: str, attributes: Mapping[str, Any] | None, *,
               parent: str | None, trace_id: str | None, start_time: float | None,
               kind: str) -> Iterator[Any]:
    from opentelemetry.trace import use_span

    started = _start(tracer, name, attributes, parent=parent, trace_id=trace_id,
                     start_time=start_time, kind=kind)
    wrapper = _Span(started)
    with use_span(started, end_on_exit=True, record_exception=False,
                  set_status_on_exception=False):
        try:
            yield wrapper
        except BaseException as exc:
            wrapper.fail(type(exc).__name__)
            raise


class _Span:
    """A recording span, with ``fail`` for an error type without its message."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set_attribute(self, key: str, value: Any) -> None:
        self._span.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._span.set_attributes(dict(attributes))

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        self._span.add_event(name, dict(attributes or {}))

    def fail(self, error_type: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, error_type))


def traceparent() -> str | None:
    """The current span's context as a W3C traceparent, or None when there is none."""
    if _state["tracer"] is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get(TRACEPARENT)


def record(name: str, attributes: Mapping[str, Any] | None = None, *, parent: str | None,
           trace_id: str | None, start_time: float, end_time: float) -> None:
    """A span for something that already happened (time in a queue, a wait for a person)."""
    tracer = _state["tracer"]
    if tracer is None:
        return
    done = _start(tracer, name, attributes, parent=parent, trace_id=trace_id,
                  start_time=start_time, kind="internal")
    done.end(end_time=int(max(end_time, start_time) * 1e9))

"""An OTLP/HTTP trace receiver (what a collector listens on at /v1/traces): decodes the
protobuf export requests the OpenTelemetry SDK sends and keeps every span.

It runs in a thread of its own: the SDK exports from its own thread, and a flush waits for
the export, so a receiver on the test's event loop would never get to answer it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    name: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    status: int
    start_ns: int
    end_ns: int
    kind: int
    events: list[str] = field(default_factory=list)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class OTLPReceiver:
    """``url`` is what OTEL_EXPORTER_OTLP_ENDPOINT takes; ``spans`` what arrived."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.refused = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/traces" or \
                        self.headers.get("Content-Type") != "application/x-protobuf":
                    receiver.refused += 1
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._keep(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for resource in request.resource_spans:
                attrs = {a.key: _value(a.value) for a in resource.resource.attributes}
                for scope in resource.scope_spans:
                    for s in scope.spans:
                        self.spans.append(ReceivedSpan(
                            name=s.name, service=str(attrs.get("service.name", "")),
                            trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status=s.status.code, start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano, kind=s.kind,
                            events=[e.name for e in s.events]))

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

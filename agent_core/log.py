"""Structured logging: every line carries trace_id and conversation_id, and no secret.

``trace_context`` sets the ids for the code running inside it (contextvars follow asyncio
tasks); ``configure_logging`` installs a handler printing key=value text or JSON lines.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .redaction import redact

trace_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("trace_id", default="-")
conversation_id_var: contextvars.ContextVar[str] = contextvars.ContextVar(
    "conversation_id", default="-")


@contextmanager
def trace_context(trace_id: str, conversation_id: str) -> Iterator[None]:
    """Tag log lines emitted inside this block with the given ids."""
    t1 = trace_id_var.set(trace_id)
    t2 = conversation_id_var.set(conversation_id)
    try:
        yield
    finally:
        trace_id_var.reset(t1)
        conversation_id_var.reset(t2)


class ContextFilter(logging.Filter):
    """Adds trace_id and conversation_id to every record and redacts secrets."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.trace_id = trace_id_var.get()
        record.conversation_id = conversation_id_var.get()
        if record.args:
            record.msg = record.getMessage()
            record.args = None
        record.msg = redact(str(record.msg))
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "trace_id": getattr(record, "trace_id", "-"),
            "conversation_id": getattr(record, "conversation_id", "-"),
            "message": record.getMessage(),
        }
        if record.exc_text:
            data["exc"] = record.exc_text
        return json.dumps(data, ensure_ascii=False)


TEXT_FORMAT = ("%(asctime)s %(levelname)s %(name)s trace_id=%(trace_id)s "
               "conversation_id=%(conversation_id)s %(message)s")


def configure_logging(level: str = "INFO", *, json_lines: bool = False,
                      stream: TextIO | None = None) -> None:
    """Install the root handler (idempotent)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_hermes", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._hermes = True  # type: ignore[attr-defined]
    handler.addFilter(ContextFilter())
    formatter: logging.Formatter = JsonFormatter() if json_lines else logging.Formatter(
        TEXT_FORMAT)
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(level)
    # Libraries that log request URLs (which can carry a bot token) stay at WARNING.
    for noisy in ("httpx", "httpcore", "telegram", "slack_bolt", "slack_sdk", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))

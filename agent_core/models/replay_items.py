"""What the ReplayModelServer (``replay.py``) answers with: a scripted reply, a failure, a
raw body or stream, or a provider's recorded answer replayed verbatim."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: A scripted turn's ending, in each API's own words: (OpenAI, Anthropic, Ollama).
STOPS: dict[str, tuple[str, str, str]] = {
    "length": ("length", "max_tokens", "length"),
    "content_filter": ("content_filter", "end_turn", "stop"),
    "refusal": ("stop", "refusal", "stop"),
    "paused": ("stop", "pause_turn", "stop"),
    "stop_sequence": ("stop", "stop_sequence", "stop"),
}


@dataclass(slots=True)
class Reply:
    """A successful model turn: text and/or tool calls.

    ``refusal``: the model refuses (OpenAI's ``refusal`` field with content null,
    Anthropic's stop_reason refusal with the text as its explanation). ``stop``: a key of
    STOPS, the turn's ending in each API's words; with "length" the last tool call's
    arguments are cut in half, as an output cut at the token limit would be."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 20
    completion_tokens: int = 10
    delay: float = 0.0
    #: Of prompt_tokens, those reported as read from the provider's prompt cache.
    cached_tokens: int = 0
    #: Seconds between the pieces of a streamed answer (a model writing as it goes).
    pace: float = 0.0
    refusal: str = ""
    stop: str | None = None

    def stop_for(self, api: int, calls: bool) -> str:
        """The finish reason of this turn in API ``api`` (0 OpenAI, 1 Anthropic, 2 Ollama)."""
        if self.stop is not None:
            return STOPS[self.stop][api]
        if self.refusal:
            return STOPS["refusal"][api]
        return ("tool_calls", "tool_use", "stop")[api] if calls else \
            ("stop", "end_turn", "stop")[api]

    @classmethod
    def call(cls, name: str, arguments: dict[str, Any] | None = None, **kw: Any) -> Reply:
        """A reply with one native tool call."""
        return cls(tool_calls=[{"name": name, "arguments": arguments or {}}], **kw)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reply:
        """From a recorded session's turn."""
        usage = data.get("usage") or [20, 10]
        return cls(text=data.get("text", ""), tool_calls=list(data.get("tool_calls", [])),
                   prompt_tokens=int(usage[0]), completion_tokens=int(usage[1]),
                   delay=float(data.get("delay", 0.0)))


@dataclass(slots=True)
class Failure:
    """An HTTP error answer (status, body, headers), optionally after a delay."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(slots=True)
class Raw:
    """A 200 answer with an arbitrary body (to test malformed responses)."""

    body: str
    delay: float = 0.0


@dataclass(slots=True)
class RawStream:
    """A 200 streamed answer made of arbitrary lines (to test malformed streams): SSE
    lines for OpenAI and Anthropic, NDJSON lines for Ollama, sent as they are."""

    lines: list[str]
    delay: float = 0.0


@dataclass(slots=True)
class Verbatim:
    """A provider's answer replayed byte for byte: a recorded body or SSE stream (error
    events included), with its status and headers, written ``chunk`` bytes at a time
    (None: at once) so that events split across reads are replayed too."""

    body: str | bytes
    status: int = 200
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    chunk: int | None = None
    delay: float = 0.0


Item = Reply | Failure | Raw | RawStream | Verbatim
Responder = Callable[[str, dict[str, Any]], Item]

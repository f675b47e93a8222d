"""ModelAdapter: the one interface every model backend implements."""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..messages import Message

log = logging.getLogger(__name__)

#: Receives (event_name, payload) for things the caller may want to show: partial text while
#: streaming ("MODEL_DELTA") and a switch to a fallback model ("MODEL_FALLBACK").
ModelEventHook = Callable[[str, dict[str, Any]], None]


@dataclass(slots=True)
class Usage:
    """Token usage reported by the provider for one call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Of the prompt's tokens, those the provider served from its prompt cache (where it
    #: says: OpenAI's cached_tokens, Anthropic's cache reads, DeepSeek's cache hits).
    cached_prompt_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_prompt_tokens + other.cached_prompt_tokens,
        )


@dataclass(slots=True)
class RawToolCall:
    """A native tool call as the provider sent it; arguments may still be a JSON string."""

    name: str
    arguments: str | dict[str, Any]
    id: str | None = None


@dataclass(slots=True)
class ModelRequest:
    """Everything one model call needs."""

    messages: list[Message]
    #: Tools in the neutral form {"name", "description", "parameters"}; adapters convert.
    tools: list[dict[str, Any]] = field(default_factory=list)
    temperature: float = 0.1
    max_tokens: int = 2048
    stream: bool = False
    on_event: ModelEventHook | None = None

    def emit(self, name: str, payload: dict[str, Any]) -> None:
        """Report a model-side event to the caller, if it listens."""
        if self.on_event is not None:
            self.on_event(name, payload)


#: How a model turn ended, whatever the provider called it (``stop_of``):
#:
#: - ``end``: the model finished (stop, end_turn, stop_sequence)
#: - ``tool_calls``: the model asks for tools (tool_calls, tool_use)
#: - ``length``: the output was cut at the token limit (length, max_tokens, model_length,
#:   model_context_window_exceeded): a tool call in it is cut, never run
#: - ``refusal``: the model declined (Anthropic's stop_reason refusal, OpenAI's refusal field);
#:   the text is the refusal the person sees
#: - ``content_filter``: the provider's filter withheld the output
#: - ``paused``: Anthropic's pause_turn, still paused after the adapter continued the turn
Stop = Literal["end", "tool_calls", "length", "refusal", "content_filter", "paused"]

_STOPS: dict[str, Stop] = {
    "stop": "end", "end_turn": "end", "stop_sequence": "end", "eos": "end",
    "eos_token": "end",  # Hugging Face TGI
    # Ollama answers "load" / "unload" for a request that only (un)loaded the model.
    "load": "end", "unload": "end",
    "tool_calls": "tool_calls", "tool_use": "tool_calls", "function_call": "tool_calls",
    "length": "length", "max_tokens": "length", "model_length": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal", "content_filter": "content_filter", "pause_turn": "paused",
}


def stop_of(reason: str | None) -> Stop:
    """The Stop a provider's finish or stop reason means (an unknown one: ``end``)."""
    if not reason:
        return "end"
    stop = _STOPS.get(reason)
    if stop is None:
        log.info("unknown finish reason %r read as the end of the turn", reason)
        return "end"
    return stop


@dataclass(slots=True)
class ModelResponse:
    """What a model returned for one call."""

    text: str = ""
    tool_calls: list[RawToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    #: The provider's own word for how the turn ended (shown, never branched on).
    finish_reason: str | None = None
    #: How the turn ended, in one vocabulary: the loop branches on this.
    stop: Stop = "end"


class ModelAdapter(abc.ABC):
    """A chat model behind one async method."""

    #: Short name for logs and events, e.g. "openai:gpt-4o-mini".
    name: str = "model"

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send the conversation and return the model's turn.

        Raises a ModelError subclass from agent_core.errors on failure.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most adapters need none
        """Release connections."""

    @property
    def calls_waiting(self) -> int:
        """Calls waiting for their turn under LLM_MAX_CONCURRENCY now."""
        return 0

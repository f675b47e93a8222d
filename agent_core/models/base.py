"""ModelAdapter: the one interface every model backend implements."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message

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


@dataclass(slots=True)
class ModelResponse:
    """What a model returned for one call."""

    text: str = ""
    tool_calls: list[RawToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None


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

"""The parts of each provider's (non-streamed) response body that the adapters read, as
pydantic shapes: a 2xx body that does not fit is a ModelResponseError naming the field,
not a TypeError from deep in a parser. Only what is read is declared (everything else is
ignored); cosmetic fields (model, finish reason) take any value and are shown as text."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ModelResponseError
from .base import Usage

Shape = TypeVar("Shape", bound=BaseModel)


def read(shape: type[Shape], data: dict[str, Any], provider: str) -> Shape:
    """``data`` as ``shape``, or ModelResponseError saying where it does not fit."""
    try:
        return shape.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ModelResponseError(
            f"{provider!r} answered with a body of an unexpected shape: {where}: "
            f"{first['msg']} ({exc.error_count()} problem(s))") from None


class _Shape(BaseModel):
    """Built at its first validation: a process builds the shapes of the provider it talks
    to (and whether it streams), not all 21."""

    model_config = ConfigDict(defer_build=True)


def text_of(value: Any) -> str:
    """A cosmetic field as text ("" for none)."""
    return "" if value is None else str(value)


class _Tokens(_Shape):
    """Token counts; a missing or null count is 0."""

    def count(self, name: str) -> int:
        value = getattr(self, name)
        return int(value) if value is not None and value > 0 else 0


# --- OpenAI-compatible chat/completions ------------------------------------------------------
class OpenAIPart(_Shape):
    """A content part (some compatible servers send content as a list of parts)."""

    type: str = "text"
    text: str = ""


class OpenAIFunction(_Shape):
    name: str = ""
    arguments: str | dict[str, Any] | None = None


class OpenAIToolCall(_Shape):
    id: str | None = None
    function: OpenAIFunction = Field(default_factory=OpenAIFunction)


class OpenAIMessage(_Shape):
    content: str | list[OpenAIPart] | None = None
    tool_calls: list[OpenAIToolCall] | None = None
    #: The model's refusal (OpenAI: content is null then); what the person is told.
    refusal: str | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content if p.type == "text")
        return self.content or ""


class OpenAIChoice(_Shape):
    message: OpenAIMessage = Field(default_factory=OpenAIMessage)
    finish_reason: Any = None


class OpenAIPromptDetails(_Tokens):
    cached_tokens: int | None = None


class OpenAIUsage(_Tokens):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: OpenAIPromptDetails | None = None
    #: DeepSeek's name for the prompt's tokens read from its cache.
    prompt_cache_hit_tokens: int | None = None

    def usage(self) -> Usage:
        """As the runtime counts it (cached tokens are part of the prompt's)."""
        details = self.prompt_tokens_details
        cached = max(details.count("cached_tokens") if details is not None else 0,
                     self.count("prompt_cache_hit_tokens"))
        return Usage(self.count("prompt_tokens"), self.count("completion_tokens"), cached)


class OpenAICompletion(_Shape):
    choices: list[OpenAIChoice] = Field(min_length=1)
    usage: OpenAIUsage | None = None
    model: Any = None


# --- Anthropic Messages ------------------------------------------------------------------------
class AnthropicBlock(_Shape):
    type: str
    text: str = ""
    id: str | None = None
    name: str = ""
    input: dict[str, Any] | None = None


class AnthropicUsage(_Tokens):
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: Prompt tokens read from, and written to, the prompt cache: not in input_tokens.
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def prompt(self) -> tuple[int, int]:
        """The prompt's tokens, all of them, and those read from the cache."""
        cached = self.count("cache_read_input_tokens")
        return (self.count("input_tokens") + cached
                + self.count("cache_creation_input_tokens"), cached)


class AnthropicStopDetails(_Shape):
    """Why a refusal stopped the turn (stop_details: type refusal, category, explanation)."""

    explanation: str | None = None


class AnthropicMessage(_Shape):
    content: list[AnthropicBlock]
    usage: AnthropicUsage | None = None
    model: Any = None
    stop_reason: Any = None
    stop_details: AnthropicStopDetails | None = None


# --- Ollama /api/chat --------------------------------------------------------------------------
class OllamaFunction(_Shape):
    name: str = ""
    arguments: dict[str, Any] | str | None = None


class OllamaToolCall(_Shape):
    id: str | None = None
    function: OllamaFunction = Field(default_factory=OllamaFunction)


class OllamaMessage(_Shape):
    content: str | None = None
    tool_calls: list[OllamaToolCall] | None = None


class OllamaChat(_Tokens):
    message: OllamaMessage
    model: Any = None
    done_reason: Any = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None


# --- streamed pieces -----------------------------------------------------------------------
class OpenAIDeltaFunction(_Shape):
    name: str | None = None
    arguments: str | None = None


class OpenAIDeltaCall(_Shape):
    index: int | None = None
    id: str | None = None
    function: OpenAIDeltaFunction = Field(default_factory=OpenAIDeltaFunction)


class OpenAIDelta(_Shape):
    content: str | None = None
    tool_calls: list[OpenAIDeltaCall] | None = None
    refusal: str | None = None


class OpenAIChunkChoice(_Shape):
    delta: OpenAIDelta = Field(default_factory=OpenAIDelta)
    finish_reason: Any = None


class OpenAIChunk(_Shape):
    """One ``data:`` chunk of a streamed chat/completions answer."""

    choices: list[OpenAIChunkChoice] | None = None
    usage: OpenAIUsage | None = None
    model: Any = None
    #: An error inside the stream (OpenAI, OpenRouter: a chunk holding ``error``).
    error: Any = None


class AnthropicStreamBlock(_Shape):
    type: str | None = None
    id: str | None = None
    name: str = ""


class AnthropicStreamDelta(_Shape):
    type: str | None = None
    text: str = ""
    partial_json: str = ""
    thinking: str = ""
    signature: str = ""
    stop_reason: Any = None
    stop_details: AnthropicStopDetails | None = None


class AnthropicStreamMessage(_Shape):
    model: Any = None
    usage: AnthropicUsage | None = None


class AnthropicEvent(_Shape):
    """One event of a streamed Messages answer (the fields of every kind it reads)."""

    type: str | None = None
    index: int | None = None
    message: AnthropicStreamMessage | None = None
    content_block: AnthropicStreamBlock | None = None
    delta: AnthropicStreamDelta | None = None
    usage: AnthropicUsage | None = None
    error: dict[str, Any] | None = None


class OllamaLine(_Tokens):
    """One NDJSON line of a streamed /api/chat answer."""

    message: OllamaMessage | None = None
    done: bool = False
    error: Any = None
    model: Any = None
    done_reason: Any = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None

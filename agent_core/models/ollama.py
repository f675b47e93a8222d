"""Ollama's native /api/chat (NDJSON streaming, tool calls with object arguments)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from .._toolformats import to_openai, tool_call_as_text, tool_result_as_text
from ..errors import ModelResponseError
from ..messages import Message
from ._bodies import OllamaChat, OllamaLine, OllamaMessage, read, text_of
from ._http import HTTPModel, InStreamError
from ._parts import ollama_message
from .base import ModelRequest, ModelResponse, RawToolCall, Usage, stop_of


class OllamaModel(HTTPModel):
    """A model served by Ollama, over its native API."""

    name_prefix = "ollama"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of an /api/chat call."""
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": [self._message(m) for m in request.messages],
            # Ollama streams unless told otherwise.
            "stream": request.stream,
            "options": {"temperature": request.temperature, "num_predict": request.max_tokens},
        }
        if request.tools and self.native_tools:
            body["tools"] = to_openai(request.tools)
        return body

    def _message(self, m: Message) -> dict[str, Any]:
        if m.role == "assistant" and m.tool_calls:
            if not self.native_tools:
                return {"role": "assistant", "content": tool_call_as_text(m)}
            return {"role": "assistant", "content": m.content,
                    "tool_calls": [{"function": {"name": c.name, "arguments": c.arguments}}
                                   for c in m.tool_calls]}
        if m.role == "tool":
            if not self.native_tools:
                return {"role": "user", "content": tool_result_as_text(m)}
            return {"role": "tool", "content": m.content, "tool_name": m.name or ""}
        if m.parts:
            return ollama_message(m)
        return {"role": m.role, "content": m.content}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.build_body(request)
        if not request.stream:
            return await self.http.post("/api/chat", body, request, parse_chat)
        return await self.http.stream("/api/chat", body, request,
                                      lambda lines: _read_stream(lines, request))


async def _read_stream(lines: AsyncIterator[str], request: ModelRequest) -> ModelResponse:
    """A streamed /api/chat answer (NDJSON)."""
    text: list[str] = []
    calls: list[RawToolCall] = []
    final = OllamaLine()
    async for line in lines:
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise ModelResponseError(f"unreadable stream line: {line[:200]!r}") from exc
        if not isinstance(raw, dict):
            raise ModelResponseError(f"stream line is not an object: {line[:200]!r}")
        if raw.get("error"):
            raise InStreamError(raw)  # {"error": "..."}: the model failed mid-answer
        chunk = read(OllamaLine, raw, "ollama")
        if chunk.message is not None:
            if chunk.message.content:
                text.append(chunk.message.content)
                request.emit("MODEL_DELTA", {"text": chunk.message.content})
            calls.extend(_calls(chunk.message))
        if chunk.done:
            final = chunk
            break
    return _response("".join(text), calls, Usage(final.count("prompt_eval_count"),
                                                  final.count("eval_count")),
                     text_of(final.model), text_of(final.done_reason) or None)


def _calls(message: OllamaMessage) -> list[RawToolCall]:
    return [RawToolCall(name=c.function.name, arguments=c.function.arguments or {}, id=c.id)
            for c in message.tool_calls or ()]


def _response(text: str, calls: list[RawToolCall], usage: Usage, model: str,
              done_reason: str | None) -> ModelResponse:
    """The turn with its Stop: Ollama says "stop" for a turn with tool calls too."""
    stop = stop_of(done_reason)
    if calls and stop == "end":
        stop = "tool_calls"
    return ModelResponse(text, calls, usage, model, done_reason, stop)


def parse_chat(data: dict[str, Any]) -> ModelResponse:
    """A ModelResponse from a non-streamed /api/chat body."""
    if not isinstance(data.get("message"), dict):
        raise ModelResponseError(f"no message in the response: {str(data)[:200]}")
    body = read(OllamaChat, data, "ollama")
    return _response(body.message.content or "", _calls(body.message),
                     Usage(body.count("prompt_eval_count"), body.count("eval_count")),
                     text_of(body.model), text_of(body.done_reason) or None)

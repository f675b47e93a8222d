"""OpenAI-compatible chat/completions: OpenAI, vLLM, llama.cpp server, Ollama's /v1,
DeepSeek, Qwen and anything else that speaks the same API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from .._toolformats import to_openai, tool_call_as_text, tool_result_as_text
from ..errors import ModelResponseError
from ..messages import Message
from ._bodies import OpenAIChunk, OpenAICompletion, OpenAIUsage, read, text_of
from ._http import HTTPModel, InStreamError, sse_data
from ._parts import openai_content
from .base import ModelRequest, ModelResponse, RawToolCall, Usage, stop_of


class OpenAICompatModel(HTTPModel):
    """Chat completions with native tool calls (or the JSON text protocol when disabled)."""

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of a chat/completions call."""
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": [self._message(m) for m in request.messages],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        if request.tools and self.native_tools:
            body["tools"] = to_openai(request.tools)
            body["tool_choice"] = "auto"
        if request.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _message(self, m: Message) -> dict[str, Any]:
        if m.role == "assistant" and m.tool_calls:
            if not self.native_tools:
                return {"role": "assistant", "content": tool_call_as_text(m)}
            return {
                "role": "assistant",
                "content": m.content or None,
                "tool_calls": [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name,
                                  "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                    for c in m.tool_calls
                ],
            }
        if m.role == "tool":
            if not self.native_tools:
                return {"role": "user", "content": tool_result_as_text(m)}
            return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
        if m.parts:
            return {"role": m.role, "content": openai_content(m)}
        return {"role": m.role, "content": m.content}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.build_body(request)
        if request.stream:
            response = await self.http.stream(
                "/chat/completions", body, request,
                lambda lines: _read_stream(lines, request))
        else:
            response = await self.http.post("/chat/completions", body, request,
                                            parse_completion)
        response.model = response.model or self.model_name
        return response


#: Finish reasons that are errors, and the error type each stands for: Mistral and
#: OpenRouter end a failed stream with "error"; DeepSeek ends one its servers could not
#: finish with "insufficient_system_resource".
_FAILED = {"error": "server_error", "insufficient_system_resource": "service_unavailable"}


async def _read_stream(lines: AsyncIterator[str], request: ModelRequest) -> ModelResponse:
    """A ModelResponse from a streamed chat/completions answer (SSE)."""
    text: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage = Usage()
    finish: str | None = None
    model = ""
    async for event, data in sse_data(lines):
        if data.strip() == "[DONE]":
            break
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise ModelResponseError(f"unreadable stream chunk: {data[:200]!r}") from exc
        if not isinstance(raw, dict):
            raise ModelResponseError(f"stream chunk is not an object: {data[:200]!r}")
        if event == "error" or raw.get("error"):
            raise InStreamError(raw)  # as openai-python does: any chunk holding an error
        chunk = read(OpenAIChunk, raw, "openai")
        model = text_of(chunk.model) or model
        if chunk.usage is not None:
            usage = chunk.usage.usage()
        for choice in chunk.choices or ():
            delta = choice.delta
            for piece, into in ((delta.content, text), (delta.refusal, refusal)):
                if piece:
                    into.append(piece)
                    request.emit("MODEL_DELTA", {"text": piece})
            for part in delta.tool_calls or ():
                slot = calls.setdefault(part.index if part.index is not None else len(calls),
                                        {"id": None, "name": "", "arguments": ""})
                slot["id"] = part.id or slot["id"]
                slot["name"] += part.function.name or ""
                slot["arguments"] += part.function.arguments or ""
            finish = text_of(choice.finish_reason) or finish
    _fail_on(finish)
    tool_calls = [RawToolCall(name=c["name"], arguments=c["arguments"], id=c["id"])
                  for _, c in sorted(calls.items())]
    return _response("".join(text), "".join(refusal), tool_calls, usage, model=model,
                     finish=finish)


def parse_completion(data: dict[str, Any]) -> ModelResponse:
    """A ModelResponse from a (non-streamed) chat/completions body."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ModelResponseError(f"no choices in the response: {str(data)[:200]}")
    body = read(OpenAICompletion, data, "openai")
    choice = body.choices[0]
    finish = text_of(choice.finish_reason) or None
    _fail_on(finish)
    calls = [RawToolCall(name=c.function.name, arguments=c.function.arguments or "{}", id=c.id)
             for c in choice.message.tool_calls or ()]
    usage = body.usage or OpenAIUsage()
    return _response(choice.message.text, choice.message.refusal or "", calls,
                     usage.usage(),
                     model=text_of(body.model), finish=finish)


def _fail_on(finish: str | None) -> None:
    if finish in _FAILED:
        raise InStreamError({"error": {"type": _FAILED[finish], "message": (
            f"the model stopped with finish_reason {finish!r}")}})


def _response(text: str, refusal: str, calls: list[RawToolCall], usage: Usage, *, model: str,
              finish: str | None) -> ModelResponse:
    """The turn, its Stop read from the finish reason, or ``refusal`` when the model
    refused (OpenAI sends the refusal in its own field, content null, finish_reason stop)."""
    stop = stop_of(finish)
    if refusal.strip():
        text, stop = (f"{text}\n\n{refusal}" if text.strip() else refusal), "refusal"
    elif calls and stop == "end":
        stop = "tool_calls"
    return ModelResponse(text, calls, usage, model, finish, stop)

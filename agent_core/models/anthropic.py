"""Anthropic Messages API with tools (tool_use / tool_result blocks).

Every stop_reason is read (``base.stop_of``): end_turn, stop_sequence, tool_use,
max_tokens, model_context_window_exceeded, refusal (the explanation is the answer) and
pause_turn, whose turn is sent back as it is, up to ``MAX_CONTINUATIONS`` times, as the
API's documentation says to continue it. An ``error`` event in the stream is the error it
names (overloaded_error: as a 529)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from .._toolformats import to_anthropic, tool_call_as_text, tool_result_as_text
from ..errors import ModelPausedError, ModelResponseError
from ..messages import Message
from ._bodies import AnthropicEvent, AnthropicMessage, AnthropicUsage, read, text_of
from ._http import HTTPModel, InStreamError, sse_data
from ._parts import anthropic_blocks
from .base import ModelRequest, ModelResponse, RawToolCall, Usage, stop_of

API_VERSION = "2023-06-01"


class AnthropicModel(HTTPModel):
    """Claude models over the Messages API."""

    name_prefix = "anthropic"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of a /v1/messages call."""
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        turns: list[dict[str, Any]] = []
        for m in request.messages:
            if m.role == "system":
                continue
            role, blocks = self._blocks(m)
            # The API wants strictly alternating roles: merge consecutive same-role turns.
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        if not turns or turns[0]["role"] != "user":
            turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(start)"}]})
        body: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "messages": turns,
        }
        if system:
            body["system"] = system
        if request.tools and self.native_tools:
            body["tools"] = to_anthropic(request.tools)
        if request.stream:
            body["stream"] = True
        return body

    def _blocks(self, m: Message) -> tuple[str, list[dict[str, Any]]]:
        if m.role == "assistant" and m.tool_calls:
            if not self.native_tools:
                return "assistant", [{"type": "text", "text": tool_call_as_text(m)}]
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": m.content}] if m.content else [])
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                       for c in m.tool_calls]
            return "assistant", blocks
        if m.role == "tool":
            if not self.native_tools:
                return "user", [{"type": "text", "text": tool_result_as_text(m)}]
            return "user", [{"type": "tool_result", "tool_use_id": m.tool_call_id,
                             "content": m.content or "(empty)"}]
        role = "assistant" if m.role == "assistant" else "user"
        if m.parts:
            return role, anthropic_blocks(m)
        return role, [{"type": "text", "text": m.content or "(empty)"}]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.build_body(request)
        turn = ModelResponse(model=self.model_name)
        for _ in range(MAX_CONTINUATIONS + 1):
            if request.stream:
                part, blocks = await self.http.stream(
                    "/v1/messages", body, request, lambda lines: _read_stream(lines, request))
            else:
                part, blocks = await self.http.post("/v1/messages", body, request,
                                                    _parse_with_blocks)
            _merge(turn, part)
            if part.stop != "paused":
                return turn
            # pause_turn: the server tools' loop hit its limit; the documented way on is to
            # send the turn back as it is, and the model continues it.
            body = {**body, "messages": [*body["messages"],
                                         {"role": "assistant", "content": blocks}]}
        raise ModelPausedError(self.name, MAX_CONTINUATIONS)


#: How many times a paused turn (pause_turn) is sent back before giving up.
MAX_CONTINUATIONS = 3


def _merge(turn: ModelResponse, part: ModelResponse) -> None:
    """``part`` (a continuation of a paused turn) appended to ``turn``."""
    turn.text += part.text
    turn.tool_calls += part.tool_calls
    turn.usage = turn.usage + part.usage
    turn.model = part.model or turn.model
    turn.finish_reason, turn.stop = part.finish_reason, part.stop


async def _read_stream(lines: AsyncIterator[str], request: ModelRequest
                       ) -> tuple[ModelResponse, list[dict[str, Any]]]:
    """A streamed Messages answer: the turn, and its content blocks as the API would send
    them back (for continuing a paused turn)."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    usage = Usage()
    stop: str | None = None
    explanation = ""
    model = ""
    async for event, data in sse_data(lines):
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise ModelResponseError(f"unreadable stream event: {data[:200]!r}") from exc
        if not isinstance(raw, dict):
            raise ModelResponseError(f"stream event is not an object: {data[:200]!r}")
        kind = raw.get("type") or event
        if kind == "error" or event == "error":
            raise InStreamError(raw)  # e.g. overloaded_error: what a 529 is over HTTP
        payload = read(AnthropicEvent, raw, "anthropic")
        if kind == "message_start" and payload.message is not None:
            model = text_of(payload.message.model) or model
            if payload.message.usage is not None:
                usage.prompt_tokens, usage.cached_prompt_tokens = \
                    payload.message.usage.prompt()
        elif kind == "content_block_start" and payload.content_block is not None:
            index = payload.index if payload.index is not None else len(blocks)
            blocks[index] = dict(raw.get("content_block") or {})
        elif kind == "content_block_delta" and payload.delta is not None:
            delta, index = payload.delta, payload.index or 0
            block = blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.type == "text_delta":
                block["text"] = block.get("text", "") + delta.text
                request.emit("MODEL_DELTA", {"text": delta.text})
            elif delta.type == "input_json_delta":
                partial[index] = partial.get(index, "") + delta.partial_json
            elif delta.type == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.thinking
            elif delta.type == "signature_delta":
                block["signature"] = delta.signature
        elif kind == "message_delta":
            if payload.delta is not None:
                stop = text_of(payload.delta.stop_reason) or stop
                if payload.delta.stop_details is not None:
                    explanation = payload.delta.stop_details.explanation or ""
            if payload.usage is not None:
                usage.completion_tokens = payload.usage.count("output_tokens")
        elif kind == "message_stop":
            break
    calls = []
    for index, block in sorted(blocks.items()):
        if block.get("type") in ("tool_use", "server_tool_use"):
            arguments = partial.get(index, "")
            if block["type"] == "tool_use":  # a server tool is the provider's to run
                calls.append(RawToolCall(name=str(block.get("name") or ""),
                                         arguments=arguments or "{}", id=block.get("id")))
            block["input"] = _object(arguments)
    text = "".join(str(b.get("text") or "") for _, b in sorted(blocks.items())
                   if b.get("type") == "text")
    ordered = [b for _, b in sorted(blocks.items())]
    return _turn(text, calls, usage, model, stop, explanation=explanation), ordered


def _parse_with_blocks(data: dict[str, Any]) -> tuple[ModelResponse, list[dict[str, Any]]]:
    content = data.get("content")
    return parse_message(data), list(content) if isinstance(content, list) else []


def parse_message(data: dict[str, Any]) -> ModelResponse:
    """A ModelResponse from a (non-streamed) Messages API body."""
    if not isinstance(data.get("content"), list):
        raise ModelResponseError(f"no content blocks in the response: {str(data)[:200]}")
    body = read(AnthropicMessage, data, "anthropic")
    text = "".join(b.text for b in body.content if b.type == "text")
    calls = [RawToolCall(name=b.name, arguments=b.input or {}, id=b.id)
             for b in body.content if b.type == "tool_use"]
    usage = body.usage or AnthropicUsage()
    explanation = body.stop_details.explanation or "" if body.stop_details else ""
    prompt, cached = usage.prompt()
    return _turn(text, calls, Usage(prompt, usage.count("output_tokens"), cached),
                 text_of(body.model), text_of(body.stop_reason) or None,
                 explanation=explanation)


def _turn(text: str, calls: list[RawToolCall], usage: Usage, model: str, stop_reason: str | None,
          *, explanation: str) -> ModelResponse:
    """The turn with its Stop. A refusal (stop_reason refusal: a classifier stopped the
    answer) shows the refusal's explanation, never the text cut short before it."""
    stop = stop_of(stop_reason)
    if stop == "refusal":
        text, calls = explanation, []
    return ModelResponse(text, calls, usage, model, stop_reason, stop)


def _object(partial_json: str) -> dict[str, Any]:
    try:
        value = json.loads(partial_json) if partial_json.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}

"""Anthropic Messages API with tools (tool_use / tool_result blocks)."""

from __future__ import annotations

import json
from typing import Any

from .._toolformats import to_anthropic, tool_call_as_text, tool_result_as_text
from ..errors import ModelHTTPError, ModelResponseError
from ..messages import Message
from ._bodies import AnthropicEvent, AnthropicMessage, AnthropicUsage, read, text_of
from ._http import HTTPModel, sse_data
from ._parts import anthropic_blocks
from .base import ModelRequest, ModelResponse, RawToolCall, Usage

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
        if request.stream:
            return await self._complete_streaming(body, request)
        data = await self.http.post_json("/v1/messages", body, request)
        return parse_message(data)

    async def _complete_streaming(self, body: dict[str, Any], request: ModelRequest
                                  ) -> ModelResponse:
        text: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}
        usage = Usage()
        stop: str | None = None
        model = self.model_name
        async for event, data in sse_data(self.http.stream_lines("/v1/messages", body,
                                                                 request)):
            try:
                raw = json.loads(data)
            except ValueError as exc:
                raise ModelResponseError(f"unreadable stream event: {data[:200]!r}") from exc
            if not isinstance(raw, dict):
                raise ModelResponseError(f"stream event is not an object: {data[:200]!r}")
            payload = read(AnthropicEvent, raw, "anthropic")
            kind = payload.type or event
            if kind == "message_start" and payload.message is not None:
                model = text_of(payload.message.model) or model
                if payload.message.usage is not None:
                    usage.prompt_tokens = payload.message.usage.count("input_tokens")
            elif kind == "content_block_start" and payload.content_block is not None:
                block = payload.content_block
                blocks[payload.index if payload.index is not None else len(blocks)] = {
                    "type": block.type, "id": block.id, "name": block.name, "json": ""}
            elif kind == "content_block_delta" and payload.delta is not None:
                delta = payload.delta
                slot = blocks.setdefault(payload.index or 0, {"type": "text", "json": ""})
                if delta.type == "text_delta":
                    text.append(delta.text)
                    request.emit("MODEL_DELTA", {"text": delta.text})
                elif delta.type == "input_json_delta":
                    slot["json"] += delta.partial_json
            elif kind == "message_delta":
                if payload.delta is not None:
                    stop = text_of(payload.delta.stop_reason) or stop
                if payload.usage is not None:
                    usage.completion_tokens = payload.usage.count("output_tokens")
            elif kind == "error":
                err = payload.error or {}
                raise ModelHTTPError(529 if err.get("type") == "overloaded_error" else 500,
                                     json.dumps(err), message=f"stream error: {err}")
            elif kind == "message_stop":
                break
        calls = [RawToolCall(name=b["name"], arguments=b["json"] or "{}", id=b["id"])
                 for _, b in sorted(blocks.items()) if b.get("type") == "tool_use"]
        return ModelResponse("".join(text), calls, usage, model, stop)


def parse_message(data: dict[str, Any]) -> ModelResponse:
    """A ModelResponse from a (non-streamed) Messages API body."""
    if not isinstance(data.get("content"), list):
        raise ModelResponseError(f"no content blocks in the response: {str(data)[:200]}")
    body = read(AnthropicMessage, data, "anthropic")
    text = "".join(b.text for b in body.content if b.type == "text")
    calls = [RawToolCall(name=b.name, arguments=b.input or {}, id=b.id)
             for b in body.content if b.type == "tool_use"]
    usage = body.usage or AnthropicUsage()
    return ModelResponse(
        text=text, tool_calls=calls,
        usage=Usage(usage.count("input_tokens"), usage.count("output_tokens")),
        model=text_of(body.model), finish_reason=text_of(body.stop_reason) or None,
    )

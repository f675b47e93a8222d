"""Whatever a provider (or a proxy in front of one) sends back with a 200, plain or
streamed, each model adapter either reads a ModelResponse from it or raises
ModelResponseError, the error the loop knows how to retry and fall back from: never a
TypeError or KeyError from deep in the parsing. Bodies (and each piece of a stream) are
valid OpenAI, Anthropic and Ollama replies, text and tool calls, with a field or two
dropped, retyped or replaced, or junk."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_core.errors import ModelResponseError
from agent_core.models.base import ModelAdapter, ModelResponse
from agent_core.models.replay import Raw, RawStream, ReplayModelServer
from tests.conftest import ModelFactory
from tests.integration.test_fuzz_http import _mutate, json_values
from tests.integration.test_model_adapters import request

_CALL_ARGS = {"city": "Oslo"}
SEEDS: dict[str, dict[str, Any]] = {
    "openai": {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "checking",
            "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": json.dumps(_CALL_ARGS)}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}},
    "anthropic": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "t1", "name": "get_weather",
                     "input": _CALL_ARGS}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 3}},
    "ollama": {
        "model": "m", "created_at": "2026-11-30T00:00:00Z", "done": True,
        "message": {"role": "assistant", "content": "checking",
                    "tool_calls": [{"function": {"name": "get_weather",
                                                 "arguments": _CALL_ARGS}}]},
        "prompt_eval_count": 5, "eval_count": 3},
}


@st.composite
def bodies(draw: Any, provider: str) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.text(max_size=50), json_values.map(json.dumps)))
    body: Any = SEEDS[provider]
    for _ in range(draw(st.integers(1, 3))):
        body = _mutate(body, draw)
    return json.dumps(body)


# The same 120 examples per provider on every run.
FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


async def read_or_refuse(model: ModelAdapter, stream: bool) -> None:
    """The adapter reads a well-typed ModelResponse, or raises ModelResponseError."""
    try:
        response = await model.complete(request(stream=stream))
    except ModelResponseError:
        return
    assert isinstance(response, ModelResponse)
    assert isinstance(response.text, str)
    assert all(isinstance(call.name, str) for call in response.tool_calls)


@pytest.mark.parametrize("provider", sorted(SEEDS))
@FUZZ
@given(data=st.data())
async def test_any_200_body_is_a_response_or_a_response_error(
        make_model: ModelFactory, model_server: ReplayModelServer, provider: str,
        data: st.DataObject) -> None:
    model_server.add(Raw(data.draw(bodies(provider), label="body")))
    await read_or_refuse(make_model(provider, max_retries=0), stream=False)


_DELTA_CALL = {"index": 0, "id": "c1", "type": "function",
               "function": {"name": "get_weather", "arguments": '{"city": '}}
STREAMS: dict[str, list[dict[str, Any]]] = {
    "openai": [
        {"model": "m", "choices": [{"index": 0, "delta": {"content": "check"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [_DELTA_CALL]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '"Oslo"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
    ],
    "anthropic": [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": "check"}},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "t1", "name": "get_weather"}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": '{"city": "Oslo"}'}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
         "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ],
    "ollama": [
        {"model": "m", "done": False, "message": {"role": "assistant", "content": "check"}},
        {"model": "m", "done": False, "message": {"role": "assistant", "content": "",
                                                  "tool_calls": [{"function": {
                                                      "name": "get_weather",
                                                      "arguments": _CALL_ARGS}}]}},
        {"model": "m", "done": True, "done_reason": "stop", "prompt_eval_count": 5,
         "eval_count": 3, "message": {"role": "assistant", "content": ""}},
    ],
}


@st.composite
def streams(draw: Any, provider: str) -> list[str]:
    pieces: list[Any] = list(STREAMS[provider])
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(pieces) - 1))
        pieces[index] = _mutate(pieces[index], draw) if draw(st.integers(0, 9)) else \
            draw(json_values)
    if provider == "ollama":
        return [json.dumps(p) + "\n" for p in pieces]
    lines = [f"data: {json.dumps(p)}\n\n" for p in pieces]
    return [*lines, "data: [DONE]\n\n"] if provider == "openai" else lines


@pytest.mark.parametrize("provider", sorted(STREAMS))
@FUZZ
@given(data=st.data())
async def test_any_stream_is_a_response_or_a_response_error(
        make_model: ModelFactory, model_server: ReplayModelServer, provider: str,
        data: st.DataObject) -> None:
    model_server.add(RawStream(data.draw(streams(provider), label="stream")))
    await read_or_refuse(make_model(provider, max_retries=0), stream=True)

"""The real model adapters over HTTP against the local replay server."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from agent_core.errors import (
    ContextLengthError,
    ModelAuthError,
    ModelHTTPError,
    ModelQuotaError,
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnreachableError,
)
from agent_core.messages import Message, ToolCall
from agent_core.models import FallbackModel, ModelRequest
from agent_core.models.replay import Failure, Raw, ReplayModelServer, Reply
from tests.conftest import ModelFactory, SleepRecorder

PROVIDERS = ["openai", "anthropic", "ollama"]
TOOLS = [{"name": "get_weather", "description": "Weather for a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]


def request(stream: bool = False, **kw: Any) -> ModelRequest:
    return ModelRequest(messages=[Message(role="system", content="be brief"),
                                  Message(role="user", content="weather in Oslo and Rome?")],
                        tools=TOOLS, stream=stream, **kw)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_text_reply_and_usage(provider: str, stream: bool, make_model: ModelFactory,
                                    model_server: ReplayModelServer) -> None:
    model_server.add(Reply("It is sunny in Oslo, and rainy in Rome today.", prompt_tokens=31,
                           completion_tokens=12))
    deltas: list[str] = []
    req = request(stream, on_event=lambda name, p: deltas.append(p["text"])
                  if name == "MODEL_DELTA" else None)
    response = await make_model(provider).complete(req)
    assert response.text == "It is sunny in Oslo, and rainy in Rome today."
    assert response.tool_calls == []
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (31, 12)
    if stream:
        assert len(deltas) > 3 and "".join(deltas) == response.text
    else:
        assert deltas == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_cached_prompt_tokens_are_reported_as_part_of_the_prompt(
        provider: str, stream: bool, make_model: ModelFactory,
        model_server: ReplayModelServer) -> None:
    # OpenAI counts them inside prompt_tokens; Anthropic apart from input_tokens.
    model_server.add(Reply("ok", prompt_tokens=1000, completion_tokens=7, cached_tokens=600))
    response = await make_model(provider).complete(request(stream))
    assert (response.usage.prompt_tokens, response.usage.completion_tokens,
            response.usage.cached_prompt_tokens) == (1000, 7, 600)


async def test_deepseeks_cache_hits_count_as_cached(make_model: ModelFactory,
                                                    model_server: ReplayModelServer) -> None:
    model_server.add(Raw(json.dumps({
        "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 3,
                  "prompt_cache_hit_tokens": 512, "prompt_cache_miss_tokens": 388}})))
    response = await make_model("openai").complete(request())
    assert response.usage.cached_prompt_tokens == 512


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_several_tool_calls_in_one_turn(provider: str, stream: bool,
                                              make_model: ModelFactory,
                                              model_server: ReplayModelServer) -> None:
    model_server.add(Reply(tool_calls=[
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
        {"name": "get_weather", "arguments": {"city": "Rome, \"Italy\" {x}"}}]))
    response = await make_model(provider).complete(request(stream))
    assert [c.name for c in response.tool_calls] == ["get_weather", "get_weather"]
    args = [c.arguments if isinstance(c.arguments, dict) else json.loads(c.arguments)
            for c in response.tool_calls]
    assert args == [{"city": "Oslo"}, {"city": "Rome, \"Italy\" {x}"}]
    _, body = model_server.requests[-1]
    if provider == "anthropic":
        assert body["tools"][0]["input_schema"] == TOOLS[0]["parameters"]
        assert body["system"] == "be brief"
    else:
        assert body["tools"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_tool_results_are_sent_in_the_provider_format(
        provider: str, make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(Reply("done"))
    history = [
        Message(role="system", content="sys"),
        Message(role="user", content="go"),
        Message(role="assistant", kind="decision", tool_calls=[
            ToolCall("c1", "get_weather", {"city": "Oslo"}),
            ToolCall("c2", "get_weather", {"city": "Rome"})]),
        Message(role="tool", tool_call_id="c1", name="get_weather", content="sunny"),
        Message(role="tool", tool_call_id="c2", name="get_weather", content="rain"),
    ]
    await make_model(provider).complete(ModelRequest(messages=history, tools=TOOLS))
    _, body = model_server.requests[-1]
    if provider == "openai":
        assert body["messages"][2]["tool_calls"][1]["id"] == "c2"
        assert body["messages"][4] == {"role": "tool", "tool_call_id": "c2", "content": "rain"}
    elif provider == "anthropic":
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["user", "assistant", "user"], "tool results merge into one user turn"
        results = body["messages"][2]["content"]
        assert [b["tool_use_id"] for b in results] == ["c1", "c2"]
    else:
        assert body["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
        assert body["messages"][3]["role"] == "tool"


async def test_text_protocol_mode_sends_no_tools_and_renders_calls_as_json(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(Reply('{"type": "final_answer", "content": "ok"}'))
    history = [Message(role="user", content="go"),
               Message(role="assistant", tool_calls=[ToolCall("c1", "get_weather", {"city": "X"})]),
               Message(role="tool", tool_call_id="c1", name="get_weather", content="sunny")]
    await make_model("openai", native_tools=False).complete(
        ModelRequest(messages=history, tools=TOOLS))
    _, body = model_server.requests[-1]
    assert "tools" not in body
    assert json.loads(body["messages"][1]["content"])["tool_name"] == "get_weather"
    assert body["messages"][2]["role"] == "user" and "sunny" in body["messages"][2]["content"]


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_auth_errors_fail_fast_naming_the_setting(
        provider: str, status: int, make_model: ModelFactory,
        model_server: ReplayModelServer) -> None:
    model_server.add(Failure(status, {"error": {"message": "invalid api key"}}))
    with pytest.raises(ModelAuthError, match="check LLM_API_KEY"):
        await make_model(provider).complete(request())
    assert len(model_server.requests) == 1, "no retry on a bad key"


async def test_connection_refused_names_the_url(make_model: ModelFactory) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ModelUnreachableError, match=f"cannot reach the model at '{url}"):
        await make_model("openai", base_url=url).complete(request())


async def test_429_backs_off_honouring_retry_after(
        make_model: ModelFactory, model_server: ReplayModelServer,
        sleeps: SleepRecorder) -> None:
    model_server.add(Failure(429, {"error": {"message": "slow down", "code": "rate_limit"}},
                             headers={"Retry-After": "7"}),
                     Failure(429, {"error": {"message": "slow down"}}),
                     Reply("finally"))
    response = await make_model("openai", max_retries=3).complete(request())
    assert response.text == "finally"
    assert sleeps.delays[0] == 7.0
    assert 0.5 <= sleeps.delays[1] <= 1.5, "exponential backoff with jitter without a header"


async def test_429_retry_after_ms_header(make_model: ModelFactory,
                                         model_server: ReplayModelServer,
                                         sleeps: SleepRecorder) -> None:
    model_server.add(Failure(429, headers={"retry-after-ms": "250"}), Reply("ok"))
    await make_model("anthropic").complete(request())
    assert sleeps.delays == [0.25]


async def test_persistent_429_becomes_a_rate_limit_error(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(*[Failure(429) for _ in range(3)])
    with pytest.raises(ModelRateLimitError):
        await make_model("openai", max_retries=2).complete(request())
    assert len(model_server.requests) == 3


async def test_quota_exhaustion_is_not_retried(make_model: ModelFactory,
                                               model_server: ReplayModelServer) -> None:
    model_server.add(Failure(429, {"error": {"message": "You exceeded your current quota",
                                             "code": "insufficient_quota"}}))
    with pytest.raises(ModelQuotaError, match="out of credit"):
        await make_model("openai").complete(request())
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_server_errors_are_retried_a_limited_number_of_times(
        status: int, make_model: ModelFactory, model_server: ReplayModelServer,
        sleeps: SleepRecorder) -> None:
    model_server.add(Failure(status), Failure(status), Reply("recovered"))
    assert (await make_model("anthropic", max_retries=2).complete(request())).text == "recovered"
    model_server.add(*[Failure(status) for _ in range(3)])
    with pytest.raises(ModelHTTPError) as err:
        await make_model("anthropic", max_retries=2).complete(request())
    assert err.value.status_code == status
    assert len(sleeps.delays) == 4


async def test_timeouts_are_retried_then_reported(make_model: ModelFactory,
                                                  model_server: ReplayModelServer) -> None:
    model_server.add(Reply("late", delay=1.0), Reply("late", delay=1.0))
    with pytest.raises(ModelTimeoutError, match=r"did not answer within 0\.2s"):
        await make_model("openai", timeout=0.2, max_retries=1).complete(request())
    assert len(model_server.requests) == 2


@pytest.mark.parametrize(("provider", "message"), [
    ("openai", "This model's maximum context length is 8192 tokens"),
    ("anthropic", "prompt is too long: 210000 tokens > 200000 maximum"),
])
async def test_context_length_errors_are_recognised(provider: str, message: str,
                                                    make_model: ModelFactory,
                                                    model_server: ReplayModelServer) -> None:
    model_server.add(Failure(400, {"error": {"message": message,
                                             "code": "context_length_exceeded"}}))
    with pytest.raises(ContextLengthError):
        await make_model(provider).complete(request())


async def test_a_malformed_success_body_is_a_response_error(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(Raw("<html>gateway</html>"), Raw('{"unexpected": true}'))
    with pytest.raises(ModelResponseError, match="not JSON"):
        await make_model("openai").complete(request())
    with pytest.raises(ModelResponseError, match="no choices"):
        await make_model("openai").complete(request())


async def test_a_body_of_the_wrong_shape_names_the_field(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    choice = {"message": {"role": "assistant", "content": "hi"}}
    model_server.add(Raw(json.dumps({"choices": [choice], "usage": {"prompt_tokens": "lots"}})))
    with pytest.raises(ModelResponseError, match=r"usage\.prompt_tokens"):
        await make_model("openai").complete(request())
    model_server.add(Raw(json.dumps({"content": [{"type": "text", "text": None}]})))
    with pytest.raises(ModelResponseError, match=r"content\.0\.text"):
        await make_model("anthropic").complete(request())


async def test_content_sent_as_a_list_of_parts_is_read_as_text(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    parts = [{"type": "text", "text": "Oslo: "}, {"type": "image_url", "image_url": {}},
             {"type": "text", "text": "rain"}]
    model_server.add(Raw(json.dumps({"choices": [{"message": {"content": parts}}]})))
    response = await make_model("openai").complete(request())
    assert response.text == "Oslo: rain"


async def test_fallback_chain_switches_and_says_so(make_model: ModelFactory,
                                                   model_server: ReplayModelServer) -> None:
    primary = make_model("openai", max_retries=0)
    backup = make_model("anthropic", max_retries=0)
    chain = FallbackModel([primary, backup], cooldown=60)
    events: list[tuple[str, dict[str, Any]]] = []
    model_server.add(Failure(429), Reply("from backup"))
    response = await chain.complete(request(on_event=lambda n, p: events.append((n, p))))
    assert response.text == "from backup"
    [(_name, payload)] = [e for e in events if e[0] == "MODEL_FALLBACK"]
    assert payload["from"] == primary.name and payload["to"] == backup.name
    assert payload["reason"] == "ModelRateLimitError"
    # During the cooldown the failed primary is tried last, not first.
    model_server.add(Reply("backup again"))
    assert (await chain.complete(request())).text == "backup again"
    assert model_server.requests[-1][0] == "/v1/messages"


async def test_fallback_does_not_hide_a_context_length_error(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    chain = FallbackModel([make_model("openai"), make_model("anthropic")])
    model_server.add(Failure(400, {"error": {"message": "maximum context length exceeded"}}))
    with pytest.raises(ContextLengthError):
        await chain.complete(request())
    assert len(model_server.requests) == 1


async def test_broken_stream_chunk_is_a_response_error(make_model: ModelFactory,
                                                       model_server: ReplayModelServer) -> None:
    model_server.add(Raw("data: {not json}\n\n"))
    with pytest.raises(ModelResponseError, match="unreadable stream chunk"):
        await make_model("openai").complete(request(stream=True))

"""The real adapters reading providers' answers as the providers send them: recorded bodies
and streams replayed byte for byte (tests/provider_fixtures.py says where each comes from),
and every terminal state of each API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.errors import (
    ModelAuthError,
    ModelHTTPError,
    ModelModeratedError,
    ModelPausedError,
    ModelQuotaError,
    ModelRateLimitError,
)
from agent_core.messages import Message
from agent_core.models import ModelRequest
from agent_core.models.replay import Failure, ReplayModelServer, Reply, Verbatim
from tests import provider_fixtures as fx
from tests.conftest import ModelFactory, SleepRecorder

TOOLS = [{"name": "get_weather", "description": "Weather for a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def request(stream: bool = False, events: list[tuple[str, dict[str, Any]]] | None = None
            ) -> ModelRequest:
    return ModelRequest(messages=[Message(role="user", content="weather in Oslo?")],
                        tools=TOOLS, stream=stream,
                        on_event=None if events is None else
                        lambda name, payload: events.append((name, payload)))


def json_body(text: str, status: int = 200) -> Verbatim:
    return Verbatim(text, status=status, content_type="application/json")


# --- refusals -----------------------------------------------------------------------------


async def test_an_openai_refusal_is_the_answer_marked_as_a_refusal(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(json_body(fx.OPENAI_REFUSAL))
    response = await make_model("openai").complete(request())
    assert response.stop == "refusal"
    assert response.text == "I'm very sorry, but I can't assist with that."
    assert response.finish_reason == "stop", "OpenAI says stop; the refusal field decides"


@pytest.mark.parametrize("chunk", [None, 7], ids=["whole", "split"])
async def test_a_streamed_openai_refusal_is_shown_as_it_comes(
        chunk: int | None, make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(Verbatim(fx.OPENAI_REFUSAL_STREAM, chunk=chunk))
    events: list[tuple[str, dict[str, Any]]] = []
    response = await make_model("openai").complete(request(stream=True, events=events))
    assert (response.stop, response.text) == (
        "refusal", "I'm very sorry, but I can't assist with that.")
    assert "".join(p["text"] for n, p in events if n == "MODEL_DELTA") == response.text
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (79, 12)


async def test_an_anthropic_refusal_shows_its_explanation_not_the_text_cut_before_it(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(Verbatim(fx.ANTHROPIC_REFUSAL_STREAM))
    response = await make_model("anthropic").complete(request(stream=True))
    assert (response.stop, response.finish_reason) == ("refusal", "refusal")
    assert response.text == "This request was refused due to policy."
    model_server.add(Reply("Step one is", refusal="Declined by policy."))
    response = await make_model("anthropic").complete(request())
    assert (response.stop, response.text) == ("refusal", "Declined by policy.")


# --- errors inside a 200 answer -----------------------------------------------------------


@pytest.mark.parametrize(("provider", "stream_text", "status"), [
    ("openai", fx.OPENAI_STREAM_SERVER_ERROR, 500),
    ("openai", fx.OPENROUTER_MID_STREAM_ERROR, 500),
    ("anthropic", fx.ANTHROPIC_OVERLOADED_STREAM, 529),
    ("ollama", fx.OLLAMA_STREAM_ERROR, 500),
], ids=["openai", "openrouter", "anthropic-overloaded", "ollama"])
async def test_an_error_inside_a_stream_is_retried_like_the_same_error_over_http(
        provider: str, stream_text: str, status: int, make_model: ModelFactory,
        model_server: ReplayModelServer, sleeps: SleepRecorder) -> None:
    content_type = "application/x-ndjson" if provider == "ollama" else "text/event-stream"
    model_server.add(Verbatim(stream_text, content_type=content_type),
                     Reply("It is sunny in Oslo."))
    events: list[tuple[str, dict[str, Any]]] = []
    response = await make_model(provider).complete(request(stream=True, events=events))
    assert response.text == "It is sunny in Oslo.", "never an empty reply"
    assert len(model_server.requests) == 2 and len(sleeps.delays) == 1
    [(_, retry)] = [e for e in events if e[0] == "MODEL_RETRY"]
    assert f"as HTTP {status}" in retry["reason"]
    # Out of retries, the error is raised with the provider's message.
    model_server.add(Verbatim(stream_text, content_type=content_type))
    with pytest.raises(ModelHTTPError) as err:
        await make_model(provider, max_retries=0).complete(request(stream=True))
    assert (err.value.status_code, err.value.in_stream, err.value.retryable) == (
        status, True, True)
    message = {"openai": "The server had an error", "anthropic": "Overloaded",
               "ollama": "an error was encountered"}
    assert any(m in str(err.value) for m in [*message.values(), "Provider disconnected"])


async def test_an_error_event_that_is_a_bad_request_is_not_retried(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    event = "event: error\ndata: " + fx.anthropic_error("invalid_request_error",
                                                        "tools.0: bad schema") + "\n\n"
    model_server.add(Verbatim(event))
    with pytest.raises(ModelHTTPError, match=r"tools\.0: bad schema") as err:
        await make_model("anthropic").complete(request(stream=True))
    assert (err.value.status_code, err.value.retryable) == (400, False)
    assert len(model_server.requests) == 1


async def test_a_200_body_holding_an_error_is_that_error(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(json_body(fx.OPENROUTER_NO_CREDITS))
    with pytest.raises(ModelQuotaError, match="Insufficient credits"):
        await make_model("openai").complete(request())
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_deepseek_out_of_resources_is_retried(
        stream: bool, make_model: ModelFactory, model_server: ReplayModelServer,
        sleeps: SleepRecorder) -> None:
    # DeepSeek's finish_reason "insufficient_system_resource" (its API reference): the
    # request was interrupted, an error like a 503, not an empty answer.
    if stream:
        failed = Verbatim('data: {"choices":[{"index":0,"delta":{"content":""},'
                          '"finish_reason":"insufficient_system_resource"}]}\n\n'
                          'data: [DONE]\n\n')
    else:
        failed = json_body(json.dumps({"choices": [{"index": 0, "message": {
            "role": "assistant", "content": ""},
            "finish_reason": "insufficient_system_resource"}]}))
    model_server.add(failed, Reply("done"))
    assert (await make_model("openai").complete(request(stream))).text == "done"
    assert len(sleeps.delays) == 1


@pytest.mark.parametrize("where", ["http", "stream"])
async def test_openrouters_moderation_block_is_not_read_as_a_bad_key(
        where: str, make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    if where == "http":
        model_server.add(json_body(fx.OPENROUTER_MODERATION, 403))
    else:  # OpenRouter sends an error met after the stream began as an SSE event
        model_server.add(Verbatim(f"data: {fx.OPENROUTER_MODERATION}\n\n"))
    with pytest.raises(ModelModeratedError) as err:
        await make_model("openai").complete(request(stream=where == "stream"))
    assert not isinstance(err.value, ModelAuthError)
    assert (err.value.status_code, err.value.retryable) == (403, False)
    assert "declined the request (violence/graphic)" in str(err.value)
    assert "LLM_API_KEY" not in str(err.value)
    assert len(model_server.requests) == 1


async def test_a_plain_403_is_still_a_key_without_access(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(json_body(json.dumps({"error": {"code": 403, "message": "Forbidden"}}),
                               403))
    with pytest.raises(ModelAuthError, match="LLM_API_KEY"):
        await make_model("openai").complete(request())


async def test_a_rate_limit_mentioning_billing_is_retried_after_its_hint(
        make_model: ModelFactory, model_server: ReplayModelServer,
        sleeps: SleepRecorder) -> None:
    model_server.add(json_body(fx.OPENAI_RATE_LIMIT, 429), Reply("ok"))
    assert (await make_model("openai").complete(request())).text == "ok"
    assert sleeps.delays == [20.0], "the message's 'Please try again in 20s'"


@pytest.mark.parametrize(("provider", "status", "body"), [
    ("openai", 429, fx.OPENAI_QUOTA),
    ("openai", 402, fx.DEEPSEEK_INSUFFICIENT_BALANCE),
    ("anthropic", 400, fx.ANTHROPIC_NO_CREDIT),
])
async def test_a_real_quota_error_is_not_retried(
        provider: str, status: int, body: str, make_model: ModelFactory,
        model_server: ReplayModelServer) -> None:
    model_server.add(json_body(body, status))
    with pytest.raises(ModelQuotaError) as err:
        await make_model(provider).complete(request())
    assert not err.value.retryable and len(model_server.requests) == 1


async def test_a_persistent_rate_limit_in_a_stream_becomes_a_rate_limit_error(
        make_model: ModelFactory, model_server: ReplayModelServer,
        sleeps: SleepRecorder) -> None:
    event = "event: error\ndata: " + fx.anthropic_error(
        "rate_limit_error", "Please try again in 3s.") + "\n\n"
    model_server.add(*[Verbatim(event) for _ in range(3)])
    with pytest.raises(ModelRateLimitError):
        await make_model("anthropic", max_retries=2).complete(request(stream=True))
    assert sleeps.delays == [3.0, 3.0] and len(model_server.requests) == 3


async def test_http_and_stream_retries_share_one_budget(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    event = "event: error\ndata: " + fx.anthropic_error("overloaded_error", "Overloaded")
    model_server.add(Failure(529), Verbatim(event + "\n\n"), Failure(503), Reply("late"))
    with pytest.raises(ModelHTTPError):
        await make_model("anthropic", max_retries=2).complete(request(stream=True))
    assert len(model_server.requests) == 3


# --- terminal states ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("provider", "reply", "finish", "stop"), [
    ("openai", Reply("done"), "stop", "end"),
    ("openai", Reply("a long answ", stop="length"), "length", "length"),
    ("openai", Reply.call("get_weather", {"city": "Oslo"}), "tool_calls", "tool_calls"),
    ("openai", Reply("", stop="content_filter"), "content_filter", "content_filter"),
    ("openai", Reply(refusal="I can't help with that."), "stop", "refusal"),
    ("anthropic", Reply("done"), "end_turn", "end"),
    ("anthropic", Reply("done", stop="stop_sequence"), "stop_sequence", "end"),
    ("anthropic", Reply("a long answ", stop="length"), "max_tokens", "length"),
    ("anthropic", Reply.call("get_weather", {"city": "Oslo"}), "tool_use", "tool_calls"),
    ("anthropic", Reply(refusal="Declined."), "refusal", "refusal"),
    ("ollama", Reply("done"), "stop", "end"),
    ("ollama", Reply("a long answ", stop="length"), "length", "length"),
    ("ollama", Reply.call("get_weather", {"city": "Oslo"}), "stop", "tool_calls"),
], ids=lambda v: v if isinstance(v, str) else None)
async def test_each_terminal_state_is_read(
        provider: str, reply: Reply, finish: str, stop: str, stream: bool,
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(reply)
    response = await make_model(provider).complete(request(stream))
    assert (response.finish_reason, response.stop) == (finish, stop)


@pytest.mark.parametrize(("provider", "text", "tool"), [
    ("openai", fx.OPENAI_TOOL_CALL_CUT_STREAM, "GetWeatherArgs"),
    ("anthropic", fx.ANTHROPIC_MAX_TOKENS_IN_TOOL_STREAM, "make_file"),
])
async def test_a_tool_call_cut_at_the_token_limit_is_reported_cut(
        provider: str, text: str, tool: str, make_model: ModelFactory,
        model_server: ReplayModelServer) -> None:
    model_server.add(Verbatim(text))
    response = await make_model(provider).complete(request(stream=True))
    assert response.stop == "length"
    [call] = response.tool_calls
    assert call.name == tool
    with pytest.raises(ValueError):
        json.loads(str(call.arguments))  # cut inside a string: only the loop decides


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_paused_anthropic_turn_is_sent_back_and_continued(
        stream: bool, make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    if stream:
        model_server.add(Verbatim(fx.anthropic_server_tool_stream("pause_turn")),
                         Verbatim(fx.ANTHROPIC_BASIC_STREAM))
    else:
        model_server.add(json_body(json.dumps({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "Let me search for that."},
                        {"type": "server_tool_use", "id": "srvtoolu_01WebSearch",
                         "name": "web_search", "input": {"query": "weather in Paris"}}],
            "stop_reason": "pause_turn", "usage": {"input_tokens": 42, "output_tokens": 40}})),
            Reply("Hello there!", prompt_tokens=11, completion_tokens=6))
    response = await make_model("anthropic").complete(request(stream))
    assert response.text == "Let me search for that.Hello there!"
    assert response.stop == "end" and response.tool_calls == [], "a server tool is not ours"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (53, 46)
    _, sent = model_server.requests[1]
    paused = sent["messages"][-1]
    assert paused["role"] == "assistant"
    assert paused["content"][1]["type"] == "server_tool_use"
    assert paused["content"][1]["input"] == {"query": "weather in Paris"}


async def test_a_turn_that_keeps_pausing_ends_in_an_error(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    model_server.add(*[Reply("searching", stop="paused") for _ in range(4)])
    with pytest.raises(ModelPausedError):
        await make_model("anthropic").complete(request())
    assert len(model_server.requests) == 4

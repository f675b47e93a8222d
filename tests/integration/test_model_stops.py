"""The loop gives each way a model turn ends its own path: a refusal is the answer, a
filtered answer says so, a tool call cut at the token limit is asked for again with a
raised limit (never run, never repaired), an error inside a stream is retried."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import TaskRequest, tool
from agent_core.model_turn import FILTERED, MODERATED, REFUSED
from agent_core.models.replay import Failure, ReplayModelServer, Reply, Verbatim
from tests import provider_fixtures as fx

RAN: list[dict[str, Any]] = []


@tool
def make_file(filename: str, lines_of_text: list[str]) -> str:
    """Write a file.

    Args:
        filename: Its name.
        lines_of_text: Its lines.
    """
    RAN.append({"filename": filename, "lines_of_text": lines_of_text})
    return f"wrote {filename}"


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    RAN.clear()


def request(text: str = "write my tax guide") -> TaskRequest:
    return TaskRequest(text=text, conversation_id="conv-stops",
                       permissions=frozenset({"read", "write"}))


def json_body(text: str) -> Verbatim:
    return Verbatim(text, content_type="application/json")


@pytest.mark.parametrize(("provider", "stream", "item", "answer"), [
    ("openai", False, json_body(fx.OPENAI_REFUSAL),
     "I'm very sorry, but I can't assist with that."),
    ("openai", True, Verbatim(fx.OPENAI_REFUSAL_STREAM),
     "I'm very sorry, but I can't assist with that."),
    ("anthropic", True, Verbatim(fx.ANTHROPIC_REFUSAL_STREAM),
     "This request was refused due to policy."),
    ("anthropic", False, Reply(refusal=" "), REFUSED),
], ids=["openai", "openai-stream", "anthropic-stream", "anthropic-no-explanation"])
async def test_a_refusal_is_the_answer_not_an_empty_reply_asked_again(
        provider: str, stream: bool, item: Any, answer: str, make_loop: Any,
        model_server: ReplayModelServer) -> None:
    model_server.add(item)
    loop, rec = make_loop([make_file], provider=provider, stream=stream)
    result = await loop.run(request())
    assert (result.outcome, result.text) == ("answered", answer)
    assert result.report.refusal == "refusal"
    assert len(model_server.requests) == 1, "a refusal is not re-asked"
    [decision] = rec.of("PLANNER_DECISION")
    assert decision.payload["rule"] == "refusal"
    assert rec.of("AGENT_FINISHED")[0].payload["report"]["refusal"] == "refusal"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_filtered_answer_says_so(stream: bool, make_loop: Any,
                                         model_server: ReplayModelServer) -> None:
    model_server.add(Verbatim(fx.OPENAI_CONTENT_FILTER_STREAM) if stream
                     else json_body(fx.OPENAI_CONTENT_FILTER))
    loop, _ = make_loop([make_file], stream=stream)
    result = await loop.run(request())
    assert (result.outcome, result.text) == ("answered", FILTERED)
    assert result.report.refusal == "content_filter"
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_input_the_providers_moderation_declined_is_answered_so_not_blamed_on_the_key(
        stream: bool, make_loop: Any, model_server: ReplayModelServer) -> None:
    """OpenRouter's 403 for flagged input is not a bad key: the person is told the
    provider's moderation declined the request, once, and the same input is not re-sent."""
    model_server.add(Verbatim(fx.OPENROUTER_MODERATION, status=403,
                              content_type="application/json"))
    loop, rec = make_loop([make_file], stream=stream)
    result = await loop.run(request())
    assert (result.outcome, result.text) == ("answered", MODERATED)
    assert result.report.refusal == "content_filter"
    assert len(model_server.requests) == 1
    assert "LLM_API_KEY" not in str([e.payload for e in rec.events])


@pytest.mark.parametrize(("provider", "cut"), [
    ("openai", Verbatim(fx.OPENAI_TOOL_CALL_CUT_STREAM)),
    ("anthropic", Verbatim(fx.ANTHROPIC_MAX_TOKENS_IN_TOOL_STREAM)),
    ("openai", Reply.call("make_file", {"filename": "taxes.txt", "lines_of_text": ["# Tax"]},
                          stop="length")),
], ids=["openai", "anthropic", "openai-scripted"])
async def test_a_tool_call_cut_at_the_limit_is_asked_again_with_a_raised_limit(
        provider: str, cut: Any, make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(cut, Reply.call("make_file", {"filename": "taxes.txt",
                                                   "lines_of_text": ["# Tax guide"]}),
                     Reply("Saved taxes.txt."))
    loop, rec = make_loop([make_file], provider=provider, stream=True, max_tokens=500)
    result = await loop.run(request())
    assert (result.outcome, result.text) == ("answered", "Saved taxes.txt.")
    assert RAN == [{"filename": "taxes.txt", "lines_of_text": ["# Tax guide"]}], \
        "only the complete call ran, never the cut one"
    limits = [body["max_tokens"] for _, body in model_server.requests]
    assert limits == [500, 1000, 500], "raised for the cut turn only"
    [retry] = [e for e in rec.of("MODEL_RETRY") if "max_tokens" in e.payload]
    assert retry.payload["max_tokens"] == 1000
    assert [d.payload["type"] for d in rec.of("PLANNER_DECISION")] == [
        "tool_call", "final_answer"], "the cut turn decided nothing"


async def test_a_call_still_cut_at_the_raised_limits_is_never_run_and_the_person_told(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(*[Verbatim(fx.ANTHROPIC_MAX_TOKENS_IN_TOOL_STREAM) for _ in range(3)])
    loop, rec = make_loop([make_file], provider="anthropic", stream=True, max_tokens=400)
    result = await loop.run(request())
    assert result.outcome == "failed"
    assert "cut off at its output limit" in result.text and "LLM_MAX_TOKENS" in result.text
    assert RAN == []
    assert [body["max_tokens"] for _, body in model_server.requests] == [400, 800, 1600]
    assert rec.of("TOOL_STARTED") == []


async def test_a_raised_limit_the_provider_refuses_ends_the_same_way(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Verbatim(fx.OPENAI_TOOL_CALL_CUT_STREAM),
                     Failure(400, {"error": {"message": "max_tokens is too large: 1000. This "
                                             "model supports at most 500 completion tokens",
                                             "type": "invalid_request_error"}}))
    loop, _ = make_loop([make_file], stream=True, max_tokens=500)
    result = await loop.run(request())
    assert result.outcome == "failed" and "cut off at its output limit" in result.text
    assert result.error == "the model's output was cut at 500 tokens inside 'GetWeatherArgs'"
    assert len(model_server.requests) == 2 and RAN == []


async def test_the_raised_limit_stays_inside_the_context_window(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Verbatim(fx.OPENAI_TOOL_CALL_CUT_STREAM), Reply("Done."))
    loop, _ = make_loop([make_file], stream=True, max_tokens=900, context_tokens=1_800)
    await loop.run(request())
    first, second = (body["max_tokens"] for _, body in model_server.requests)
    assert first == 900 and 900 < second < 1800


async def test_a_text_call_cut_at_the_limit_is_not_repaired_into_a_guess(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    cut = '<tool_call>\n{"name": "make_file", "arguments": {"filename": "tax'
    model_server.add(Reply(cut, stop="length"),
                     Reply('<tool_call>\n{"name": "make_file", "arguments": {"filename": '
                           '"taxes.txt", "lines_of_text": ["a"]}}\n</tool_call>'),
                     Reply("Saved."))
    loop, _ = make_loop([make_file], native_tools=False, repair_with_model=True,
                        max_tokens=300)
    result = await loop.run(request())
    assert (result.outcome, result.text) == ("answered", "Saved.")
    limits = [body["max_tokens"] for _, body in model_server.requests]
    assert limits == [300, 600, 300], "asked again with a raised limit, no repair call between"
    assert RAN == [{"filename": "taxes.txt", "lines_of_text": ["a"]}]


async def test_a_plain_answer_cut_at_the_limit_is_given_as_it_is(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Reply("The guide has three parts: income, deduc", stop="length"))
    loop, _ = make_loop([make_file])
    result = await loop.run(request())
    assert (result.outcome, result.text) == ("answered",
                                             "The guide has three parts: income, deduc")
    assert len(model_server.requests) == 1


async def test_an_error_inside_the_stream_is_retried_and_the_reply_starts_again(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.add(Verbatim(fx.ANTHROPIC_OVERLOADED_STREAM), Reply("All done."))
    loop, rec = make_loop([make_file], provider="anthropic", stream=True)
    result = await loop.run(request())
    assert (result.outcome, result.text) == ("answered", "All done.")
    [retry] = rec.of("MODEL_RETRY")
    assert "529" in retry.payload["reason"]

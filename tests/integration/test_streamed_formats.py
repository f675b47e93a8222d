"""A streamed reply in an open model's own text format, through the real OpenAI-compatible
adapter and the TaskLoop: the calls run, the answer is the answer, and what is streamed
to watchers never shows reasoning, tool-call markup or special tokens."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import TaskRequest, tool
from agent_core.models.replay import ReplayModelServer, Reply


@tool
async def get_weather(city: str, days: int = 1) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "days": days, "sky": "sunny"}


FIRST = {
    "qwen_xml": "<think>\nThey want the weather; maybe {\"name\": \"calc\"}? No.\n</think>\n"
                "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                "</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
    "harmony": "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
               "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
               "{\"city\": \"Paris\", \"days\": 2}<|call|>",
    "kimi": "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
            "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 2}<|tool_call_end|>"
            "<|tool_calls_section_end|>",
    "gemma4": "<|channel>thought\nNeed weather; call:calc? No.<channel|>Let me check.<|tool_call>"
              "call:get_weather{city:<|\"|>Paris<|\"|>,days:2}<tool_call|>",
    "dsml": "<think>Need weather, not calc.</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke "
            "name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris"
            "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">2"
            "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "magistral": "[THINK]Need weather; calc? no.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]"
                 "{\"city\": \"Paris\", \"days\": 2}",
}
FINAL = {
    "qwen_xml": "<think>It said sunny.</think>\nIt is sunny in Paris.",
    "harmony": "<|channel|>analysis<|message|>Sunny.<|end|><|start|>assistant<|channel|>final"
               "<|message|>It is sunny in Paris.<|return|>",
    "kimi": "It is sunny in Paris.",
    "gemma4": "<|channel>thought\nSunny.<channel|>It is sunny in Paris.",
    "dsml": "<think>Sunny.</think>It is sunny in Paris.",
    "magistral": "[THINK]Sunny.[/THINK]It is sunny in Paris.",
}


@pytest.mark.parametrize("style", sorted(FIRST))
async def test_a_streamed_text_format_runs_its_call_and_shows_no_markup(
        style: str, make_loop: Any, model_server: ReplayModelServer) -> None:
    model_server.chunk_size = 3  # pieces that cut every tag somewhere
    model_server.add(Reply(FIRST[style]), Reply(FINAL[style]))
    loop, recorder = make_loop([get_weather], native_tools=False, stream=True)
    result = await loop.run(TaskRequest(text="weather in Paris?", conversation_id=style))
    assert result.outcome == "answered" and result.text == "It is sunny in Paris."
    [started] = recorder.of("TOOL_STARTED")
    assert started.payload["arguments"] == {"city": "Paris", "days": 2}
    streamed = "".join(e.payload["text"] for e in recorder.of("MODEL_DELTA"))
    assert "It is sunny in Paris." in streamed
    for token in ("<think", "</think", "<tool_call", "<function", "<|", "calc", "Need weather",
                  "[THINK]", "[TOOL_CALLS]", "<channel|>", "DSML"):
        assert token not in streamed, (token, streamed)


async def test_several_calls_in_one_text_turn_each_run_and_each_answered(
        make_loop: Any, model_server: ReplayModelServer) -> None:
    seen: list[dict[str, Any]] = []

    def reply(path: str, body: dict[str, Any]) -> Reply:
        seen.append(body)
        return Reply("Paris is sunny, Rome too.")

    model_server.add(Reply("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                           "</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                           "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
                           "</function>\n</tool_call>"))
    model_server.responder = reply
    loop, recorder = make_loop([get_weather], native_tools=False)
    result = await loop.run(TaskRequest(text="weather in Paris and Rome?",
                                        conversation_id="two-calls"))
    assert result.text == "Paris is sunny, Rome too."
    assert len(recorder.of("TOOL_FINISHED")) == 2
    assert [e.payload["arguments"] for e in recorder.of("TOOL_STARTED")] == [
        {"city": "Paris"}, {"city": "Rome"}]
    last = " ".join(str(m.get("content")) for m in seen[-1]["messages"])
    assert '"city": "Paris"' in last and '"city": "Rome"' in last, "both results went back"

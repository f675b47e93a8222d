"""The parser against hostile text: huge, deeply nested, unbalanced tags of every format.
It never raises, always decides, and never takes long (a bound that catches catastrophic
backtracking or quadratic scans, far above the benchmark's figures: bench/parser.py)."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent_core import DecisionParser
from agent_core.models.base import ModelResponse
from agent_core.toolcalls import READERS, VisibleStream

TOOLS = ["get_weather", "calc"]
FRAGMENTS = sorted({m for r in READERS for m in r.markers} | {
    "</tool_call>", "</function>", "<parameter=", "</parameter>", "<arg_key>", "</arg_key>",
    "<arg_value>", "<think>", "</think>", "<seed:think>", "<|message|>", "<|call|>",
    "<|channel|>analysis", "to=functions.calc", "<｜tool▁sep｜>", "<invoke name=\"calc\">",
    "{", "}", "[", "]", "(", ")", '"', "\\", ":", ",", "```", "```json\n", "calc(", "a=",
    "get_weather", '{"name": "calc", "arguments": ', "\n", " ", "x"})
#: CPU seconds one parse may take on this machine even when its neighbours are busy; a
#: linear parse of these inputs takes a few milliseconds.
BOUND = 0.25

PARSER = DecisionParser(TOOLS)


def decide(text: str) -> None:
    started = time.process_time()
    decisions = PARSER.parse(ModelResponse(text=text))
    spent = time.process_time() - started
    assert decisions and all(d.type in ("final_answer", "tool_call", "ask_user", "invalid")
                             for d in decisions)
    assert spent < BOUND, f"{spent * 1000:.0f} ms for {len(text)} characters"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=400))
def test_any_mix_of_format_fragments_is_decided_quickly(parts: list[str]) -> None:
    decide("".join(parts))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FRAGMENTS), st.integers(min_value=1_000, max_value=20_000))
def test_one_fragment_repeated_thousands_of_times_is_decided_quickly(fragment: str,
                                                                   times: int) -> None:
    decide(fragment * times)


def test_huge_and_deeply_nested_outputs_are_decided_quickly() -> None:
    for text in ["[" * 50_000, "{" * 50_000, '{"a": ' * 20_000, "(" * 50_000,
                 "[calc(a=" + "[" * 5_000 + "1" + "]" * 5_000 + ")]",
                 "<tool_call>" + '{"name": "calc", "arguments": {' * 5_000,
                 "<function=calc>" + "<parameter=a>1" * 10_000,
                 "x" * 1_000_000, "word " * 200_000 + "{",
                 "```" + " " * 100_000 + "x", "<think>" * 20_000 + "</think>" * 20_000]:
        decide(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=200),
       st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=50))
def test_a_stream_never_shows_markup_whatever_the_cut(parts: list[str],
                                                      sizes: list[int]) -> None:
    text = "".join(parts)
    stream, shown, at = VisibleStream(), "", 0
    for size in sizes * (len(text) // max(1, sum(sizes)) + 1):
        if at >= len(text):
            break
        shown += stream.feed(text[at:at + size])
        at += size
    for token in ("<tool_call", "<|", "<｜", "[TOOL_CALLS]", "<think", "</think",
                  "<function=", "<minimax:", "<seed:", "<steptml:", "functools["):
        assert token not in shown, (token, shown)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="functools ab.\n[]{}`<|>_:", max_size=300),
       st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=30))
# Found on a busy run: "<" was shown, then "[{" (a stop) made the whole reply hold it back.
@example(text="<[{", sizes=[1])
def test_unmarked_text_streams_exactly_what_the_whole_reply_would_show(
        text: str, sizes: list[int]) -> None:
    from agent_core.toolcalls.stream import showable

    stream, shown, at = VisibleStream(), "", 0
    while at < len(text):
        size = sizes[at % len(sizes)]
        shown += stream.feed(text[at:at + size])
        at += size
    assert shown == showable(text)

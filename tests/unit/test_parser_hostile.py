"""The parser against hostile text: huge, deeply nested, unbalanced tags of every format.
It never raises, always decides, and never takes long (a bound that catches catastrophic
backtracking or quadratic scans, far above the benchmark's figures: bench/parser.py)."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from agent_core import DecisionParser
from agent_core.models.base import ModelResponse
from agent_core.toolcalls import READERS, VisibleStream, split_reasoning

TOOLS = ["get_weather", "calc"]
FRAGMENTS = sorted({m for r in READERS for m in r.markers} | {
    "</tool_call>", "</function>", "<parameter=", "</parameter>", "<arg_key>", "</arg_key>",
    "<arg_value>", "<think>", "</think>", "<seed:think>", "<|message|>", "<|call|>",
    "<|channel|>analysis", "to=functions.calc", "<｜tool▁sep｜>", "<invoke name=\"calc\">",
    "{", "}", "[", "]", "(", ")", '"', "\\", ":", ",", "```", "```json\n", "calc(", "a=",
    "get_weather", '{"name": "calc", "arguments": ', "\n", " ", "x", "[/THINK]",
    "<channel|>", "<|inner_suffix|>", "</tool_calls>", "</invoke>", "<|tool_call_end|>",
    "<|close|>call<|sep|>", "<tool_call|>", "<|\"|>", "call:calc{", "a:1", ">>>calc\n",
    "functions.calc:\n", "<｜DSML｜invoke name=\"calc\">", "</｜DSML｜parameter>", "```xml\n"})
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
                  "<function=", "<minimax:", "<seed:", "<steptml:", "functools[", "[THINK]",
                  "[/THINK]", "<channel|>", "<start_function_call>", "]<]minimax[>[", ">>>"):
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


# --- the safety rules, for every reader -------------------------------------------------
# Calls are taken from the format corpora (every reader's own outputs, upstream's included).
def _call_cases() -> list[tuple[str, DecisionParser, str, list[tuple[Any, ...]]]]:
    from tests.unit import test_toolcall_formats as formats
    from tests.unit import test_toolcall_upstream as upstream

    cases = []
    for module in (formats, upstream):
        parser = DecisionParser(module.SCHEMAS, module.SCHEMAS)
        cases += [(name, parser, output, expected) for name, output, expected in module.CASES
                  if expected and all(e[0] == "tool_call" for e in expected)]
    return cases


CALL_CASES = _call_cases()
ANSWER = "The answer is 42."


def _only_whole_calls(decisions: list[Any], expected: list[tuple[Any, ...]]) -> None:
    """Every call read from a prefix is the whole output's call at that place, with none of
    its arguments other than the whole output's (some may be missing: closing tags or
    braces were cut, and more arguments might have followed)."""
    for at, d in enumerate(decisions):
        if d.type != "tool_call":
            continue
        assert at < len(expected), (at, d)
        _, name, arguments = expected[at]
        assert d.tool_name == name, (d, expected[at])
        for key, value in d.arguments.items():
            assert key in arguments and arguments[key] == value, (key, value, expected[at])


def _opened_by_the_prompt(output: str) -> bool:
    """Whether ``output`` begins inside reasoning its prompt opened (its first reasoning tag
    closes a block): cut before that tag, nothing in the text says it was a thought."""
    from agent_core.toolcalls.reasoning import BLOCKS

    tags = sorted((output.find(tag), tag in {c for _, c in BLOCKS})
                  for pair in BLOCKS for tag in pair if tag in output)
    return bool(tags) and tags[0][1]


#: Outputs cut where the server does not say why (a stop sequence, a server that does not
#: report it): only the text tells.
UNMARKED_CUTS = [c for c in CALL_CASES if not _opened_by_the_prompt(c[2])]


def test_a_call_cut_off_anywhere_never_runs_with_a_value_it_did_not_finish() -> None:
    # Every prefix of every call in every format: a value, a key, a number or a name cut off
    # is never read into a call (nor repaired into one).
    for name, parser, output, expected in UNMARKED_CUTS:
        for cut in range(len(output)):
            try:
                _only_whole_calls(parser.parse(ModelResponse(text=output[:cut])), expected)
            except AssertionError as exc:
                raise AssertionError(f"{name} cut at {cut}: {output[:cut]!r}") from exc


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(UNMARKED_CUTS), st.integers(min_value=0),
       st.sampled_from(["", " ", "\n"]))
def test_a_cut_call_followed_by_whitespace_is_still_cut(case: tuple[Any, ...], cut: int,
                                                      tail: str) -> None:
    _, parser, output, expected = case
    text = output[:cut % (len(output) + 1)] + tail
    _only_whole_calls(parser.parse(ModelResponse(text=text)), expected)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CALL_CASES), st.integers(min_value=0),
       st.sampled_from(["length", "max_tokens", "LENGTH"]))
def test_no_call_runs_from_an_output_the_token_limit_cut(case: tuple[Any, ...], cut: int,
                                                         reason: str) -> None:
    # Even a whole call: the limit may have cut a thought the prompt opened before its end
    # ("Let me think about <tool_call>…" with the </think> never written).
    _, parser, output, _ = case
    response = ModelResponse(text=output[:cut % (len(output) + 1)], finish_reason=reason)
    assert all(d.type != "tool_call" for d in parser.parse(response))


REASONING = [("<think>", "</think>"), ("<seed:think>", "</seed:think>"),
             ("<thinking>", "</thinking>"), ("<reasoning>", "</reasoning>"),
             ("<|begin_of_thought|>", "<|end_of_thought|>"),
             ("<|START_THINKING|>", "<|END_THINKING|>"), ("[THINK]", "[/THINK]"),
             ("<|channel>thought\n", "<channel|>"), ("<|inner_prefix|>", "<|inner_suffix|>"),
             ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
             ("<think:opensource>", "</think:opensource>")]
HARMONY_TOKENS = ("<|start|>", "<|end|>", "<|channel|>", "<|call|>", "<|return|>")
#: Each call without the reasoning of its own output (quoted whole in another's).
QUOTABLE = [(name, parser, split_reasoning(output)[1].strip(), expected)
            for name, parser, output, expected in CALL_CASES]
PROSE = st.text(alphabet="abcdefghij klmnop.,;:!?'-\n", max_size=24)


def _quoted(shape: str, opening: str, closing: str, thought: str) -> str:
    return {
        "closed": f"{opening}{thought}{closing}{ANSWER}",
        "nested": f"{opening}so {opening}{thought}{closing} then{closing}{ANSWER}",
        "opened_by_the_prompt": f"{thought}{closing}{ANSWER}",
        "nested_in_one_the_prompt_opened": f"a {opening}b{closing} {thought}{closing}{ANSWER}",
        "closed_twice": f"{opening}{thought}{closing}{closing}{ANSWER}",
        "harmony_analysis": f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant"
                            f"<|channel|>final<|message|>{ANSWER}<|return|>",
    }[shape]


SHAPES = ["closed", "nested", "opened_by_the_prompt", "nested_in_one_the_prompt_opened",
          "closed_twice", "harmony_analysis"]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(QUOTABLE), st.sampled_from(REASONING), st.sampled_from(SHAPES),
       PROSE, PROSE)
def test_a_call_quoted_in_reasoning_never_runs_nor_leaks(case: tuple[Any, ...],
                                                         markup: tuple[str, str], shape: str,
                                                         before: str, after: str) -> None:
    _, parser, call, _ = case
    assume(shape != "harmony_analysis" or not any(t in call for t in HARMONY_TOKENS))
    text = _quoted(shape, *markup, f"SECRET {before} {call} {after} SECRET")
    decisions = parser.parse(ModelResponse(text=text))
    assert [(d.type, d.content) for d in decisions] == [("final_answer", ANSWER)], text


def test_every_call_quoted_in_every_reasoning_markup_never_runs() -> None:
    # Every call of every format, in every markup and shape, once (the property above
    # varies the prose around it).
    for name, parser, call, _ in QUOTABLE:
        for markup in REASONING:
            for shape in SHAPES:
                if shape == "harmony_analysis" and any(t in call for t in HARMONY_TOKENS):
                    continue
                text = _quoted(shape, *markup, f"SECRET {call} SECRET")
                decisions = parser.parse(ModelResponse(text=text))
                assert [(d.type, d.content) for d in decisions] == [
                    ("final_answer", ANSWER)], (name, markup, shape, decisions)


NAMED = [  # (template, the attribute that names the tool)
    ("<minimax:tool_call>\n<invoke {}>\n<parameter name=\"city\">Paris</parameter>\n</invoke>\n"
     "</minimax:tool_call>", "name"),
    ("<steptml:invoke {}><steptml:parameter name=\"city\">Paris</steptml:parameter>"
     "</steptml:invoke>", "name"),
    ("<function {}>{{\"city\": \"Paris\"}}</function>", "name"),
    ("<function {}><param name=\"city\">Paris</param></function>", "name"),
    ("<｜DSML｜function_calls>\n<｜DSML｜invoke {}>\n<｜DSML｜parameter name=\"city\" "
     "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
     "name"),
    ("]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke {}>]<]minimax[>[<city>Paris]<]minimax[>["
     "</city>]<]minimax[>[</invoke>", "name"),
    ("<|open|>tools<|sep|><|open|>call {}<|sep|><|open|>argument key=\"city\" type=\"string\""
     "<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>", "tool"),
    ("<function=get_weather {}>\n<parameter=city>\nParis\n</parameter>\n</function>", ""),
]
ATTRIBUTE = st.tuples(
    st.sampled_from(["id", "type", "index", "data-name", "tool_name", "names", "name_", "x",
                     "tool_id", "string", "mytool"]),
    st.text(alphabet="abc xyz0123456789=:/._-<", max_size=12), st.sampled_from(["\"", "'"]))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NAMED), st.lists(ATTRIBUTE, max_size=4), st.integers(min_value=0))
def test_attributes_beyond_the_name_never_leak_into_it(named: tuple[str, str],
                                                       extras: list[tuple[str, str, str]],
                                                       where: int) -> None:
    template, key = named
    attrs = [f"{k}={q}{v}{q}" for k, v, q in extras]
    if key:
        attrs.insert(where % (len(attrs) + 1), f"{key}=\"get_weather\"")
    parser = DecisionParser(["get_weather"], {"get_weather": {"type": "object", "properties": {
        "city": {"type": "string"}}}})
    decisions = parser.parse(ModelResponse(text=template.format(" ".join(attrs))))
    assert [(d.type, d.tool_name, d.arguments) for d in decisions] == [
        ("tool_call", "get_weather", {"city": "Paris"})], decisions


def test_every_reader_has_calls_to_cut_and_quote() -> None:
    for cases in (UNMARKED_CUTS, QUOTABLE):
        rules = {d.rule.split("+")[0] for _, parser, output, _ in cases
                 for d in parser.parse(ModelResponse(text=output))}
        assert {r.name for r in READERS} - {"answer_tag"} <= rules

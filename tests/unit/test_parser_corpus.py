"""The decision parser against a corpus of messy model outputs.

Each case is (id, model output, expected decisions). Expected decisions are tuples:
("tool_call", name, arguments) / ("final_answer", content) / ("ask_user", content) /
("invalid", substring of the reason).
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import DecisionParser
from agent_core.models.base import ModelResponse, RawToolCall

TOOLS = ["query_sales_data", "calc_growth_rate", "save_daily_report", "get_weather"]
Q = "query_sales_data"
ARGS = {"start_date": "2024-05-01", "end_date": "2024-05-07"}

T = ModelResponse  # shorthand


def text(s: str) -> ModelResponse:
    return ModelResponse(text=s)


def native(*calls: tuple[str, Any], content: str = "") -> ModelResponse:
    return ModelResponse(text=content, tool_calls=[
        RawToolCall(name=n, arguments=a, id=f"call_{i}") for i, (n, a) in enumerate(calls)])


CORPUS: list[tuple[str, ModelResponse, list[tuple[Any, ...]]]] = [
    # --- native tool calls ------------------------------------------------------------
    ("openai_native_string_args", native((Q, '{"start_date": "2024-05-01", "end_date": '
                                             '"2024-05-07"}')), [("tool_call", Q, ARGS)]),
    ("openai_native_two_calls", native((Q, '{"start_date":"2024-05-01","end_date":"2024-05-07"}'),
                                       ("calc_growth_rate", '{"current": 2, "previous": 1}')),
     [("tool_call", Q, ARGS), ("tool_call", "calc_growth_rate", {"current": 2, "previous": 1})]),
    ("anthropic_tool_use_dict_args", native((Q, ARGS)), [("tool_call", Q, ARGS)]),
    ("native_empty_arguments", native(("get_weather", "")), [("tool_call", "get_weather", {})]),
    ("native_broken_arguments_repaired", native((Q, '{"start_date": "2024-05-01", '
                                                    '"end_date": "2024-05-07"')),
     [("tool_call", Q, ARGS)]),
    ("native_trailing_comma", native((Q, '{"start_date": "2024-05-01", "end_date": '
                                         '"2024-05-07",}')), [("tool_call", Q, ARGS)]),
    ("native_unknown_tool", native(("delete_everything", "{}")), [("invalid", "no tool named")]),
    ("native_final_answer_pseudo_tool", native(("final_answer", '{"answer": "Done."}')),
     [("final_answer", "Done.")]),
    ("native_ask_user_pseudo_tool", native(("ask_user", '{"question": "Which week?", '
                                                        '"choices": ["this", "last"]}')),
     [("ask_user", "Which week?")]),
    ("native_with_thinking_text", native((Q, ARGS), content="Let me look that up."),
     [("tool_call", Q, ARGS)]),
    ("native_non_object_arguments", native((Q, "[1, 2]")), [("invalid", "not a JSON object")]),
    # --- plain JSON -------------------------------------------------------------------
    ("json_tool_call", text('{"type": "tool_call", "tool_name": "query_sales_data", '
                            '"arguments": {"start_date": "2024-05-01", "end_date": "2024-05-07"}}'),
     [("tool_call", Q, ARGS)]),
    ("json_final_answer", text('{"type": "final_answer", "content": "Sales grew 12%."}'),
     [("final_answer", "Sales grew 12%.")]),
    ("json_ask_user", text('{"type": "ask_user", "content": "Which category?"}'),
     [("ask_user", "Which category?")]),
    ("json_whitespace_around", text('\n\n  {"type": "final_answer", "content": "ok"}  \n'),
     [("final_answer", "ok")]),
    ("json_type_alias_final", text('{"type": "final", "answer": "All good."}'),
     [("final_answer", "All good.")]),
    ("json_type_alias_tool", text('{"type": "tool", "name": "get_weather", "args": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("json_decision_key", text('{"decision": "ask", "question": "Which region?"}'),
     [("ask_user", "Which region?")]),
    ("json_list_of_calls", text('[{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
                                '{"name": "get_weather", "arguments": {"city": "Rome"}}]'),
     [("tool_call", "get_weather", {"city": "Oslo"}), ("tool_call", "get_weather", {"city": "Rome"})]),
    ("json_openai_shape_in_text", text('{"tool_calls": [{"id": "a", "type": "function", "function": '
                                       '{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}]}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("json_function_object", text('{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("json_no_decision_keys", text('{"foo": 1, "bar": 2}'), [("invalid", "no decision")]),
    ("json_final_without_content", text('{"type": "final_answer"}'),
     [("invalid", "needs its text")]),
    ("json_tool_without_name", text('{"type": "tool_call", "arguments": {}}'),
     [("invalid", "needs the tool's name")]),
    ("json_unknown_tool", text('{"type": "tool_call", "tool_name": "rm_rf", "arguments": {}}'),
     [("invalid", "valid tools")]),
    ("json_answer_object_content", text('{"type": "final_answer", "content": {"growth": 12.5}}'),
     [("final_answer", '{"growth": 12.5}')]),
    # --- field-name drift ---------------------------------------------------------------
    ("drift_tool_key", text('{"tool": "get_weather", "parameters": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("drift_function_key_string", text('{"function": "get_weather", "input": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("drift_arguments_as_string", text('{"tool_name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("drift_args_key", text('{"name": "get_weather", "args": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("drift_react_action", text('{"action": "get_weather", "action_input": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("drift_react_final", text('{"action": "Final Answer", "action_input": "It is sunny."}'),
     [("final_answer", "It is sunny.")]),
    ("drift_tool_input", text('{"tool": "get_weather", "tool_input": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("drift_response_key", text('{"type": "final_answer", "response": "Fine."}'),
     [("final_answer", "Fine.")]),
    # --- fences and prose ---------------------------------------------------------------
    ("fence_json", text('```json\n{"type": "final_answer", "content": "fenced"}\n```'),
     [("final_answer", "fenced")]),
    ("fence_plain", text('```\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("fence_with_prose", text('I will check.\n```json\n{"tool_name": "get_weather", '
                              '"arguments": {"city": "Oslo"}}\n```\nThen answer.'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("fence_unclosed", text('```json\n{"type": "final_answer", "content": "unclosed"}'),
     [("final_answer", "unclosed")]),
    ("prose_before_json", text('Sure! Here is my decision: {"type": "tool_call", "tool_name": '
                               '"get_weather", "arguments": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("prose_after_json", text('{"name": "get_weather", "arguments": {"city": "Oslo"}} '
                              'I hope this helps.'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("prose_with_unrelated_json", text('Your config should be {"debug": true, "port": 80}.'),
     [("final_answer", 'Your config should be {"debug": true, "port": 80}.')]),
    ("fence_code_not_json", text("Use this:\n```python\nprint('hi')\n```"),
     [("final_answer", "Use this:\n```python\nprint('hi')\n```")]),
    ("fence_json_without_decision", text('Example:\n```json\n{"a": 1}\n```'),
     [("final_answer", 'Example:\n```json\n{"a": 1}\n```')]),
    # --- plain text -------------------------------------------------------------------
    ("plain_answer", text("Sales grew by 12% this week."),
     [("final_answer", "Sales grew by 12% this week.")]),
    ("plain_chinese", text("本周销售额比上周增长了12%。"), [("final_answer", "本周销售额比上周增长了12%。")]),
    ("plain_with_braces_in_words", text("Use the {name} placeholder in templates."),
     [("final_answer", "Use the {name} placeholder in templates.")]),
    ("empty", text(""), [("invalid", "empty")]),
    ("whitespace_only", text("   \n "), [("invalid", "empty")]),
    # --- open-model text formats ------------------------------------------------------
    ("hermes_tag", text('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("hermes_two_tags", text('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
                             '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'),
     [("tool_call", "get_weather", {"city": "Oslo"}), ("tool_call", "get_weather", {"city": "Rome"})]),
    ("hermes_unclosed_tag", text('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("hermes_thinking_before", text('<think>need weather</think>\n<tool_call>{"name": "get_weather", '
                                    '"arguments": {"city": "Oslo"}}</tool_call>'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("hermes_broken_json", text("<tool_call>{'name': 'get_weather', 'arguments': {'city': 'Oslo'}}</tool_call>"),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("llama_python_tag", text('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eom_id|>'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("llama_python_tag_two", text('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
                                  '{"name": "get_weather", "parameters": {"city": "Rome"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"}), ("tool_call", "get_weather", {"city": "Rome"})]),
    ("llama_bare_json", text('{"name": "get_weather", "parameters": {"city": "Oslo"}}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    # Llama 3.1 writes built-in tools as Python after the tag; a model using it for ours too
    # is read, not refused.
    ("llama_tag_pythonic", text("<|python_tag|>get_weather(city='Oslo')"),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("llama_tag_garbage", text("<|python_tag|>get_weather(city='Oslo'"),
     [("invalid", "not readable")]),
    ("mistral_tool_calls", text('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}]'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("mistral_two_calls", text('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
                               '{"name": "calc_growth_rate", "arguments": {"current": 5, "previous": 4}}]'),
     [("tool_call", "get_weather", {"city": "Oslo"}),
      ("tool_call", "calc_growth_rate", {"current": 5, "previous": 4})]),
    ("mistral_v11_named", text('[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("mistral_no_json", text("[TOOL_CALLS] nothing here"), [("invalid", "TOOL_CALLS")]),
    # --- broken JSON ------------------------------------------------------------------
    ("broken_missing_brace", text('{"type": "final_answer", "content": "almost"'),
     [("final_answer", "almost")]),
    ("broken_missing_two_braces", text('{"type": "tool_call", "tool_name": "get_weather", '
                                       '"arguments": {"city": "Oslo"'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("broken_trailing_comma", text('{"type": "final_answer", "content": "trailing",}'),
     [("final_answer", "trailing")]),
    ("broken_single_quotes", text("{'type': 'final_answer', 'content': 'single'}"),
     [("final_answer", "single")]),
    ("broken_unescaped_quotes", text('{"type": "final_answer", "content": "He said "hi" to me"}'),
     [("final_answer", 'He said "hi" to me')]),
    ("broken_smart_quotes", text("{\u201ctype\u201d: \u201cfinal_answer\u201d, \u201ccontent\u201d: \u201csmart\u201d}"),
     [("final_answer", "smart")]),
    ("broken_python_literals", text("{'type': 'tool_call', 'tool_name': 'get_weather', "
                                    "'arguments': {'metric': True}}"),
     [("tool_call", "get_weather", {"metric": True})]),
    ("broken_comment_inside", text('{"type": "final_answer", // the answer\n "content": "commented"}'),
     [("final_answer", "commented")]),
    ("broken_fenced", text('```json\n{"type": "final_answer", "content": "fence broken",\n```'),
     [("final_answer", "fence broken")]),
    ("broken_in_prose", text('Decision: {"tool_name": "get_weather", "arguments": {"city": "Oslo"},}'),
     [("tool_call", "get_weather", {"city": "Oslo"})]),
    ("hopeless_structure", text("{{{{[[[:::"), [("invalid", "looked like JSON")]),
    ("json_array_of_non_objects", text("[1, 2, 3]"), [("invalid", "expected a JSON object")]),
    ("json_string_value", text('"just a string"'), [("final_answer", '"just a string"')]),
]


def _check(decisions: list[Any], expected: list[tuple[Any, ...]]) -> None:
    assert len(decisions) == len(expected), [d.model_dump() for d in decisions]
    for d, exp in zip(decisions, expected, strict=True):
        kind = exp[0]
        assert d.type == kind, (d.model_dump(), exp)
        if kind == "tool_call":
            assert d.tool_name == exp[1]
            assert d.arguments == exp[2]
        elif kind in ("final_answer", "ask_user"):
            assert d.content == exp[1]
        else:
            assert exp[1].lower() in d.reason.lower(), d.reason
        assert d.rule, "every decision records the rule that produced it"


def test_corpus_has_at_least_sixty_cases() -> None:
    assert len(CORPUS) >= 60
    assert len({case[0] for case in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("response", "expected"), [c[1:] for c in CORPUS],
                         ids=[c[0] for c in CORPUS])
def test_messy_output_becomes_expected_decision(response: ModelResponse,
                                                expected: list[tuple[Any, ...]]) -> None:
    parser = DecisionParser(TOOLS)
    _check(parser.parse(response), expected)


def test_ask_user_choices_are_kept() -> None:
    [d] = DecisionParser(TOOLS).parse(text('{"type": "ask_user", "content": "Which week?", '
                                           '"options": ["this", "last"]}'))
    assert d.choices == ["this", "last"]


def test_native_call_ids_are_preserved() -> None:
    decisions = DecisionParser(TOOLS).parse(native((Q, ARGS), ("get_weather", "{}")))
    assert [d.call_id for d in decisions] == ["call_0", "call_1"]


def test_unknown_tool_reason_lists_every_valid_name() -> None:
    [d] = DecisionParser(TOOLS).parse(text('{"tool_name": "nope", "arguments": {}}'))
    assert d.type == "invalid" and d.rule == "unknown_tool"
    for name in TOOLS:
        assert name in d.reason


def test_rule_names_say_what_matched() -> None:
    parser = DecisionParser(TOOLS)
    assert parser.parse(native((Q, ARGS)))[0].rule == "native"
    assert parser.parse(text('<tool_call>{"name": "get_weather"}</tool_call>'))[0].rule \
        == "hermes_tags"
    assert parser.parse(text("{'type': 'final_answer', 'content': 'x'}"))[0].rule \
        == "json+repaired"
    assert parser.parse(text("hello"))[0].rule == "plain_text"


def test_parser_never_raises_on_hostile_input() -> None:
    parser = DecisionParser(TOOLS)
    nasty = ["{" * 5000, "[" * 5000 + "]", '{"a": ' * 2000, "\x00\x01{", "```" * 300,
             "<tool_call>" * 100, "[TOOL_CALLS]" * 50, '{"name": null, "arguments": null}']
    for s in nasty:
        decisions = parser.parse(text(s))
        assert decisions and all(d.type in ("final_answer", "tool_call", "ask_user", "invalid")
                                 for d in decisions)


async def test_model_assisted_repair_is_used_only_when_parsing_fails() -> None:
    parser = DecisionParser(TOOLS)
    calls: list[str] = []

    async def repair(raw: str) -> str:
        calls.append(raw)
        return '{"type": "final_answer", "content": "repaired by model"}'

    ok = await parser.parse_with_repair(text("plain answer"), repair)
    assert ok[0].content == "plain answer" and calls == []
    fixed = await parser.parse_with_repair(text("{{{{[[[:::"), repair)
    assert fixed[0].type == "final_answer" and fixed[0].rule.startswith("model_repair:")
    assert calls == ["{{{{[[[:::"]


async def test_failed_model_repair_keeps_the_invalid_decision() -> None:
    parser = DecisionParser(TOOLS)

    async def repair(raw: str) -> str:
        raise RuntimeError("model down")

    [d] = await parser.parse_with_repair(text("{{{{[[[:::"), repair)
    assert d.type == "invalid"

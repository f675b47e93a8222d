"""The open models' own tool-call formats, read from text alone (no hint of the model).

Each case is written from the format's documentation (its chat template or model card, and
the open-source servers' parsers): (id, model output, expected decisions), the decisions as
("tool_call", name, arguments) / ("final_answer", content) / ("invalid", part of the
reason). Arguments written as text (the XML styles) are typed by the tools' schemas.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import DecisionParser
from agent_core.models.base import ModelResponse

SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
    "calc": {"type": "object", "properties": {"a": {"type": "number"},
                                              "b": {"type": "number"}}},
    "search": {"type": "object", "properties": {
        "query": {"type": "string"}, "filters": {"type": "object"},
        "tags": {"type": "array", "items": {"type": "string"}}}},
    "set_flag": {"type": "object", "properties": {"enabled": {"type": "boolean"},
                                                  "name": {"type": "string"}}},
    "get_time": {"type": "object", "properties": {}},
}
W = "get_weather"
PARIS = {"city": "Paris"}
CALC = ("tool_call", "calc", {"a": 1, "b": 2})

DS_BEGIN, DS_CALL, DS_SEP, DS_END, DS_CALLS_END = (
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>")
KIMI = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
        "<|tool_call_end|>", "<|tool_calls_section_end|>")

CASES: list[tuple[str, str, list[tuple[Any, ...]]]] = [
    # --- Qwen3-Coder / Qwen3.5 XML style ----------------------------------------------
    ("qwen_xml_one", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
     "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", W, {"city": "Paris", "days": 3})]),
    ("qwen_xml_two_calls", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
     "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=calc>\n<parameter=a>\n1"
     "\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", W, PARIS), CALC]),
    ("qwen_xml_no_outer_tag", "<function=get_weather>\n<parameter=city>\nParis\n</parameter>"
     "\n</function>", [("tool_call", W, PARIS)]),
    ("qwen_xml_typed_values", "<tool_call>\n<function=search>\n<parameter=query>\n42\n"
     "</parameter>\n<parameter=filters>\n{\"year\": 2024}\n</parameter>\n<parameter=tags>\n"
     "[\"a\", \"b\"]\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", "search", {"query": "42", "filters": {"year": 2024}, "tags": ["a", "b"]})]),
    ("qwen_xml_boolean", "<tool_call>\n<function=set_flag>\n<parameter=enabled>\ntrue\n"
     "</parameter>\n<parameter=name>\nbeta\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", "set_flag", {"enabled": True, "name": "beta"})]),
    ("qwen_xml_multiline_text", "<tool_call>\n<function=search>\n<parameter=query>\nline one\n"
     "line two\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", "search", {"query": "line one\nline two"})]),
    ("qwen_xml_cut_inside_the_last_value", "<tool_call>\n<function=get_weather>\n"
     "<parameter=city>\nParis", [("invalid", "cut off")]),
    ("qwen_xml_cut_before_closing_tags", "<tool_call>\n<function=get_weather>\n"
     "<parameter=city>\nParis\n</parameter>\n", [("tool_call", W, PARIS)]),
    ("qwen_xml_cut_inside_a_tag", "<tool_call>\n<function=get_weather>\n<parameter=ci",
     [("invalid", "cut off")]),
    ("qwen_xml_unknown_tool", "<tool_call>\n<function=launch_rocket>\n<parameter=when>\nnow\n"
     "</parameter>\n</function>\n</tool_call>", [("invalid", "no tool named 'launch_rocket'")]),
    ("qwen_xml_after_think", "<think>\nThe user wants weather; I'll call get_weather.\n</think>"
     "\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "</function>\n</tool_call>", [("tool_call", W, PARIS)]),
    # --- GLM-4.5 / 4.6 ------------------------------------------------------------------
    ("glm_one", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
     "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
     [("tool_call", W, {"city": "Paris", "days": 2})]),
    ("glm_two_calls_after_think", "<think>Two things to do.</think>\n<tool_call>get_weather\n"
     "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n<tool_call>calc\n"
     "<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n<arg_key>b</arg_key>\n<arg_value>2"
     "</arg_value>\n</tool_call>", [("tool_call", W, PARIS), CALC]),
    ("glm_no_arguments", "<tool_call>get_time\n</tool_call>", [("tool_call", "get_time", {})]),
    ("glm_cut_inside_a_key", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>"
     "Paris</arg_value>\n<arg_key>da", [("invalid", "cut off")]),
    ("glm_unknown_tool", "<tool_call>drop_tables\n<arg_key>db</arg_key>\n<arg_value>prod"
     "</arg_value>\n</tool_call>", [("invalid", "no tool named 'drop_tables'")]),
    # --- Kimi K2 --------------------------------------------------------------------------
    ("kimi_one", f"{KIMI[0]}{KIMI[1]}functions.get_weather:0{KIMI[2]}{{\"city\": \"Paris\"}}"
     f"{KIMI[3]}{KIMI[4]}", [("tool_call", W, PARIS)]),
    ("kimi_two_after_prose", f"Let me check both.{KIMI[0]}{KIMI[1]}functions.get_weather:0"
     f"{KIMI[2]}{{\"city\": \"Paris\"}}{KIMI[3]}{KIMI[1]}functions.calc:1{KIMI[2]}"
     f"{{\"a\": 1, \"b\": 2}}{KIMI[3]}{KIMI[4]}", [("tool_call", W, PARIS), CALC]),
    ("kimi_cut_inside_arguments", f"{KIMI[0]}{KIMI[1]}functions.get_weather:0{KIMI[2]}"
     "{\"city\": \"Pa", [("invalid", "not readable")]),
    # --- DeepSeek V3 / R1 / V3.1 ----------------------------------------------------------
    ("deepseek_v3_fenced", f"{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n```json\n"
     f"{{\"city\": \"Paris\"}}\n```{DS_END}{DS_CALLS_END}", [("tool_call", W, PARIS)]),
    ("deepseek_v3_two", f"{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n```json\n"
     f"{{\"city\": \"Paris\"}}\n```{DS_END}\n{DS_CALL}function{DS_SEP}calc\n```json\n"
     f"{{\"a\": 1, \"b\": 2}}\n```{DS_END}{DS_CALLS_END}", [("tool_call", W, PARIS), CALC]),
    ("deepseek_v31_bare", f"{DS_BEGIN}{DS_CALL}get_weather{DS_SEP}{{\"city\": \"Paris\"}}"
     f"{DS_END}{DS_CALLS_END}", [("tool_call", W, PARIS)]),
    ("deepseek_r1_after_think", f"<think>I need the weather.</think>\n\n{DS_BEGIN}{DS_CALL}"
     f"function{DS_SEP}get_weather\n```json\n{{\"city\": \"Paris\"}}\n```{DS_END}"
     f"{DS_CALLS_END}", [("tool_call", W, PARIS)]),
    ("deepseek_unknown_tool", f"{DS_BEGIN}{DS_CALL}function{DS_SEP}format_disk\n```json\n"
     f"{{}}\n```{DS_END}{DS_CALLS_END}", [("invalid", "no tool named 'format_disk'")]),
    # --- gpt-oss (harmony) ------------------------------------------------------------
    ("harmony_call", "<|channel|>analysis<|message|>User asks weather; call the tool.<|end|>"
     "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
     "<|message|>{\"city\":\"Paris\"}<|call|>", [("tool_call", W, PARIS)]),
    ("harmony_recipient_in_header", "<|start|>assistant to=functions.get_weather<|channel|>"
     "commentary json<|message|>{\"city\": \"Paris\"}<|call|>", [("tool_call", W, PARIS)]),
    ("harmony_final", "<|channel|>analysis<|message|>Simple question.<|end|><|start|>assistant"
     "<|channel|>final<|message|>It is sunny in Paris.<|return|>",
     [("final_answer", "It is sunny in Paris.")]),
    ("harmony_json_while_thinking_is_not_a_call", "<|channel|>analysis<|message|>I could send "
     "{\"name\": \"calc\", \"arguments\": {\"a\": 1}} but no need.<|end|><|start|>assistant"
     "<|channel|>final<|message|>Four.<|return|>", [("final_answer", "Four.")]),
    ("harmony_unknown_tool", "<|channel|>commentary to=functions.browser.open <|constrain|>json"
     "<|message|>{\"url\": \"x\"}<|call|>", [("invalid", "no tool named")]),
    # --- MiniMax-M2 -------------------------------------------------------------------
    ("minimax_one", "<think>Need the weather.</think>\n<minimax:tool_call>\n<invoke name="
     "\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">"
     "2</parameter>\n</invoke>\n</minimax:tool_call>",
     [("tool_call", W, {"city": "Paris", "days": 2})]),
    ("minimax_two", "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name="
     "\"city\">Paris</parameter>\n</invoke>\n<invoke name=\"calc\">\n<parameter name=\"a\">1"
     "</parameter>\n<parameter name=\"b\">2</parameter>\n</invoke>\n</minimax:tool_call>",
     [("tool_call", W, PARIS), CALC]),
    # --- Seed-OSS -----------------------------------------------------------------------
    ("seed_oss_one", "<seed:think>The user wants the weather in Paris.</seed:think>\n"
     "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
     "</function>\n</seed:tool_call>", [("tool_call", W, PARIS)]),
    ("seed_oss_think_then_answer", "<seed:think>Maybe {\"name\": \"calc\"}? No.</seed:think>"
     "The capital of France is Paris.", [("final_answer", "The capital of France is Paris.")]),
    # --- Step-3 ---------------------------------------------------------------------------
    ("step3_one", "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>"
     "<steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Paris"
     "</steptml:parameter><steptml:parameter name=\"days\">5</steptml:parameter>"
     "</steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
     [("tool_call", W, {"city": "Paris", "days": 5})]),
    # --- LongCat, LFM2, InternLM, Granite, Phi-4-mini, Jamba / Hunyuan, xLAM ------------
    ("longcat_one", "<longcat_tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}}\n</longcat_tool_call>", [("tool_call", W, PARIS)]),
    ("lfm2_pythonic", "<|tool_call_start|>[get_weather(city=\"Paris\"), calc(a=1, b=2)]"
     "<|tool_call_end|>Checking both.", [("tool_call", W, PARIS), CALC]),
    ("lfm2_json", "<|tool_call_start|>[{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}}]<|tool_call_end|>", [("tool_call", W, PARIS)]),
    ("internlm_plugin", "I will look it up.<|action_start|><|plugin|>\n{\"name\": "
     "\"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|action_end|>",
     [("tool_call", W, PARIS)]),
    ("granite_list", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}, {\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
     [("tool_call", W, PARIS), CALC]),
    ("granite_20b_function_call", "<function_call> {\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}} <function_call> {\"name\": \"calc\", \"arguments\": {\"a\": 1, "
     "\"b\": 2}}", [("tool_call", W, PARIS), CALC]),
    ("phi4_functools", "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}]", [("tool_call", W, PARIS)]),
    ("jamba_tool_calls", "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}]</tool_calls>", [("tool_call", W, PARIS)]),
    ("hunyuan_think_then_calls", "<think>\nuser wants weather\n</think>\n<tool_calls>[{\"name\":"
     " \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"calc\", "
     "\"arguments\": {\"a\": 1, \"b\": 2}}]</tool_calls>", [("tool_call", W, PARIS), CALC]),
    ("hunyuan_answer_tag", "<think>\nEasy.\n</think>\n<answer>\nParis is the capital.\n"
     "</answer>", [("final_answer", "Paris is the capital.")]),
    ("hunyuan_answer_tag_cut", "<think>\nEasy.\n</think>\n<answer>\nParis is the",
     [("final_answer", "Paris is the")]),
    ("xlam_json_array", "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
     "{\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
     [("tool_call", W, PARIS), CALC]),
    # --- several calls in one turn, and cut-off ends, in the other formats ---------------
    ("seed_oss_two", "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris"
     "</parameter>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=calc>\n"
     "<parameter=a>1</parameter>\n<parameter=b>2</parameter>\n</function>\n</seed:tool_call>",
     [("tool_call", W, PARIS), CALC]),
    ("step3_two", "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>"
     "<steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Paris"
     "</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_call_begin｜>function"
     "<｜tool_sep｜><steptml:invoke name=\"calc\"><steptml:parameter name=\"a\">1"
     "</steptml:parameter><steptml:parameter name=\"b\">2</steptml:parameter>"
     "</steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>", [("tool_call", W, PARIS), CALC]),
    ("longcat_two", "<longcat_tool_call>{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}}</longcat_tool_call>\n<longcat_tool_call>{\"name\": \"calc\", "
     "\"arguments\": {\"a\": 1, \"b\": 2}}</longcat_tool_call>", [("tool_call", W, PARIS), CALC]),
    ("internlm_two", "<|action_start|><|plugin|>\n{\"name\": \"get_weather\", \"parameters\": "
     "{\"city\": \"Paris\"}}<|action_end|>\n<|action_start|><|plugin|>\n{\"name\": \"calc\", "
     "\"parameters\": {\"a\": 1, \"b\": 2}}<|action_end|>", [("tool_call", W, PARIS), CALC]),
    ("phi4_two", "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
     "{\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
     [("tool_call", W, PARIS), CALC]),
    ("mistral_list_two", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}, {\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
     [("tool_call", W, PARIS), CALC]),
    ("mistral_v11_two", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]calc"
     "[ARGS]{\"a\": 1, \"b\": 2}", [("tool_call", W, PARIS), CALC]),
    ("harmony_two", "<|start|>assistant<|channel|>commentary to=functions.get_weather "
     "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|><|start|>assistant<|channel|>"
     "commentary to=functions.calc <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}<|call|>",
     [("tool_call", W, PARIS), CALC]),
    ("deepseek_v31_two", f"{DS_BEGIN}{DS_CALL}get_weather{DS_SEP}{{\"city\": \"Paris\"}}"
     f"{DS_END}{DS_CALL}calc{DS_SEP}{{\"a\": 1, \"b\": 2}}{DS_END}{DS_CALLS_END}",
     [("tool_call", W, PARIS), CALC]),
    ("python_tags_two", "<|python_start|>[get_weather(city=\"Paris\"), calc(a=1, b=2)]"
     "<|python_end|>", [("tool_call", W, PARIS), CALC]),
    ("kimi_cut_before_the_end_tokens", f"{KIMI[0]}{KIMI[1]}functions.get_weather:0{KIMI[2]}"
     "{\"city\": \"Paris\"}", [("tool_call", W, PARIS)]),
    ("deepseek_cut_before_the_end_tokens", f"{DS_BEGIN}{DS_CALL}get_weather{DS_SEP}"
     "{\"city\": \"Paris\"}", [("tool_call", W, PARIS)]),
    ("harmony_cut_before_call_token", "<|channel|>commentary to=functions.get_weather "
     "<|constrain|>json<|message|>{\"city\": \"Paris\"}", [("tool_call", W, PARIS)]),
    ("minimax_cut_inside_the_last_value", "<minimax:tool_call>\n<invoke name=\"get_weather\">"
     "\n<parameter name=\"city\">Paris", [("invalid", "cut off")]),
    ("minimax_cut_before_closing_tags", "<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
     "<parameter name=\"city\">Paris</parameter>", [("tool_call", W, PARIS)]),
    ("glm_cut_inside_the_last_value", "<tool_call>get_weather\n<arg_key>city</arg_key>\n"
     "<arg_value>Paris", [("invalid", "cut off")]),
    ("glm_cut_before_closing_tag", "<tool_call>get_weather\n<arg_key>city</arg_key>\n"
     "<arg_value>Paris</arg_value>", [("tool_call", W, PARIS)]),
    ("granite_cut_inside_arguments", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\":", [("invalid", "not followed by a readable JSON call")]),
    # --- pythonic (Llama 4, Llama 3.2 pythonic, fine-tunes) ---------------------------
    ("pythonic_list", "[get_weather(city=\"Paris\"), calc(a=1, b=2)]",
     [("tool_call", W, PARIS), CALC]),
    ("pythonic_llama4_tags", "<|python_start|>[get_weather(city='Paris', days=2)]"
     "<|python_end|>", [("tool_call", W, {"city": "Paris", "days": 2})]),
    ("pythonic_literals", "[search(query=\"x\", filters={\"year\": 2024}, tags=[\"a\"]), "
     "set_flag(enabled=True, name=None)]",
     [("tool_call", "search", {"query": "x", "filters": {"year": 2024}, "tags": ["a"]}),
      ("tool_call", "set_flag", {"enabled": True, "name": None})]),
    ("pythonic_is_never_evaluated", "[get_weather(city=__import__('os').getcwd())]",
     [("invalid", "not literals")]),
    ("pythonic_positional", "[get_weather(\"Paris\")]", [("invalid", "positional")]),
    ("pythonic_unknown_tool", "[rm_rf(path=\"/\")]", [("invalid", "no tool named 'rm_rf'")]),
    # --- more families: Llama 3.1 custom tools, Functionary, Gemma, Nemotron, Command A ---
    ("llama31_function_json", "<function=get_weather>{\"city\": \"Paris\", \"days\": 2}"
     "</function>", [("tool_call", W, {"city": "Paris", "days": 2})]),
    ("llama31_builtin_python_tag", "<|python_tag|>brave_search.call(query=\"Paris weather\")"
     "<|eom_id|>", [("invalid", "no tool named 'brave_search'")]),
    ("gemma_tool_code", "I'll check the weather.\n```tool_code\nget_weather(city=\"Paris\")\n"
     "```", [("tool_call", W, PARIS)]),
    ("gemma_tool_code_two", "```tool_code\n[get_weather(city=\"Paris\"), calc(a=1, b=2)]\n```",
     [("tool_call", W, PARIS), CALC]),
    ("nemotron_toolcall", "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}, {\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}]</TOOLCALL>",
     [("tool_call", W, PARIS), CALC]),
    ("command_a_action", "<|START_THINKING|>I should look up the weather.<|END_THINKING|>"
     "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", "
     "\"parameters\": {\"city\": \"Paris\"}}]<|END_ACTION|>", [("tool_call", W, PARIS)]),
    ("command_a_response", "<|START_THINKING|>No tool needed.<|END_THINKING|>"
     "<|START_RESPONSE|>Paris is in France.<|END_RESPONSE|>",
     [("final_answer", "Paris is in France.")]),
    ("thinking_tag_then_answer", "<thinking>Should I call get_weather? {\"name\": "
     "\"get_weather\"} No.</thinking>\nIt depends on the season.",
     [("final_answer", "It depends on the season.")]),
    ("pythonic_bare_single_call", "get_weather(city=\"Paris\", days=2)",
     [("tool_call", W, {"city": "Paris", "days": 2})]),
    ("prose_that_looks_like_a_call", "print(x) shows the value.",
     [("final_answer", "print(x) shows the value.")]),
    ("empty_call_list", "<|tool_call_start|>[]<|tool_call_end|>", [("invalid", "no call")]),
    ("empty_tool_calls_tag", "<tool_calls>[]</tool_calls>", [("invalid", "empty")]),
    # --- JSON tags and what surrounds them ----------------------------------------------
    ("hermes_prose_then_call", "Let me look that up for you.\n<tool_call>\n{\"name\": "
     "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     [("tool_call", W, PARIS)]),
    ("hermes_call_then_prose", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}}\n</tool_call>\nI'll report back once I have it.",
     [("tool_call", W, PARIS)]),
    ("hermes_truncated_brace", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}", [("tool_call", W, PARIS)]),
    ("hermes_cut_after_a_key", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": ", [("invalid", "not followed by a readable JSON call")]),
    ("hermes_cut_inside_a_value", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Par", [("invalid", "not followed by a readable JSON call")]),
    ("mistral_v11_named", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
     [("tool_call", W, PARIS)]),
    ("mistral_v11_unreadable_arguments", "[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
     [("invalid", "not readable JSON")]),
    ("llama3_python_tag_two", "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": "
     "{\"city\": \"Paris\"}}; {\"name\": \"calc\", \"parameters\": {\"a\": 1, \"b\": 2}}"
     "<|eom_id|>", [("tool_call", W, PARIS), CALC]),
    # --- reasoning is not an action ---------------------------------------------------
    ("think_json_example_then_answer", "<think>I could answer with {\"type\": \"tool_call\", "
     "\"tool_name\": \"calc\", \"arguments\": {\"a\": 2, \"b\": 2}} but 2+2 is easy.</think>\n"
     "2 + 2 = 4.", [("final_answer", "2 + 2 = 4.")]),
    ("think_closed_only_template_opened", "The user wants Paris weather.\n</think>\n\n"
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
     "</tool_call>", [("tool_call", W, PARIS)]),
    ("think_cut_off_is_not_an_answer", "<think>Let me work out whether to call get_weather",
     [("invalid", "reasoning")]),
    ("think_with_a_call_inside_only", "<think><tool_call>{\"name\": \"get_weather\", "
     "\"arguments\": {\"city\": \"Paris\"}}</tool_call></think>I don't need a tool for this.",
     [("final_answer", "I don't need a tool for this.")]),
    # --- what never runs: a call cut off, quoted in reasoning, shown in prose -------------
    ("hermes_cut_after_a_number", "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"a\": 1, "
     "\"b\": 2", [("invalid", "not followed by a readable JSON call")]),
    ("hermes_cut_inside_a_key", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"ci", [("invalid", "not followed by a readable JSON call")]),
    ("json_protocol_cut_after_a_number", "{\"type\": \"tool_call\", \"tool_name\": \"calc\", "
     "\"arguments\": {\"a\": 1, \"b\": 2", [("invalid", "could not be read")]),
    ("think_nested_pairs_around_a_call", "<think>outer <think>inner</think> I'd call <tool_call>"
     "{\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call></think>The answer "
     "is 42.", [("final_answer", "The answer is 42.")]),
    ("think_stray_closers_after_a_quoted_call", "Plan: <tool_call>{\"name\": \"calc\", "
     "\"arguments\": {\"a\": 1, \"b\": 2}}</tool_call> maybe\n</think>\n</think>\n"
     "The answer is 42.",
     [("final_answer", "The answer is 42.")]),
    ("think_other_markup_inside_reasoning", "[THINK]Qwen would open <think> and write <tool_call>"
     "{\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>[/THINK]The answer "
     "is 42.", [("final_answer", "The answer is 42.")]),
    # --- issue 46: attributes, prose around calls, several JSON calls, code shown -------
    ("minimax_invoke_attributes_beyond_the_name", "<minimax:tool_call>\n<invoke name="
     "\"get_weather\" id=\"call_1\" type=\"function\">\n<parameter name=\"city\" type=\"string\">"
     "Paris</parameter>\n</invoke>\n</minimax:tool_call>", [("tool_call", W, PARIS)]),
    ("step3_attributes_beyond_the_name", "<steptml:invoke id=\"7\" name=\"get_weather\" "
     "tool_name=\"x\"><steptml:parameter name=\"city\">Paris</steptml:parameter>"
     "</steptml:invoke>", [("tool_call", W, PARIS)]),
    ("function_name_attribute_after_another", "<function id=\"c1\" name=\"get_weather\">"
     "{\"city\": \"Paris\"}</function>", [("tool_call", W, PARIS)]),
    ("qwen_function_attributes_beyond_the_name", "<function=get_weather id=\"1\">\n"
     "<parameter=city type=\"string\">\nParis\n</parameter>\n</function>",
     [("tool_call", W, PARIS)]),
    ("pythonic_list_then_prose", "[get_weather(city=\"Paris\"), calc(a=1, b=2)]\nI'll report "
     "back when I have both.", [("tool_call", W, PARIS), CALC]),
    ("json_calls_separated_by_semicolons_in_prose", "Checking both: {\"name\": \"get_weather\", "
     "\"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"calc\", \"parameters\": {\"a\": 1, "
     "\"b\": 2}}", [("tool_call", W, PARIS), CALC]),
    ("json_calls_one_per_line", "{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}\n{\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}",
     [("tool_call", W, PARIS), CALC]),
    ("tag_in_an_xml_fence_in_prose", "Hermes writes a call like this:\n```xml\n<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n```\n"
     "Want me to run it?", [("final_answer", "Hermes writes a call like this:\n```xml\n"
                                              "<tool_call>\n{\"name\": \"get_weather\", "
                                              "\"arguments\": {\"city\": \"Paris\"}}\n"
                                              "</tool_call>\n```\nWant me to run it?")]),
    ("calls_in_a_python_fence_in_prose", "In a notebook you would run:\n```python\n"
     "[get_weather(city='Paris')]\n```\nand read the result.",
     [("final_answer", "In a notebook you would run:\n```python\n[get_weather(city='Paris')]\n"
                       "```\nand read the result.")]),
    ("tag_in_an_unlabelled_fence_in_prose", "The format:\n```\n<function=get_weather>\n"
     "<parameter=city>\nParis\n</parameter>\n</function>\n```\nThat is all.",
     [("final_answer", "The format:\n```\n<function=get_weather>\n<parameter=city>\nParis\n"
                       "</parameter>\n</function>\n```\nThat is all.")]),
    ("example_in_a_fence_then_a_real_call", "The format is:\n```xml\n<tool_call>{\"name\": "
     "\"calc\", \"arguments\": {\"a\": 9}}</tool_call>\n```\nCalling it now:\n<tool_call>"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
     [("tool_call", W, PARIS)]),
    # --- prose that only shows JSON or code stays an answer -----------------------------
    ("prose_shows_json", "Here is an example payload:\n```json\n{\"city\": \"Paris\", "
     "\"days\": 3}\n```\nSend it to the API.",
     [("final_answer", "Here is an example payload:\n```json\n{\"city\": \"Paris\", "
                       "\"days\": 3}\n```\nSend it to the API.")]),
    ("prose_shows_python", "Call it from your code like `get_weather(city=\"Paris\")` and "
     "print the result.", [("final_answer", "Call it from your code like "
                                            "`get_weather(city=\"Paris\")` and print the "
                                            "result.")]),
    ("prose_with_brackets", "[Note] The forecast (for Paris) is sunny.",
     [("final_answer", "[Note] The forecast (for Paris) is sunny.")]),
    ("prose_python_block", "```python\nprint(get_weather(city='Paris'))\n```",
     [("final_answer", "```python\nprint(get_weather(city='Paris'))\n```")]),
]


@pytest.fixture(scope="module")
def parser() -> DecisionParser:
    return DecisionParser(SCHEMAS, SCHEMAS)


@pytest.mark.parametrize(("output", "expected"), [(c[1], c[2]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_format_is_read_exactly(parser: DecisionParser, output: str,
                                     expected: list[tuple[Any, ...]]) -> None:
    decisions = parser.parse(ModelResponse(text=output))
    assert [d.type for d in decisions] == [e[0] for e in expected], decisions
    for d, e in zip(decisions, expected, strict=True):
        if e[0] == "tool_call":
            assert (d.tool_name, d.arguments) == (e[1], e[2]), d
        elif e[0] == "final_answer":
            assert d.content == e[1], d
        else:
            assert e[1].lower() in d.reason.lower(), d.reason


def test_the_corpus_covers_enough_outputs() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize(("case", "rule"), [
    ("qwen_xml_one", "qwen_xml"), ("glm_one", "glm"), ("kimi_one", "kimi_k2"),
    ("deepseek_v3_fenced", "deepseek"), ("harmony_call", "harmony"),
    ("minimax_one", "minimax"), ("seed_oss_one", "seed_oss"), ("step3_one", "step3"),
    ("longcat_one", "longcat"), ("lfm2_pythonic", "lfm2"), ("internlm_plugin", "internlm"),
    ("granite_list", "granite"), ("granite_20b_function_call", "granite_fc"),
    ("phi4_functools", "phi4_functools"), ("jamba_tool_calls", "tool_calls_tag"),
    ("pythonic_list", "pythonic"), ("pythonic_llama4_tags", "python_tags"),
    ("hermes_prose_then_call", "hermes_tags"), ("mistral_v11_named", "mistral"),
    ("llama3_python_tag_two", "llama_tag"), ("xlam_json_array", "json"),
    ("gemma_tool_code", "tool_code"), ("nemotron_toolcall", "nemotron"),
    ("command_a_action", "command_a"), ("llama31_function_json", "qwen_xml")])
def test_the_rule_names_the_format_that_read_it(parser: DecisionParser, case: str,
                                                rule: str) -> None:
    output = next(c[1] for c in CASES if c[0] == case)
    assert {d.rule for d in parser.parse(ModelResponse(text=output))} == {rule}


SINGLE_CALLS = [c for c in CASES if len(c[2]) == 1 and c[2][0][0] == "tool_call"
                and c[2][0][1] == W]


@pytest.mark.parametrize("output", [c[1] for c in SINGLE_CALLS],
                         ids=[c[0] for c in SINGLE_CALLS])
def test_an_unknown_tool_is_invalid_with_the_real_names_in_every_format(
        parser: DecisionParser, output: str) -> None:
    decisions = parser.parse(ModelResponse(text=output.replace(W, "fetch_secrets")))
    assert [d.type for d in decisions] == ["invalid"], decisions
    assert "no tool named 'fetch_secrets'" in decisions[0].reason
    for name in SCHEMAS:
        assert name in decisions[0].reason


def test_the_marker_pattern_finds_every_marker_of_every_reader() -> None:
    # Texts with none are answered without asking the readers: a marker missing here would
    # read its format as prose.
    from agent_core.parser import _MARKERS
    from agent_core.toolcalls import READERS

    for reader in READERS:
        for marker in reader.markers:
            assert _MARKERS.search(f"before {marker} after"), (reader.name, marker)
    assert _MARKERS.search("The sales grew 20% in Q3.") is None

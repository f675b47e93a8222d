"""The tool-call formats of the model servers people run themselves (llama.cpp's server with
``--jinja``, Ollama, llama-cpp-python, TGI, vLLM), read from text alone.

Each case's model output is copied from the upstream project's own parser or chat-template
tests (the source is named above each group), with the tools those tests declare; where
upstream repairs what we refuse (a value cut off at the end), the expectation is ours and
says so. Decisions as in test_toolcall_formats.py: ("tool_call", name, arguments) /
("final_answer", content) / ("invalid", part of the reason).
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import DecisionParser
from agent_core.models.base import ModelResponse
from tests.unit.test_toolcall_formats import CASES as FORMAT_CASES


def _obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


S, INT, N, B = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
SCHEMAS: dict[str, dict[str, Any]] = {
    # llama.cpp tests/test-chat.cpp
    "special_function": _obj(arg1=INT), "special_function_with_opt": _obj(arg1=INT, arg2=INT),
    "python": _obj(code=S), "code_interpreter": _obj(code=S), "get_time": _obj(city=S),
    "get_weather": _obj(city=S, location=S, date=S, days=INT), "empty_args": _obj(),
    "amount": _obj(orig=N), "toggle": _obj(enabled=B), "set_nullable": _obj(value=S),
    "todo_list": _obj(todos={"type": "array", "items": S}), "set_config": _obj(config=_obj()),
    "magic_int": _obj(ref=INT, name=S), "magic": _obj(name=S, ref=S), "html": _obj(markup=S),
    "edit": _obj(oldString=S, newString=S, replaceAll=B),
    "execute_command": _obj(command=S, cwd=S, timeout=INT),
    "read_file_diff_md": _obj(review_id=S, file_id=S), "string_param": _obj(text=S),
    # Ollama model/parsers/*_test.go
    "search": _obj(query=S), "open_file": _obj(path=S), "bash": _obj(command=S),
    "process": _obj(items={"type": "array"}), "add": _obj(a=N, b=N),
    "set_flag": _obj(enabled=B, verbose=B), "update": _obj(data=_obj()), "greet": _obj(name=S),
    "set_temp": _obj(value=N), "get_current_weather": _obj(location=S, format=S),
    "book_flight": _obj(**{"from": S, "to": S, "date": S}), "set_temperature": _obj(value=N),
    "set_price": _obj(amount=N), "toggle_setting": _obj(enabled=B), "clear_value": _obj(field=S),
    "process_items": _obj(items={"type": "array"}), "update_config": _obj(settings=_obj()),
    "get_current_time": _obj(), "get_current_date": _obj(), "ping": _obj(),
    # vLLM tests/tool_parsers
    "sum_values": _obj(nums={"type": "array"}, exact=B), "noop": _obj(note=S),
    "run": _obj(), "write": _obj(content=S), "calc": _obj(x=N),
    "create_order": _obj(user_id=INT, urgent=B, note=S, shipping=_obj(city=S, zip=INT),
                         items={"type": "array", "items": _obj(sku=S, qty=INT)},
                         metadata={"type": "object", "additionalProperties": S},
                         duplicate_demo={"type": "object"}),
    "read_file": _obj(path=S),
}
SF = ("tool_call", "special_function", {"arg1": 1})
SF_OPT = ("tool_call", "special_function_with_opt", {"arg1": 1, "arg2": 2})
HELLO = ("final_answer", "Hello, world!\nWhat's up?")
CUT = ("invalid", "cut off")
HELLO_PY = ("tool_call", "python", {"code": "def hello():\n    print(\"Hello, world!\")\n\nhello()"})
QWEN_HELLO = ("<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n    "
              "print(\"Hello, world!\")\n\nhello()\n</parameter>\n</function>\n</tool_call>")
QWEN_NOT_REAL = QWEN_HELLO.replace("Hello, world!", "Not the real call!")
G4 = "<|\"|>"  # Gemma 4's string delimiter
FG = "<escape>"  # FunctionGemma's
DSML_OPEN, DSML_CLOSE = "<｜DSML｜function_calls>\n", "</｜DSML｜function_calls>"


def dsml(name: str, *params: tuple[str, str, str]) -> str:
    body = "".join(f"<｜DSML｜parameter name=\"{k}\" string=\"{s}\">{v}</｜DSML｜parameter>\n"
                   for k, s, v in params)
    return f"<｜DSML｜invoke name=\"{name}\">\n{body}</｜DSML｜invoke>\n"


KIMI = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
        "<|tool_call_end|>", "<|tool_calls_section_end|>")
K3_SEP = "<|sep|>"


def k3_arg(key: str, kind: str, value: str) -> str:
    return f"<|open|>argument key=\"{key}\" type=\"{kind}\"{K3_SEP}{value}<|close|>argument{K3_SEP}"


def k3(reasoning: str, response: str, name: str, body: str) -> str:
    return (f"<|open|>think{K3_SEP}{reasoning}<|close|>think{K3_SEP}<|open|>response{K3_SEP}"
            f"{response}<|close|>response{K3_SEP}<|open|>tools{K3_SEP}<|open|>call tool=\"{name}\""
            f" index=\"1\"{K3_SEP}{body}<|close|>call{K3_SEP}<|close|>tools{K3_SEP}"
            f"<|close|>message{K3_SEP}")


NS = "]<]minimax[>["
M3_ORDER = (f"{NS}<tool_call>\n{NS}<invoke name=\"create_order\">{NS}<user_id>42{NS}</user_id>"
            f"{NS}<urgent>true{NS}</urgent>{NS}<note>Please leave at front desk.{NS}</note>"
            f"{NS}<shipping>{NS}<city>Singapore{NS}</city>{NS}<zip>018956{NS}</zip>"
            f"{NS}</shipping>{NS}<items>{NS}<item>{NS}<sku>book-001{NS}</sku>{NS}<qty>2{NS}</qty>"
            f"{NS}</item>{NS}<item>{NS}<sku>pen-007{NS}</sku>{NS}<qty>5{NS}</qty>{NS}</item>"
            f"{NS}</items>{NS}<metadata>{NS}<source>mobile{NS}</source>{NS}<campaign>may-launch"
            f"{NS}</campaign>{NS}</metadata>{NS}<duplicate_demo>{NS}<tag>a{NS}</tag>{NS}<tag>b"
            f"{NS}</tag>{NS}</duplicate_demo>{NS}</invoke>\n{NS}</tool_call>")
M3_ORDER_ARGS = {"user_id": 42, "urgent": True, "note": "Please leave at front desk.",
                 "shipping": {"city": "Singapore", "zip": 18956},
                 "items": [{"sku": "book-001", "qty": 2}, {"sku": "pen-007", "qty": 5}],
                 "metadata": {"source": "mobile", "campaign": "may-launch"},
                 "duplicate_demo": {"tag": ["a", "b"]}}
HY = ":opensource"


def hy(name: str, *pairs: tuple[str, str]) -> str:
    args = "".join(f"<arg_key{HY}>{k}</arg_key{HY}><arg_value{HY}>{v}</arg_value{HY}>"
                   for k, v in pairs)
    return f"<tool_call{HY}>{name}{args}</tool_call{HY}>"


CASES: list[tuple[str, str, list[tuple[Any, ...]]]] = [
    # --- Gemma 4: llama.cpp tests/test-chat.cpp (google-gemma-4-31B-it.jinja), Ollama
    # model/parsers/gemma4_test.go ------------------------------------------------------
    ("gemma4_string", f"<|tool_call>call:get_time{{city:{G4}London{G4}}}<tool_call|>",
     [("tool_call", "get_time", {"city": "London"})]),
    ("gemma4_content_then_call", f"Hello, world!\nWhat's up?<|tool_call>call:get_time{{city:"
     f"{G4}Paris{G4}}}<tool_call|>", [("tool_call", "get_time", {"city": "Paris"})]),
    ("gemma4_parallel", f"<|tool_call>call:get_time{{city:{G4}London{G4}}}<tool_call|>"
     f"<|tool_call>call:get_weather{{city:{G4}Paris{G4}}}<tool_call|>",
     [("tool_call", "get_time", {"city": "London"}),
      ("tool_call", "get_weather", {"city": "Paris"})]),
    ("gemma4_integer", "<|tool_call>call:special_function{arg1:42}<tool_call|>",
     [("tool_call", "special_function", {"arg1": 42})]),
    ("gemma4_negative", "<|tool_call>call:special_function{arg1:-7}<tool_call|>",
     [("tool_call", "special_function", {"arg1": -7})]),
    ("gemma4_decimal", "<|tool_call>call:amount{orig:3.14}<tool_call|>",
     [("tool_call", "amount", {"orig": 3.14})]),
    ("gemma4_scientific", "<|tool_call>call:amount{orig:1.5e10}<tool_call|>",
     [("tool_call", "amount", {"orig": 1.5e10})]),
    ("gemma4_boolean", "<|tool_call>call:toggle{enabled:false}<tool_call|>",
     [("tool_call", "toggle", {"enabled": False})]),
    ("gemma4_null", "<|tool_call>call:set_nullable{value:null}<tool_call|>",
     [("tool_call", "set_nullable", {"value": None})]),
    ("gemma4_array", f"<|tool_call>call:todo_list{{todos:[{G4}buy milk{G4},{G4}walk dog{G4}]}}"
     "<tool_call|>", [("tool_call", "todo_list", {"todos": ["buy milk", "walk dog"]})]),
    ("gemma4_object", f"<|tool_call>call:set_config{{config:{{theme:{G4}dark{G4},count:3}}}}"
     "<tool_call|>", [("tool_call", "set_config", {"config": {"theme": "dark", "count": 3}})]),
    ("gemma4_empty_args", "<|tool_call>call:empty_args{}<tool_call|>",
     [("tool_call", "empty_args", {})]),
    ("gemma4_unescaped_quotes", f"<|tool_call>call:search{{query:{G4}say \"hello\"{G4}}}"
     "<tool_call|>", [("tool_call", "search", {"query": "say \"hello\""})]),
    ("gemma4_windows_path", f"<|tool_call>call:open_file{{path:{G4}C:\\users\\bob\\file.txt{G4}}}"
     "<tool_call|>", [("tool_call", "open_file", {"path": "C:\\users\\bob\\file.txt"})]),
    ("gemma4_json_string", f"<|tool_call>call:search{{query:\"raw \\\"quoted\\\"\",note:{G4}g"
     f"{G4}}}<tool_call|>", [("tool_call", "search", {"query": "raw \"quoted\"", "note": "g"})]),
    ("gemma4_thinking_then_call", "<|channel>thought\nI need to check the weather<channel|>"
     f"<|tool_call>call:get_weather{{location:{G4}Paris{G4}}}<tool_call|>",
     [("tool_call", "get_weather", {"location": "Paris"})]),
    ("gemma4_thinking_then_answer", "<|channel>thought\nI'm\nthinking<channel|>Hello, world!\n"
     "What's up?", [HELLO]),
    ("gemma4_stray_closer_at_the_end", "<|channel>thought\n<channel|>Hello, world!\nWhat's up?"
     "<channel|>", [HELLO]),
    ("gemma4_empty_thought_after_answer", "<|channel>thought\n<channel|>Hello, world!\nWhat's "
     "up?<|channel>thought\n<channel|>", [HELLO]),
    ("gemma4_opener_twice", "<|channel><|channel>thought\n<channel|>Hello, world!\nWhat's up?",
     [HELLO]),
    # ours: upstream Ollama closes the cut string (closes_at_end); a cut value never runs
    ("gemma4_cut_inside_a_string", f"<|tool_call>call:bash{{command:{G4}ls", [CUT]),
    ("gemma4_cut_after_a_number", "<|tool_call>call:special_function{arg1:4", [CUT]),
    ("gemma4_cut_inside_the_name", "<|tool_call>call:get_ti", [CUT]),
    # --- FunctionGemma: Ollama model/parsers/functiongemma_test.go ----------------------
    ("functiongemma_one", f"<start_function_call>call:get_weather{{city:{FG}Paris{FG}}}"
     "<end_function_call>", [("tool_call", "get_weather", {"city": "Paris"})]),
    ("functiongemma_content_before", f"Let me check.<start_function_call>call:get_weather{{"
     f"city:{FG}Paris{FG}}}<end_function_call>", [("tool_call", "get_weather", {"city": "Paris"})]),
    ("functiongemma_numbers", "<start_function_call>call:add{a:1,b:2}<end_function_call>",
     [("tool_call", "add", {"a": 1, "b": 2})]),
    ("functiongemma_two", f"<start_function_call>call:get_weather{{city:{FG}Paris{FG}}}"
     f"<end_function_call><start_function_call>call:get_weather{{city:{FG}London{FG}}}"
     "<end_function_call>", [("tool_call", "get_weather", {"city": "Paris"}),
                             ("tool_call", "get_weather", {"city": "London"})]),
    ("functiongemma_nested", f"<start_function_call>call:update{{data:{{name:{FG}test{FG},"
     "value:42}}<end_function_call>",
     [("tool_call", "update", {"data": {"name": "test", "value": 42}})]),
    ("functiongemma_array", f"<start_function_call>call:process{{items:[{FG}a{FG},{FG}b{FG},"
     f"{FG}c{FG}]}}<end_function_call>", [("tool_call", "process", {"items": ["a", "b", "c"]})]),
    ("functiongemma_unicode", f"こんにちは <start_function_call>call:greet{{name:{FG}日本語{FG}}}"
     "<end_function_call>", [("tool_call", "greet", {"name": "日本語"})]),
    # --- DeepSeek V3.2 DSML: llama.cpp tests/test-chat.cpp (deepseek-ai-DeepSeek-V3.2) ----
    ("dsml_after_reasoning", "Let me check the time</think>\n\n" + DSML_OPEN
     + dsml("get_time", ("city", "true", "Tokyo")) + DSML_CLOSE,
     [("tool_call", "get_time", {"city": "Tokyo"})]),
    ("dsml_integer", DSML_OPEN + dsml("special_function", ("arg1", "false", "1")) + DSML_CLOSE,
     [SF]),
    ("dsml_two", "Calling both</think>\n\n" + DSML_OPEN + dsml("get_time", ("city", "true", "Paris"))
     + dsml("get_weather", ("city", "true", "Paris")) + DSML_CLOSE,
     [("tool_call", "get_time", {"city": "Paris"}),
      ("tool_call", "get_weather", {"city": "Paris"})]),
    ("dsml_prose_before", "Thinking about it</think>Let me call the function.\n\n" + DSML_OPEN
     + dsml("special_function", ("arg1", "false", "1")) + DSML_CLOSE, [SF]),
    ("dsml_typed_values", DSML_OPEN + dsml("magic_int", ("ref", "false", "-14"),
                                           ("name", "true", "foo bar")) + DSML_CLOSE,
     [("tool_call", "magic_int", {"ref": -14, "name": "foo bar"})]),
    ("dsml_boolean_array_object", DSML_OPEN + dsml("toggle", ("enabled", "false", "true"))
     + dsml("todo_list", ("todos", "false", "[\"buy milk\",\"walk dog\"]"))
     + dsml("set_config", ("config", "false", "{\"theme\":\"dark\",\"level\":2}")) + DSML_CLOSE,
     [("tool_call", "toggle", {"enabled": True}),
      ("tool_call", "todo_list", {"todos": ["buy milk", "walk dog"]}),
      ("tool_call", "set_config", {"config": {"theme": "dark", "level": 2}})]),
    # DeepSeek V4 writes <｜DSML｜tool_calls> (vLLM tests/tool_parsers/test_deepseekv4_...)
    ("dsml_v4_tool_calls", "<｜DSML｜tool_calls>\n" + dsml("read_file", ("path", "true",
                                                                       "README.md"))
     + "</｜DSML｜tool_calls>", [("tool_call", "read_file", {"path": "README.md"})]),
    ("dsml_cut_inside_a_value", DSML_OPEN + "<｜DSML｜invoke name=\"get_time\">\n<｜DSML｜"
     "parameter name=\"city\" string=\"true\">Tok", [CUT]),
    ("dsml_cut_after_a_number", DSML_OPEN + "<｜DSML｜invoke name=\"special_function\">\n<｜DSML｜"
     "parameter name=\"arg1\" string=\"false\">1", [CUT]),
    # --- DeepSeek R1 / V3.1: llama.cpp tests/test-chat.cpp; Ollama deepseek3_test.go -----
    ("deepseek_r1_distill_opener", "<｜tool▁calls｜>function<｜tool▁sep｜>special_function\n"
     "```json\n{\"arg1\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", [SF]),
    ("deepseek_r1_after_forced_think", "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
     "<｜tool▁sep｜>special_function\n```json\n{\"arg1\": 1}```<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>", [SF]),
    ("deepseek_v31_reasoning_content_two", "REASONING</think>CONTENT<｜tool▁calls▁begin｜>"
     "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
     "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>", [("tool_call", "get_time", {"city": "Paris"}),
                            ("tool_call", "get_weather", {"city": "Paris"})]),
    ("deepseek_v31_prose_after", "I'll help you.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
     "get_weather<｜tool▁sep｜>{\"location\":\"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>完成 ✅",
     [("tool_call", "get_weather", {"location": "Tokyo"})]),
    ("deepseek_v31_bad_json", "Testing.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>ping"
     "<｜tool▁sep｜>{invalid json}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     [("invalid", "'ping'")]),
    # --- gpt-oss harmony: llama.cpp tests/test-chat.cpp (openai-gpt-oss-120b); Ollama
    # harmony/harmonyparser_test.go --------------------------------------------------------
    ("harmony_recipient_on_analysis_role_header",
     " to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}", [SF]),
    ("harmony_recipient_on_analysis_channel_header",
     "<|channel|>analysis to=functions.special_function<|message|>{\"arg1\": 1}", [SF]),
    ("harmony_recipient_on_analysis_constrained", " to=functions.special_function<|channel|>"
     "analysis <|constrain|>json<|message|>{\"arg1\": 1}", [SF]),
    ("harmony_commentary_without_constrain",
     "<|channel|>commentary to=functions.special_function<|message|>{\"arg1\": 1}", [SF]),
    ("harmony_reasoning_then_call_on_analysis", "<|channel|>analysis<|message|>I'm\nthinking"
     "<|end|><|start|>assistant to=functions.special_function<|channel|>analysis<|message|>"
     "{\"arg1\": 1}", [SF]),
    ("harmony_constrain_without_space", "<|start|>assistant<|channel|>commentary "
     "to=functions.get_weather<|constrain|>json<|message|>{\"location\":\"San Francisco\"}"
     "<|call|>", [("tool_call", "get_weather", {"location": "San Francisco"})]),
    ("harmony_edit", "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>"
     "assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>"
     "{\"oldString\": \"if (part < railCount - 1) {\", \"newString\": \"if (part < 4) {\", "
     "\"replaceAll\": false}", [("tool_call", "edit", {"oldString": "if (part < railCount - 1) {",
                                                       "newString": "if (part < 4) {",
                                                       "replaceAll": False})]),
    ("harmony_commentary_is_the_answer", "<|channel|>commentary<|message|>Hello, world!\n"
     "What's up?", [HELLO]),
    ("harmony_final_constrained", "<|channel|>analysis<|message|>I need to output the invoice "
     "details in JSON<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>"
     "{\"amount\": 123.45, \"date\": \"2025-12-03\"}",
     [("final_answer", "{\"amount\": 123.45, \"date\": \"2025-12-03\"}")]),
    ("harmony_builtin_recipient", "<|channel|>analysis<|message|>I will execute python to say "
     "hello<|end|><|start|>assistant to=container.exec<|channel|>commentary<|message|>"
     "python3 -c 'print(\"hello\")'", [("invalid", "'container.exec'")]),
    ("harmony_to_assistant_is_no_recipient", "<|channel|>commentary to=assistant<|channel|>"
     "analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>"
     "Hello, world!\nWhat's up?", [HELLO]),
    ("harmony_cut_inside_the_recipient", "<|channel|>commentary to=functions.get_wea",
     [("invalid", "cut off")]),
    # --- Kimi K2 / K2-Thinking: llama.cpp tests/test-chat.cpp (Kimi-K2-Thinking.jinja) ----
    ("kimi_thinking_then_calls", f"<think>I need to call two functions</think>{KIMI[0]}"
     f"{KIMI[1]}functions.special_function:0{KIMI[2]}{{\"arg1\": 1}}{KIMI[3]}{KIMI[1]}"
     f"functions.python:1{KIMI[2]}{{\"code\": \"print('hey')\"}}{KIMI[3]}{KIMI[4]}",
     [SF, ("tool_call", "python", {"code": "print('hey')"})]),
    ("kimi_calls_inside_reasoning", f"<think>I need to call two functions{KIMI[0]}{KIMI[1]}"
     f"functions.special_function:0{KIMI[2]}{{\"arg1\": 1}}{KIMI[3]}{KIMI[1]}functions.python:1"
     f"{KIMI[2]}{{\"code\": \"print('hey')\"}}{KIMI[3]}{KIMI[4]}",
     [SF, ("tool_call", "python", {"code": "print('hey')"})]),
    ("kimi_calls_inside_reasoning_without_end_markers", f"<think>I need to call two functions"
     f"{KIMI[1]}functions.special_function:0{KIMI[2]}{{\"arg1\": 1}}{KIMI[1]}functions.python:1"
     f"{KIMI[2]}{{\"code\": \"print('hey')\"}}",
     [SF, ("tool_call", "python", {"code": "print('hey')"})]),
    ("kimi_three_calls", f"{KIMI[0]}{KIMI[1]}functions.special_function:0{KIMI[2]}{{\"arg1\": 1}}"
     f"{KIMI[3]}{KIMI[1]}functions.python:1{KIMI[2]}{{\"code\": \"print(1)\"}}{KIMI[3]}{KIMI[1]}"
     f"functions.html:2{KIMI[2]}{{\"markup\": \"<p>test</p>\"}}{KIMI[3]}{KIMI[4]}",
     [SF, ("tool_call", "python", {"code": "print(1)"}),
      ("tool_call", "html", {"markup": "<p>test</p>"})]),
    ("kimi_real_life_execute_command", f"{KIMI[1]}functions.execute_command:0{KIMI[2]}"
     "{\"command\": \"ls -lah\", \"cwd\": \"/home/jarvis/development/exllamav3\", \"timeout\": 10}",
     [("tool_call", "execute_command", {"command": "ls -lah", "timeout": 10,
                                        "cwd": "/home/jarvis/development/exllamav3"})]),
    ("kimi_cut_after_a_key", f"{KIMI[0]}{KIMI[1]}functions.special_function:0{KIMI[2]}"
     "{\"arg1\": ", [("invalid", "not readable")]),
    # ours: a call quoted in reasoning that was closed is a thought, never a call
    ("kimi_call_quoted_in_closed_reasoning", f"<think>The format is {KIMI[0]}{KIMI[1]}"
     f"functions.special_function:0{KIMI[2]}{{\"arg1\": 1}}{KIMI[3]}{KIMI[4]}, no need."
     "</think>The answer is 42.", [("final_answer", "The answer is 42.")]),
    # --- Kimi K3 XTML: vLLM tests/tool_parsers/test_kimi_k3_tool_parser.py and the K3
    # markers of test_structural_tag_registry.py ------------------------------------------
    ("kimi_k3_typed_arguments", k3("Need the weather tool.", "I'll check.", "get_weather",
                                   k3_arg("city", "string", "Hangzhou")
                                   + k3_arg("days", "number", "1.5")
                                   + k3_arg("detailed", "boolean", "true")
                                   + k3_arg("filters", "object", "{\"kind\":\"rain\"}")
                                   + k3_arg("hours", "array", "[8,20]")),
     [("tool_call", "get_weather", {"city": "Hangzhou", "days": 1.5, "detailed": True,
                                    "filters": {"kind": "rain"}, "hours": [8, 20]})]),
    ("kimi_k3_json_block", k3("t", "", "run", "<|open|>json type=\"object\"<|sep|>"
                              "{\"b\": 1,  \"a\": [2 , 3]}<|close|>json<|sep|>"),
     [("tool_call", "run", {"b": 1, "a": [2, 3]})]),
    ("kimi_k3_raw_string", k3("t", "", "write", k3_arg(
        "content", "string", "line one\nline two {\"not\": \"json\"} & <tags>")),
     [("tool_call", "write", {"content": "line one\nline two {\"not\": \"json\"} & <tags>"})]),
    ("kimi_k3_malformed_typed_value_stays_text", k3("t", "", "calc", k3_arg(
        "x", "number", "not a number")), [("tool_call", "calc", {"x": "not a number"})]),
    ("kimi_k3_answer", "<|open|>think<|sep|>t<|close|>think<|sep|><|open|>response<|sep|>"
     "Hello<|close|>response<|sep|><|close|>message<|sep|>", [("final_answer", "Hello")]),
    ("kimi_k3_message_close", "Hello<|close|>message<|sep|>", [("final_answer", "Hello")]),
    ("kimi_k3_cut_inside_an_argument", "<|open|>tools<|sep|><|open|>call tool=\"calc\" "
     "index=\"1\"<|sep|><|open|>argument key=\"x\" type=\"number\"<|sep|>4", [CUT]),
    # --- Apertus: llama.cpp tests/test-chat.cpp (Apertus-8B-Instruct.jinja) --------------
    ("apertus_one", "<|tools_prefix|>[{\"special_function\": {\"arg1\": 1}}]<|tools_suffix|>",
     [SF]),
    ("apertus_after_reasoning", "<|inner_prefix|>I'm\nthinking<|inner_suffix|><|tools_prefix|>"
     "[{\"special_function\": {\"arg1\": 1}}]<|tools_suffix|>", [SF]),
    ("apertus_reasoning_then_answer", "<|inner_prefix|>I'm\nthinking<|inner_suffix|>Hello, "
     "world!\nWhat's up?", [HELLO]),
    ("apertus_two_then_prose", "<|tools_prefix|>[{\"special_function\": {\"arg1\": 1}}, "
     "{\"special_function_with_opt\": {\"arg1\": 1, \"arg2\": 2}}]<|tools_suffix|> Done.",
     [SF, SF_OPT]),
    ("apertus_cut_after_a_number", "<|tools_prefix|>[{\"special_function\": {\"arg1\": 1",
     [("invalid", "readable JSON")]),
    # --- <function name="…">: llama.cpp test-chat.cpp (Hermes 2 Pro); vLLM
    # tests/tool_parsers/test_minicpm5xml_tool_parser.py -----------------------------------
    ("function_name_json", "<function name=\"special_function\">\n{\"arg1\": 1}\n</function>",
     [SF]),
    ("minicpm_params_around_prose", "Intro before.\n<function name=\"get_weather\"><param "
     "name=\"city\">上海</param><param name=\"date\">2024-06-27</param></function>\nOutro after.\n",
     [("tool_call", "get_weather", {"city": "上海", "date": "2024-06-27"})]),
    ("minicpm_cdata", "<function name=\"get_weather\"><param name=\"city\"><![CDATA[北\n京]]>"
     "</param><param name=\"date\">2024-06-27</param></function>\n",
     [("tool_call", "get_weather", {"city": "北\n京", "date": "2024-06-27"})]),
    ("minicpm_collapsed_tags", "<functionname=\"get_weather\"><paramname=\"city\">上海</param>"
     "<paramname=\"date\">2024-06-27</param></function>\n",
     [("tool_call", "get_weather", {"city": "上海", "date": "2024-06-27"})]),
    ("minicpm_typed_values_two_calls", "Head\n<function name=\"get_weather\"><param name=\"city\">"
     "北京</param></function>\nTXT\n<function name=\"sum_values\"><param name=\"nums\">[7,8,9]"
     "</param><param name=\"exact\">false</param></function>\nTail\n",
     [("tool_call", "get_weather", {"city": "北京"}),
      ("tool_call", "sum_values", {"nums": [7, 8, 9], "exact": False})]),
    ("minicpm_no_parameters", "<function name=\"noop\"></function>\n", [("tool_call", "noop", {})]),
    # --- Hermes 2 Pro's other wrappers: llama.cpp tests/test-chat.cpp ---------------------
    ("hermes_tool_tag", "<tool>\n  {\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}"
     "\n</tool>", [SF]),
    ("hermes_response_tag_in_xml_fence", "```xml\n<response>\n    {\"name\": "
     "\"special_function\", \"arguments\": {\"arg1\": 1}}\n</response>\n```", [SF]),
    ("hermes_function_call_in_json_fence", "```json\n\n                    <function_call> "
     "{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}} \n                    "
     "</function_call> \n``` ", [SF]),
    ("hermes_json_tag", "<JSON>\n  {\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}"
     "\n</JSON>", [SF]),
    ("hermes_prose_then_bare_json", "This is not a tool call:\n{\"name\": \"special_function\", "
     "\"arguments\": {\"arg1\": 1}}", [SF]),
    ("hermes_two_function_tags", "<function=special_function>{\"arg1\": 1}</function>\n"
     "<function=python>{\"code\":\"print('hello')\"}</function>",
     [SF, ("tool_call", "python", {"code": "print('hello')"})]),
    ("reka_call_quoted_in_reasoning", "Let me think about <tool_call>\n{\"name\": "
     "\"special_function\", \"arguments\": {\"arg1\": 2}}</tool_call> hmm\n</think>\n\n"
     "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>",
     [SF]),
    # --- Functionary v3.2 / Firefunction v2: llama.cpp tests/test-chat.cpp ---------------
    ("functionary_v32_call", "special_function\n{\"arg1\": 1}", [SF]),
    ("functionary_v32_text_then_call", "all\nHello, world!\nnono\nWhat's up?>>>special_function"
     "\n{\"arg1\": 1}\n", [SF]),
    ("functionary_v32_text", "all\nHello, world!\nWhat's up?", [HELLO]),
    # ours: raw code has no end of its own, so code at the end may be cut (upstream runs it)
    ("functionary_v32_python_lines", "python\n# This is a program:\nprint('hey')",
     [("invalid", "may be cut off")]),
    ("functionary_v32_python_then_text", "python\n# This is a program:\nprint('hey')\n>>>all\n"
     "Done.", [("tool_call", "python", {"code": "# This is a program:\nprint('hey')"})]),
    ("functionary_v32_trailing_space", "special_function\n{\"arg1\": 1} \n                    ",
     [SF]),
    ("functionary_v32_cut", ">>>special_function\n{\"arg1\": ", [("invalid", "not readable")]),
    # ours: an answer whose first line is only a word that names a tool stays an answer
    ("functionary_v32_tool_word_then_prose", "search\nis what I would do first.",
     [("final_answer", "search\nis what I would do first.")]),
    ("firefunction_v2", " functools[{\"name\": \"special_function\", \"arguments\": "
     "{\"arg1\": 1}}]", [SF]),
    # --- Command R7B / R+: llama.cpp tests/test-chat.cpp ----------------------------------
    ("command_r7b_response", "<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>",
     [HELLO]),
    ("command_r7b_action", "<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
     "    {\"tool_call_id\": \"0\", \"tool_name\": \"special_function\", \"parameters\": "
     "{\"arg1\": 1}}\n]<|END_ACTION|>", [SF]),
    ("command_r7b_cut_after_the_name", "<|START_THINKING|>I'm\nthinking<|END_THINKING|>"
     "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"special_function\", ",
     [("invalid", "readable JSON")]),
    ("command_r_plus_action_fence", "Action:\n```json\n[{\"tool_name\": \"special_function\", "
     "\"parameters\": {\"arg1\": 1}}]\n```", [SF]),
    # --- Mistral 3 / Magistral, Small 3.2, Devstral, Nemo: llama.cpp tests/test-chat.cpp --
    ("magistral_think_then_answer", "[THINK]I'm\nthinking[/THINK]Hello, world!\nWhat's up?",
     [HELLO]),
    ("magistral_think_then_call", "[THINK]I'm\nthinking[/THINK][TOOL_CALLS]special_function"
     "[ARGS]{\"arg1\":1}", [SF]),
    ("magistral_call_quoted_in_reasoning", "[THINK]Let me think about [TOOL_CALLS]"
     "special_function[ARGS]{\"arg1\":1} and more[/THINK][TOOL_CALLS]special_function[ARGS]"
     "{\"arg1\": 1}", [SF]),
    ("magistral_two", "[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}[TOOL_CALLS]"
     "special_function_with_opt[ARGS]{\"arg1\": 1, \"arg2\": 2}", [SF, SF_OPT]),
    ("mistral_small_32_call_ids", "[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]"
     "{\"arg1\": 1}[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{\"arg1\": 1, "
     "\"arg2\": 2}", [SF, SF_OPT]),
    ("mistral_nemo_list_with_id", "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": "
     "{\"arg1\": 1}, \"id\": \"123456789\"}]", [SF]),
    ("devstral_prose_then_call", "Hello, world!\nWhat's up?[TOOL_CALLS]special_function[ARGS]"
     "{\"arg1\": 1}", [SF]),
    # --- Nemotron, Qwen3.5, StepFun 3.5: llama.cpp tests/test-chat.cpp --------------------
    ("nemotron_v2_toolcall", "<TOOLCALL>[{\"name\": \"special_function\", \"arguments\": "
     "{\"arg1\": 1}}]</TOOLCALL><SPECIAL_12>", [SF]),
    ("nemotron3_xml_after_reasoning", "I'm\nthinking\n</think>\n<tool_call>\n<function="
     "special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n", [SF]),
    ("nemotron3_call_quoted_in_reasoning", f"Let's call a tool: {QWEN_NOT_REAL}\n</think>\n"
     f"{QWEN_HELLO}\n", [HELLO_PY]),
    ("qwen35_call_quoted_in_reasoning", f"Let's call a tool: {QWEN_NOT_REAL}\n</think>\n\n"
     f"{QWEN_HELLO}", [HELLO_PY]),
    ("qwen35_no_arguments", "<tool_call>\n<function=empty_args>\n</function>\n</tool_call>",
     [("tool_call", "empty_args", {})]),
    ("stepfun35_numbers_that_are_strings", "Let me call the magic tool\n</think>\n<tool_call>\n"
     "<function=magic>\n<parameter=name>\nfooBar\n</parameter>\n<parameter=ref>\n5123123\n"
     "</parameter>\n</function>\n</tool_call>",
     [("tool_call", "magic", {"name": "fooBar", "ref": "5123123"})]),
    ("stepfun35_empty_string", "Call string_param with empty text\n</think>\n<tool_call>\n"
     "<function=string_param>\n<parameter=text>\n\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", "string_param", {"text": ""})]),
    # --- GLM-4.7: llama.cpp tests/test-chat.cpp (GLM-4.7-Flash.jinja) ---------------------
    ("glm47_inline", "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1"
     "</arg_value></tool_call>", [SF]),
    ("glm47_no_arguments_after_reasoning", "Let me read the diff content.</think><tool_call>"
     "read_file_diff_md</tool_call>", [("tool_call", "read_file_diff_md", {})]),
    ("glm47_two", "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value>"
     "</tool_call><tool_call>special_function_with_opt<arg_key>arg1</arg_key><arg_value>1"
     "</arg_value><arg_key>arg2</arg_key><arg_value>2</arg_value></tool_call>", [SF, SF_OPT]),
    ("glm_cut_inside_the_name", "<tool_call>special_func", [CUT]),
    # --- LFM2 / LFM2.5: llama.cpp tests/test-chat.cpp -------------------------------------
    ("lfm2_reasoning_prose_call", "<think>I need to call a function</think>Let me check the "
     "time.<|tool_call_start|>[get_time(city=\"Paris\")]<|tool_call_end|>",
     [("tool_call", "get_time", {"city": "Paris"})]),
    ("lfm2_call_quoted_in_reasoning", "<think>Let me think about <|tool_call_start|>"
     "[special_function(arg1=1)]<|tool_call_end|> hmm</think><|tool_call_start|>"
     "[special_function(arg1=1)]<|tool_call_end|>", [SF]),
    ("lfm25_bare_list", "[special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)]",
     [SF, SF_OPT]),
    ("lfm25_prose_then_list", "Let me check the time.[get_time(city=\"Paris\")]",
     [("tool_call", "get_time", {"city": "Paris"})]),
    ("lfm25_no_arguments", "[empty_args()]", [("tool_call", "empty_args", {})]),
    ("lfm25_cut", "[special_function(arg1=", [("invalid", "cut off")]),
    # --- GigaChat 3 / 3.1, Apriel 1.5: llama.cpp tests/test-chat.cpp ----------------------
    ("gigachat3", "<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"special_function\","
     " \"arguments\": {\"arg1\": 1}}", [SF]),
    ("gigachat31_prose_then_call", "Hello, world!\nWhat's up?<|function_call|>{\"name\": "
     "\"special_function\", \"arguments\": {\"arg1\": 1}}", [SF]),
    ("apriel15_tool_calls", "<tool_calls>[{\"name\": \"special_function\", \"arguments\": "
     "{\"arg1\": 1}}]</tool_calls>", [SF]),
    # --- Llama 3.x: llama.cpp tests/test-chat.cpp -----------------------------------------
    ("llama31_builtin_python", "<|python_tag|>python.call(code=\"print('hey')\")",
     [("tool_call", "python", {"code": "print('hey')"})]),
    ("llama32_bare_json", "{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
     [SF]),
    # --- OLMo 3: Ollama model/parsers/olmo3_test.go, olmo3_think_test.go -----------------
    ("olmo3_one", "<function_calls>get_weather(location=\"San Francisco\")</function_calls>",
     [("tool_call", "get_weather", {"location": "San Francisco"})]),
    ("olmo3_prose_then_call", "Let me check the weather.<function_calls>get_weather("
     "location=\"NYC\")</function_calls>", [("tool_call", "get_weather", {"location": "NYC"})]),
    ("olmo3_one_per_line", "<function_calls>get_weather(location=\"San Francisco\")\n"
     "get_weather(location=\"New York\")</function_calls>",
     [("tool_call", "get_weather", {"location": "San Francisco"}),
      ("tool_call", "get_weather", {"location": "New York"})]),
    ("olmo3_literals", "<function_calls>book_flight(from=\"SFO\", to=\"NYC\", date=\"2024-01-15\")"
     "\nset_price(amount=19.99)\ntoggle_setting(enabled=true)\nclear_value(field=null)\n"
     "update_config(settings={\"theme\": \"dark\", \"fontSize\": 14})\nget_current_time()\n"
     "search(query='hello world')</function_calls>",
     [("tool_call", "book_flight", {"from": "SFO", "to": "NYC", "date": "2024-01-15"}),
      ("tool_call", "set_price", {"amount": 19.99}),
      ("tool_call", "toggle_setting", {"enabled": True}),
      ("tool_call", "clear_value", {"field": None}),
      ("tool_call", "update_config", {"settings": {"theme": "dark", "fontSize": 14}}),
      ("tool_call", "get_current_time", {}), ("tool_call", "search", {"query": "hello world"})]),
    ("olmo3_think_closed_by_the_template", "Yes, that should work. Let me go with that "
     "response.\n\n</think>\n\nHi! I'm all set and ready to assist.",
     [("final_answer", "Hi! I'm all set and ready to assist.")]),
    # ours: Ollama leaks "more thinking</think>" into the answer; the outer thought is cut
    ("olmo3_nested_think_pairs", "I'm thinking <think>nested</think> more thinking</think>"
     "Final content.", [("final_answer", "Final content.")]),
    ("olmo3_two_stray_closers", "First thinking</think>Content</think>More content.",
     [("final_answer", "More content.")]),
    # --- Hunyuan 3 / HY4: vLLM tests/tool_parsers/test_hy_v3_tool_parser.py,
    # test_hy_v4_tool_parser.py --------------------------------------------------------------
    ("hunyuan3_no_arguments", "<tool_calls><tool_call>get_current_date<tool_sep></tool_call>"
     "</tool_calls>", [("tool_call", "get_current_date", {})]),
    ("hunyuan3_arguments", "<tool_calls>\n<tool_call>get_weather<tool_sep>\n<arg_key>city"
     "</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2026-03-30"
     "</arg_value>\n</tool_call>\n</tool_calls>",
     [("tool_call", "get_weather", {"city": "Beijing", "date": "2026-03-30"})]),
    ("hunyuan3_prose_before", "Checking.<tool_calls>\n<tool_call>get_current_date<tool_sep>\n"
     "</tool_call>\n</tool_calls>", [("tool_call", "get_current_date", {})]),
    ("hy4_suffixed_typed", f"sure!<tool_calls{HY}>" + hy("get_weather", ("city", "Beijing"),
                                                           ("days", "3")) + f"</tool_calls{HY}>",
     [("tool_call", "get_weather", {"city": "Beijing", "days": 3})]),
    ("hy4_two", f"<tool_calls{HY}>" + hy("get_weather", ("city", "A")) + hy("get_current_date")
     + f"</tool_calls{HY}>", [("tool_call", "get_weather", {"city": "A"}),
                              ("tool_call", "get_current_date", {})]),
    ("hy4_reasoning", f"<think{HY}>plan</think{HY}><tool_calls{HY}>"
     + hy("get_weather", ("city", "Seoul"), ("days", "2")) + f"</tool_calls{HY}>",
     [("tool_call", "get_weather", {"city": "Seoul", "days": 2})]),
    ("hy4_key_without_value", f"<tool_calls{HY}><tool_call{HY}>get_weather<arg_key{HY}>city"
     f"</arg_key{HY}></tool_call{HY}></tool_calls{HY}>", [CUT]),
    # --- MiniMax-M3: vLLM tests/tool_parsers/test_minimax_m3_tool_parser.py ---------------
    ("minimax_m3_nested", "I will create it.\n" + M3_ORDER,
     [("tool_call", "create_order", M3_ORDER_ARGS)]),
    ("minimax_m3_two", f"{NS}<tool_call>\n{NS}<invoke name=\"create_order\">{NS}<user_id>1"
     f"{NS}</user_id>{NS}</invoke>\n{NS}<invoke name=\"create_order\">{NS}<user_id>2{NS}</user_id>"
     f"{NS}</invoke>\n{NS}</tool_call>", [("tool_call", "create_order", {"user_id": 1}),
                                          ("tool_call", "create_order", {"user_id": 2})]),
    ("minimax_m3_cut_inside_a_value", f"plain {NS}<tool_call>\n{NS}<invoke name=\"create_order\">"
     f"{NS}<user_id>2", [CUT]),
    # --- TGI's grammar: huggingface/text-generation-inference integration-tests
    # models/test_tools_llama.py, router/src/infer/tool_grammar.rs --------------------------
    ("tgi_function", "{\"function\": {\"_name\": \"get_current_weather\", \"format\": "
     "\"celsius\", \"location\": \"Paris, France\"}}<|eot_id|>",
     [("tool_call", "get_current_weather", {"format": "celsius", "location": "Paris, France"})]),
    ("tgi_no_tool", "{\"function\": {\"_name\": \"no_tool\", \"content\": \"There is no tool "
     "for that.\"}}", [("final_answer", "There is no tool for that.")]),
    # --- llama-cpp-python: llama_cpp/llama_chat_format.py (chatml-function-calling) -------
    ("llama_cpp_python_functions", "functions.get_weather:\n{ \"city\": \"Paris\" }",
     [("tool_call", "get_weather", {"city": "Paris"})]),
    ("llama_cpp_python_two", "functions.get_weather:\n{ \"city\": \"Paris\" }\n"
     "functions.get_time:\n{ \"city\": \"Rome\" }",
     [("tool_call", "get_weather", {"city": "Paris"}), ("tool_call", "get_time", {"city": "Rome"})]),
    ("llama_cpp_python_in_function_calls", "<function_calls>\nfunctions.get_weather:\n"
     "{ \"city\": \"Paris\" }\n</function_calls>", [("tool_call", "get_weather", {"city": "Paris"})]),
]


@pytest.fixture(scope="module")
def parser() -> DecisionParser:
    return DecisionParser(SCHEMAS, SCHEMAS)


def check(decisions: list[Any], expected: list[tuple[Any, ...]]) -> None:
    assert [d.type for d in decisions] == [e[0] for e in expected], decisions
    for d, e in zip(decisions, expected, strict=True):
        if e[0] == "tool_call":
            assert (d.tool_name, d.arguments) == (e[1], e[2]), d
        elif e[0] == "final_answer":
            assert d.content == e[1], d
        else:
            assert e[1].lower() in d.reason.lower(), d.reason


@pytest.mark.parametrize(("output", "expected"), [(c[1], c[2]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_upstream_output_is_read_exactly(parser: DecisionParser, output: str,
                                              expected: list[tuple[Any, ...]]) -> None:
    check(parser.parse(ModelResponse(text=output)), expected)


def test_every_reader_has_cases_of_its_own() -> None:
    from agent_core.toolcalls import READERS

    counts: dict[str, int] = {}
    for cases, schemas in ((CASES, SCHEMAS), (FORMAT_CASES, None)):
        parser = DecisionParser(schemas or {}, schemas)
        for _, output, _ in cases:
            for rule in {d.rule.split("+")[0] for d in parser.parse(ModelResponse(text=output))}:
                counts[rule] = counts.get(rule, 0) + 1
    thin = {r.name: counts.get(r.name, 0) for r in READERS if counts.get(r.name, 0) < 2}
    assert thin == {}, "readers with fewer than two cases"


#: Functionary v3.2's first recipient is a call only when it names a tool (without ">>>",
#: "fetch_secrets\n{...}" is prose); "python" is also inside "<|python_tag|>".
_NAMED_BY_THE_TOOLS = {"functionary_v32_call", "functionary_v32_python_then_text",
                       "functionary_v32_trailing_space", "llama31_builtin_python"}
SINGLE_CALLS = [c for c in CASES if len(c[2]) == 1 and c[2][0][0] == "tool_call"
                and c[0] not in _NAMED_BY_THE_TOOLS]


@pytest.mark.parametrize("case", SINGLE_CALLS, ids=[c[0] for c in SINGLE_CALLS])
def test_an_unknown_tool_is_invalid_in_every_upstream_format(
        parser: DecisionParser, case: tuple[str, str, list[tuple[Any, ...]]]) -> None:
    _, output, [(_, name, _)] = case
    decisions = parser.parse(ModelResponse(text=output.replace(name, "fetch_secrets")))
    assert [d.type for d in decisions] == ["invalid"], decisions
    assert "no tool named 'fetch_secrets'" in decisions[0].reason


def test_the_runtime_doc_lists_every_reader_with_its_models() -> None:
    from pathlib import Path

    from agent_core.toolcalls import READERS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "runtime.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in doc.splitlines()
            if line.lstrip().startswith("| `")}
    listed = {name.strip(" `") for key in rows for name in key.split("/")}
    assert {r.name for r in READERS} <= listed
    assert all(row.rstrip().rstrip("|").rsplit("|", 1)[1].strip() for row in rows.values())

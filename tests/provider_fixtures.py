"""Provider answers as the providers send them, for replaying verbatim (``Verbatim``).

Each fixture says where it comes from: a recorded answer in an official SDK's tests, an
example in the provider's documentation, or, marked "spliced", recorded pieces of those
joined (say which) to make a case no single recording shows. Nothing here is guessed.
"""

from __future__ import annotations

import json

# --- OpenAI chat/completions -------------------------------------------------------------

# openai/openai-python tests/lib/chat/test_completions.py::test_parse_pydantic_model_refusal
# (the recorded body, commit 068ea67fda0347ea60f5cbd1e074d21e5ed1dc5f): content null, the
# refusal in its own field, finish_reason "stop".
OPENAI_REFUSAL = (
    '{"id": "chatcmpl-ABfvwoKVWPQj2UPlAcAKM7s40GsRx", "object": "chat.completion", '
    '"created": 1727346164, "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, '
    '"message": {"role": "assistant", "content": null, "refusal": "I\'m very sorry, but I '
    'can\'t assist with that."}, "logprobs": null, "finish_reason": "stop"}], "usage": '
    '{"prompt_tokens": 79, "completion_tokens": 12, "total_tokens": 91, '
    '"completion_tokens_details": {"reasoning_tokens": 0}}, "system_fingerprint": '
    '"fp_5050236cbd"}')


def _openai_chunks(prefix: str, chunks: list[str]) -> str:
    return "".join(f"data: {{{prefix}{c}}}\n\n" for c in chunks) + "data: [DONE]\n\n"


_REFUSAL_ID = ('"id":"chatcmpl-ABfw5GEVqPbLY576l46FZDQoNJ2KC","object":"chat.completion.chunk",'
               '"created":1727346173,"model":"gpt-4o-2024-08-06",'
               '"system_fingerprint":"fp_5050236cbd",')


def _refusal_piece(token: str, logprob: str, data: list[int]) -> str:
    text = json.dumps(token)
    return (f'"choices":[{{"index":0,"delta":{{"refusal":{text}}},"logprobs":{{"content":null,'
            f'"refusal":[{{"token":{text},"logprob":{logprob},"bytes":'
            f'{json.dumps(data).replace(" ", "")},"top_logprobs":[]}}]}},"finish_reason":null}}]')


# openai/openai-python .inline-snapshot/external/569c877e69429d4cbc1577d2cd6dd33878095c68badc6b
# 6654a69769b391a1c1.bin (test_refusal_logprobs_events; commit 3fc6b98354dfdeab6dc4b184dd4df9
# 149712a325), written out chunk by chunk: refusal deltas with content null, then
# finish_reason "stop" and the usage chunk.
OPENAI_REFUSAL_STREAM = _openai_chunks(_REFUSAL_ID, [
    '"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":""},'
    '"logprobs":{"content":null,"refusal":[]},"finish_reason":null}]',
    _refusal_piece("I'm", "-0.0012038043", [73, 39, 109]),
    _refusal_piece(" very", "-0.8438816", [32, 118, 101, 114, 121]),
    _refusal_piece(" sorry", "-3.4121115e-6", [32, 115, 111, 114, 114, 121]),
    _refusal_piece(",", "-0.000033809047", [44]),
    _refusal_piece(" but", "-0.038048144", [32, 98, 117, 116]),
    _refusal_piece(" I", "-0.0016109125", [32, 73]),
    _refusal_piece(" can't", "-0.0073532974", [32, 99, 97, 110, 39, 116]),
    _refusal_piece(" assist", "-0.0020837625", [32, 97, 115, 115, 105, 115, 116]),
    _refusal_piece(" with", "-0.00318354", [32, 119, 105, 116, 104]),
    _refusal_piece(" that", "-0.0017186158", [32, 116, 104, 97, 116]),
    _refusal_piece(".", "-0.57687104", [46]),
    '"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]',
    '"choices":[],"usage":{"prompt_tokens":79,"completion_tokens":12,"total_tokens":91,'
    '"completion_tokens_details":{"reasoning_tokens":0}}',
])

_TOOL_ID = ('"id":"chatcmpl-ABfw8AOXnoa2kzy11vVTSjuQhHCQr","object":"chat.completion.chunk",'
            '"created":1727346176,"model":"gpt-4o-2024-08-06",'
            '"system_fingerprint":"fp_7568d46099",')


def _args(piece: str) -> str:
    return ('"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
            f'{json.dumps(piece)}}}}}]}},"logprobs":null,"finish_reason":null}}]')


_TOOL_START = ('"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":'
               '[{"index":0,"id":"call_c91SqDXlYFuETYv8mUHzz6pp","type":"function","function":'
               '{"name":"GetWeatherArgs","arguments":""}}],"refusal":null},"logprobs":null,'
               '"finish_reason":null}]')
_TOOL_PIECES = ['{"', "city", '":"', "Ed", "inburgh", '","', "country", '":"', "UK", '","',
                "units", '":"', "c", '"}']

# openai/openai-python .inline-snapshot/external/c6aa7e397b7123c3501f25df3a05d4daf7e8ad6d61ffa4
# 06ab5361fe36a8d5b1.bin (test_parse_pydantic_tool; commit 3fc6b98354dfdeab6dc4b184dd4df9149712
# a325): one tool call streamed in pieces, finish_reason "tool_calls", then usage.
OPENAI_TOOL_CALL_STREAM = _openai_chunks(_TOOL_ID, [
    _TOOL_START, *[_args(p) for p in _TOOL_PIECES],
    '"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]',
    '"choices":[],"usage":{"prompt_tokens":76,"completion_tokens":24,"total_tokens":100,'
    '"completion_tokens_details":{"reasoning_tokens":0}}',
])

# Spliced: the tool call above up to the middle of its arguments ('{"city":"Edinburgh",
# "country":"'), then the ending of openai-python's 69363a555f8ea9b6eee0bb022af0afcd22d4f0e854
# 18ab38ee24d2a570a84ff0.bin (test_parse_max_tokens_reached): finish_reason "length" and the
# usage chunk. What a tool call cut at max_tokens looks like.
OPENAI_TOOL_CALL_CUT_STREAM = _openai_chunks(_TOOL_ID, [
    _TOOL_START, *[_args(p) for p in _TOOL_PIECES[:8]],
    '"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]',
    '"choices":[],"usage":{"prompt_tokens":76,"completion_tokens":13,"total_tokens":89}',
])

# openai/openai-python tests/lib/chat/test_content_filter.py (test_parse_content_filter_
# completion, commit 0015fc6848bd217c30a60d64d91ab8678dc6d9d2): content null,
# finish_reason "content_filter".
OPENAI_CONTENT_FILTER = json.dumps({
    "id": "chatcmpl-example", "object": "chat.completion", "created": 0,
    "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": None},
                 "finish_reason": "content_filter"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}})

# The same file's test_stream_content_filter_completion ("after_content"): a piece of
# content, then finish_reason "content_filter" with no usage.
OPENAI_CONTENT_FILTER_STREAM = "".join(
    f"data: {json.dumps(event)}\n\n" for event in [
        {"id": "chatcmpl-example", "object": "chat.completion.chunk", "created": 0,
         "model": "gpt-4o-2024-08-06", "choices": [choice]}
        for choice in (
            {"index": 0, "delta": {"role": "assistant", "content": '{"value": "example'},
             "finish_reason": None},
            {"index": 0, "delta": {"role": "assistant"}, "finish_reason": "content_filter"})
    ]) + "data: [DONE]\n\n"

# coder/coder aibridge/fixtures/openai/chatcompletions/stream_error.txtar (a recorded
# gpt-4.1 stream): content, then a chunk holding only an ``error`` object, which
# openai-python's _streaming.py raises as APIError ("if data.get('error')").
OPENAI_STREAM_SERVER_ERROR = "".join(f"data: {line}\n\n" for line in [
    '{"id":"chatcmpl-BwoiPTGRbKkY5rncfaM0s9KtWrq5N","object":"chat.completion.chunk",'
    '"created":1753357673,"model":"gpt-4.1-2025-04-14","service_tier":"default",'
    '"system_fingerprint":"fp_51e1070cf2","choices":[{"index":0,"delta":{"role":"assistant",'
    '"content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}',
    '{"id":"chatcmpl-BwoiPTGRbKkY5rncfaM0s9KtWrq5N","object":"chat.completion.chunk",'
    '"created":1753357673,"model":"gpt-4.1-2025-04-14","service_tier":"default",'
    '"system_fingerprint":"fp_51e1070cf2","choices":[{"index":0,"delta":{"content":"The"},'
    '"logprobs":null,"finish_reason":null}],"usage":null}',
    '{"error": {"message": "The server had an error while processing your request. Sorry '
    'about that!", "type": "server_error"}}',
])

# OpenRouter, https://openrouter.ai/docs/api/reference/streaming#handling-errors-during-
# streaming: "the error is sent as a Server-Sent Event (SSE) with a unified structure",
# finish_reason "error"; preceded here by an ordinary content chunk.
OPENROUTER_MID_STREAM_ERROR = (
    'data: {"id":"cmpl-abc123","object":"chat.completion.chunk","created":1234567890,'
    '"model":"gpt-3.5-turbo","provider":"openai","choices":[{"index":0,"delta":'
    '{"content":"Half an ans"},"finish_reason":null}]}\n\n'
    'data: {"id":"cmpl-abc123","object":"chat.completion.chunk","created":1234567890,'
    '"model":"gpt-3.5-turbo","provider":"openai","error":{"code":"server_error","message":'
    '"Provider disconnected unexpectedly"},"choices":[{"index":0,"delta":{"content":""},'
    '"finish_reason":"error"}]}\n\n')

# The OpenAI rate limit as its API sends it (the message quoted in openai-python issues and
# Groq's identical shape, https://console.groq.com/docs/rate-limits): code
# rate_limit_exceeded, a "Please try again in 20s" hint, and a link to the billing page.
OPENAI_RATE_LIMIT = json.dumps({"error": {
    "message": "Rate limit reached for gpt-4o-mini in organization org-abc on requests per min "
               "(RPM): Limit 3, Used 3, Requested 1. Please try again in 20s. Visit "
               "https://platform.openai.com/account/rate-limits to learn more. You can "
               "increase your rate limit by adding a payment method to your account at "
               "https://platform.openai.com/account/billing.",
    "type": "requests", "param": None, "code": "rate_limit_exceeded"}})

# OpenAI's error-codes guide (https://platform.openai.com/docs/guides/error-codes, "429 -
# You exceeded your current quota, please check your plan and billing details"): type and
# code insufficient_quota.
OPENAI_QUOTA = json.dumps({"error": {
    "message": "You exceeded your current quota, please check your plan and billing details. "
               "For more information on this error, read the docs: "
               "https://platform.openai.com/docs/guides/error-codes/api-errors.",
    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})

# DeepSeek, https://api-docs.deepseek.com/quick_start/error_codes: 402 Insufficient
# Balance; its chat completion's finish_reason may be "insufficient_system_resource" ("the
# request is interrupted due to insufficient resource of the inference system").
DEEPSEEK_INSUFFICIENT_BALANCE = json.dumps({"error": {
    "message": "Insufficient Balance", "type": "unknown_error", "param": None,
    "code": "invalid_request_error"}})

# OpenRouter, https://openrouter.ai/docs/api/reference/errors-and-debugging: "error.code"
# is the HTTP status (here 402, insufficient credits).
OPENROUTER_NO_CREDITS = json.dumps({"error": {
    "code": 402, "message": "Insufficient credits. Add more using https://openrouter.ai/credits"}})

# OpenRouter, same page, "Moderation Errors": a 403 whose metadata names the reasons, the
# flagged input, the provider and the model ("Your chosen model requires moderation and
# your input was flagged").
OPENROUTER_MODERATION = json.dumps({"error": {
    "code": 403, "message": "meta-llama/llama-guard requires moderation on OpenAI. Your input "
    "was flagged for \"violence/graphic\". No credits were charged.",
    "metadata": {"reasons": ["violence/graphic"], "flagged_input": "how do I...",
                 "provider_name": "OpenAI", "model_slug": "openai/gpt-4o"}}})

# --- Anthropic Messages -------------------------------------------------------------------

# anthropics/anthropic-sdk-python tests/lib/streaming/fixtures/refusal_response.txt (commit
# 2cd213f450e31229f583dc94faeb07bb82154e90): an empty text block, stop_reason "refusal"
# with stop_details.
ANTHROPIC_REFUSAL_STREAM = (
    'event: message_start\n'
    'data: {"type":"message_start","message":{"id":"msg_01RefusalTestMessage123456789",'
    '"type":"message","role":"assistant","content":[],"model":"claude-opus-4-7",'
    '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":1}}}\n\n'
    'event: content_block_start\n'
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    'event: content_block_stop\n'
    'data: {"type":"content_block_stop","index":0}\n\n'
    'event: message_delta\n'
    'data: {"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,'
    '"stop_details":{"type":"refusal","category":"cyber","explanation":"This request was '
    'refused due to policy."}},"usage":{"output_tokens":120,"output_tokens_details":'
    '{"thinking_tokens":67}}}\n\n'
    'event: message_stop\n'
    'data: {"type":"message_stop"}\n')

_ANTHROPIC_START = (
    'event: message_start\n'
    'data: {"type":"message_start","message":{"id":"msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK",'
    '"type":"message","role":"assistant","content":[],"model":"claude-3-opus-latest",'
    '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":1}}}\n\n'
    'event: content_block_start\n'
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    'event: ping\n'
    'data: {"type": "ping"}\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    '"text":"Hello"}}\n\n')

# Spliced: the beginning of anthropic-sdk-python's tests/lib/streaming/fixtures/basic_response
# .txt, then the error event of Anthropic's streaming guide, "Error events"
# (https://docs.anthropic.com/en/docs/build-with-claude/streaming#error-events): "during
# periods of high usage, you may receive an overloaded_error, which would normally correspond
# to an HTTP 529 in a non-streaming context".
ANTHROPIC_OVERLOADED_STREAM = _ANTHROPIC_START + (
    'event: error\n'
    'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n')

# anthropic-sdk-python tests/lib/streaming/fixtures/basic_response.txt (commit 3882829a23753e
# 64872d0696caf4a4c59d77e4a6), after the part above.
ANTHROPIC_BASIC_STREAM = _ANTHROPIC_START + (
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    '"text":" there"}}\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}\n\n'
    'event: content_block_stop\n'
    'data: {"type":"content_block_stop","index":0}\n\n'
    'event: message_delta\n'
    'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
    '"usage":{"output_tokens":6}}\n\n'
    'event: message_stop\n'
    'data: {"type":"message_stop"}')

# anthropic-sdk-python tests/lib/streaming/fixtures/incomplete_partial_json_response.txt
# (commit 00e0df2b6267fe3a735f03aa2da4b897f3c99bb7), its trailing spaces inside the data
# lines kept: text, then a tool_use block whose input is cut inside a string when
# stop_reason "max_tokens" ends the message.
ANTHROPIC_MAX_TOKENS_IN_TOOL_STREAM = (
    'event: message_start\n'
    'data: {"type":"message_start","message":{"id":"msg_01UdjYBBipA9omjYhicnevgq","type":'
    '"message","role":"assistant","model":"claude-3-7-sonnet-20250219","content":[],'
    '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":450,'
    '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,'
    '"service_tier":"standard"}}          }\n\n'
    'event: content_block_start\n'
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}'
    '         }\n\n'
    'event: ping\n'
    'data: {"type": "ping"}\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I"}'
    '       }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\'ll '
    'create a comprehensive tax guide for"}        }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" '
    'someone with multiple W2s an"}        }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"d '
    'save it in a file called taxes.txt. Let"} }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" me '
    'do that for you now."}           }\n\n'
    'event: content_block_stop\n'
    'data: {"type":"content_block_stop","index":0 }\n\n'
    'event: content_block_start\n'
    'data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":'
    '"toolu_01EKqbqmZrGRXy18eN7m9kvY","name":"make_file","input":{}}     }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
    '"partial_json":""}       }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
    '"partial_json":"{\\"filename\\": \\"taxes.txt"}   }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
    '"partial_json":"\\", \\"lines_of_text\\": [\\n\\"# COMPREHENSIVE TAX GUIDE FOR '
    'INDIVIDUALS WITH MULTIPLE W-2s\\",\\n\\"\\",\\n\\"## INTRODUCTION\\",\\n\\"\\","}'
    '        }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
    '"partial_json":"\\n\\"Filing taxes"}               }\n\n'
    'event: message_delta\n'
    'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},'
    '"usage":{"output_tokens":124}    }\n\n'
    'event: message_stop\n'
    'data: {"type":"message_stop" }')


def anthropic_server_tool_stream(stop_reason: str) -> str:
    """anthropic-sdk-python tests/lib/streaming/fixtures/server_tool_use_response.txt (commit
    43f2e1e33e7f6a3c862758dae301aa6c90132a08): text, then a server_tool_use block (web_search)
    run by the provider; its stop_reason end_turn replaced by ``stop_reason`` (pause_turn:
    "the response may contain a server_tool_use block without a corresponding
    server_tool_result", https://docs.anthropic.com/en/api/handling-stop-reasons#pause-turn).
    """
    return (
        'event: message_start\n'
        'data: {"type":"message_start","message":{"id":"msg_01ServerToolUseInputJson","type":'
        '"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[],'
        '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":42,'
        '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,'
        '"service_tier":"standard"}}}\n\n'
        'event: content_block_start\n'
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"text",'
        '"text":""}}\n\n'
        'event: content_block_delta\n'
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":'
        '"Let me search for that."}}\n\n'
        'event: content_block_stop\n'
        'data: {"type":"content_block_stop","index":0}\n\n'
        'event: content_block_start\n'
        'data: {"type":"content_block_start","index":1,"content_block":{"type":'
        '"server_tool_use","id":"srvtoolu_01WebSearch","name":"web_search","input":{}}}\n\n'
        'event: content_block_delta\n'
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
        '"partial_json":""}}\n\n'
        'event: content_block_delta\n'
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
        '"partial_json":"{\\"query\\": "}}\n\n'
        'event: content_block_delta\n'
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
        '"partial_json":"\\"weather "}}\n\n'
        'event: content_block_delta\n'
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
        '"partial_json":"in Paris\\"}"}}\n\n'
        'event: content_block_stop\n'
        'data: {"type":"content_block_stop","index":1}\n\n'
        'event: message_delta\n'
        f'data: {{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}",'
        '"stop_sequence":null},"usage":{"output_tokens":40}}\n\n'
        'event: message_stop\n'
        'data: {"type":"message_stop"}\n')


# Anthropic's error shapes, https://docs.anthropic.com/en/api/errors ("Errors are always
# returned as JSON, with a top-level error object that always includes a type and message").
def anthropic_error(kind: str, message: str) -> str:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}})


# Anthropic's answer for an account with no credit (a 400 invalid_request_error, as recorded
# in several projects' tests, e.g. "Your credit balance is too low to access the Anthropic
# API. Please go to Plans & Billing to upgrade or purchase credits.").
ANTHROPIC_NO_CREDIT = json.dumps({"type": "error", "error": {
    "type": "invalid_request_error",
    "message": "Your credit balance is too low to access the Anthropic API. Please go to "
               "Plans & Billing to upgrade or purchase credits."},
    "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})

# --- Ollama /api/chat -----------------------------------------------------------------------

# Ollama, https://docs.ollama.com/api/errors, "Errors that occur while streaming": "the error
# will be returned as an object in the application/x-ndjson format with an error property.
# Since the response has already started, the status code of the response will not be
# changed." The error line is the page's; the line before it is /api/chat's streamed shape
# (https://docs.ollama.com/api/chat) in place of the page's /api/generate one.
OLLAMA_STREAM_ERROR = (
    '{"model":"gemma3","created_at":"2025-10-26T17:21:21.196249Z","message":'
    '{"role":"assistant","content":" Yes"},"done":false}\n'
    '{"error":"an error was encountered while running the model"}\n')

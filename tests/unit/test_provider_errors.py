"""How a provider's error is read: structured fields first, then hints; the same over HTTP
and inside a 200 stream. Bodies from tests/provider_fixtures.py (each quotes its source)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.errors import (
    ContextLengthError,
    ModelAuthError,
    ModelError,
    ModelHTTPError,
    ModelQuotaError,
    ModelRateLimitError,
)
from agent_core.models._provider_errors import classify, read_error
from tests import provider_fixtures as fx


def error_of(body: Any, status: int = 0, headers: dict[str, str] | None = None) -> ModelError:
    text = body if isinstance(body, str) else json.dumps(body)
    return classify(read_error(body, status=status, headers=headers), provider="p",
                    url="http://model/v1", body=text)


@pytest.mark.parametrize(("status", "body", "kind", "retryable"), [
    # OpenAI's rate limit links to the billing page: still a rate limit, retried
    (429, fx.OPENAI_RATE_LIMIT, ModelRateLimitError, True),
    # ... and so without its code, read from the status and the words
    (429, json.dumps({"error": {**json.loads(fx.OPENAI_RATE_LIMIT)["error"], "code": None}}),
     ModelRateLimitError, True),
    (429, fx.OPENAI_QUOTA, ModelQuotaError, False),
    (402, fx.DEEPSEEK_INSUFFICIENT_BALANCE, ModelQuotaError, False),
    (402, fx.OPENROUTER_NO_CREDITS, ModelQuotaError, False),
    (400, fx.ANTHROPIC_NO_CREDIT, ModelQuotaError, False),
    (429, fx.anthropic_error("rate_limit_error", "Number of request tokens has exceeded "
                             "your per-minute rate limit"), ModelRateLimitError, True),
    (529, fx.anthropic_error("overloaded_error", "Overloaded"), ModelHTTPError, True),
    (500, fx.anthropic_error("api_error", "Internal server error"), ModelHTTPError, True),
    (503, "Server Overloaded", ModelHTTPError, True),  # DeepSeek's 503, a plain body
    (400, fx.anthropic_error("invalid_request_error", "messages: roles must alternate"),
     ModelHTTPError, False),
    (401, fx.anthropic_error("authentication_error", "invalid x-api-key"), ModelAuthError,
     False),
    (400, {"error": {"message": "This model's maximum context length is 8192 tokens",
                     "code": "context_length_exceeded"}}, ContextLengthError, False),
    (404, {"error": "model 'llama9' not found"}, ModelHTTPError, False),  # Ollama
])
def test_an_http_error_is_read_from_its_fields_first(status: int, body: Any,
                                                     kind: type[ModelError],
                                                     retryable: bool) -> None:
    error = error_of(body, status)
    assert type(error) is kind
    assert getattr(error, "retryable", False) is retryable


@pytest.mark.parametrize(("payload", "kind", "status", "retryable"), [
    # Anthropic's error event: overloaded_error is what a 529 is over HTTP
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
     ModelHTTPError, 529, True),
    ({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
     ModelRateLimitError, 429, True),
    ({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
     ModelHTTPError, 400, False),
    # OpenAI: a chunk holding only an error object
    ({"error": {"message": "The server had an error while processing your request. Sorry "
                "about that!", "type": "server_error"}}, ModelHTTPError, 500, True),
    # OpenRouter: the code is a string here, a status number elsewhere
    ({"error": {"code": "server_error", "message": "Provider disconnected unexpectedly"}},
     ModelHTTPError, 500, True),
    ({"error": {"code": 502, "message": "Provider returned error"}}, ModelHTTPError, 502, True),
    ({"error": {"code": 402, "message": "Insufficient credits"}}, ModelQuotaError, 402, False),
    ({"error": {"message": "quota", "type": "insufficient_quota"}}, ModelQuotaError, 429, False),
    # Ollama: {"error": "..."}, nothing structured: a failure on the server's side
    ({"error": "an error was encountered while running the model"}, ModelHTTPError, 500,
     True),
])
def test_an_error_inside_a_stream_is_read_like_the_same_error_over_http(
        payload: dict[str, Any], kind: type[ModelError], status: int, retryable: bool) -> None:
    error = error_of(payload)
    assert type(error) is kind
    assert isinstance(error, ModelHTTPError)
    assert (error.status_code, error.retryable, error.in_stream) == (status, retryable, True)
    message = payload["error"] if isinstance(payload["error"], str) else \
        payload["error"]["message"]
    assert message in str(error), "the provider's message is kept"


@pytest.mark.parametrize(("message", "seconds"), [
    ("Rate limit reached ... Please try again in 20s. Visit ...", 20.0),
    ("Please try again in 7m12s.", 432.0),
    ("Please try again in 220ms. Visit", 0.22),
    ("Please try again in 13.940333333s. Visit", 13.940333333),
    ("Please try again in 1m32.2828s.", 92.2828),
    ("Please try again in 2h3m4s.", 7384.0),
    ("Resource exhausted. Please retry in 13.95s.", 13.95),
    ("Too many requests, retry after 30 seconds", 30.0),
    ("slow down", None),
])
def test_a_wait_hinted_in_the_message_is_read(message: str, seconds: float | None) -> None:
    facts = read_error({"error": {"message": message}}, status=429)
    if seconds is None:
        assert facts.retry_after is None
    else:
        assert facts.retry_after == pytest.approx(seconds)


def test_headers_come_before_the_message_hint_and_a_retry_delay_detail() -> None:
    body = {"error": {"message": "Please try again in 20s."}}
    assert read_error(body, status=429, headers={"retry-after": "3"}).retry_after == 3.0
    assert read_error(body, status=429, headers={"retry-after-ms": "250"}).retry_after == 0.25
    # Gemini's OpenAI-compatible endpoint: a list, with a google.rpc.RetryInfo detail
    gemini = [{"error": {"code": 429, "message": "Resource has been exhausted. Please retry "
                         "in 50s.", "status": "RESOURCE_EXHAUSTED",
                         "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                      "retryDelay": "13s"}]}}]
    facts = read_error(gemini, status=429)
    assert facts.retry_after == 13.0
    assert isinstance(error_of(gemini, 429), ModelRateLimitError)

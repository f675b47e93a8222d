"""What a provider's error means: one reading for an HTTP error answer and for an error
inside a 200 stream (or a 200 body), so both are classified alike.

Structured fields first, then hints:

1. the HTTP status (inside a stream: the status the error's ``type`` or ``code`` stands
   for, e.g. Anthropic's ``overloaded_error`` is 529, OpenRouter's numeric ``code`` is one);
2. ``error.type`` / ``error.code`` (OpenAI, Groq, DeepSeek and OpenRouter nest them under
   ``error``; Mistral puts them at the top; Gemini's compatible endpoint wraps the body in a
   list): ``insufficient_quota`` / ``billing_error`` are quota, ``rate_limit_exceeded`` /
   ``rate_limit_error`` are rate limits, ``context_length_exceeded`` is a context error;
3. then hints: Retry-After / retry-after-ms, a ``retryDelay`` detail, "try again in 20s" in
   the message; and words, only when the fields decide nothing ("exceeded your current
   quota", "credit balance is too low"). A rate limit whose text mentions billing (OpenAI's
   429 links to the billing page) stays a rate limit.

A moderation layer's refusal (OpenRouter's 403 with ``metadata.reasons``) is read before
the status: a 403 there is not the key's fault.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from ..errors import (
    ContextLengthError,
    ModelAuthError,
    ModelError,
    ModelHTTPError,
    ModelModeratedError,
    ModelQuotaError,
    ModelRateLimitError,
)
from ..redaction import redact

#: error.type / error.code values and the status they stand for (a stream has no status).
_STATUS_OF: dict[str, int] = {
    # Anthropic (docs: /en/api/errors)
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504,
    "overloaded_error": 529,
    # OpenAI and the servers that copy its codes (Groq, DeepSeek, OpenRouter's strings)
    "invalid_api_key": 401, "model_not_found": 404, "insufficient_quota": 429,
    "rate_limit_exceeded": 429, "context_length_exceeded": 400, "server_error": 500,
    "internal_error": 500, "internal_server_error": 500, "service_unavailable": 503,
}
_QUOTA_CODES = frozenset({
    "insufficient_quota", "billing_error", "billing_hard_limit_reached", "insufficient_balance",
    "payment_required", "arrearage", "credits_exhausted"})
_RATE_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error", "rate_limited",
                         "throttling", "throttling.ratequota", "too_many_requests"})
_AUTH_CODES = frozenset({"authentication_error", "permission_error", "invalid_api_key"})
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
#: A moderation layer's refusal (OpenRouter's types; its 403 says so in ``metadata``).
_MODERATION_CODES = frozenset({"content_policy_violation", "moderation", "flagged"})

_CONTEXT_WORDS = re.compile(
    r"context[_ ]length|maximum context|context window|prompt is too long|too many tokens|"
    r"reduce the length|input length|exceeds the (?:model's )?(?:max|context)", re.IGNORECASE)
#: Quota in words, for a body whose fields decide nothing (Anthropic answers an empty
#: balance with a 400 invalid_request_error). "billing" alone is not one: OpenAI's rate
#: limit message ends with a link to the billing page.
_QUOTA_WORDS = re.compile(
    r"insufficient_quota|exceeded your current quota|credit balance is too low|"
    r"out of credits?|insufficient (?:balance|credits?|funds)|run out of balance|"
    r"quota (?:exceeded|exhausted)|billing hard limit", re.IGNORECASE)
#: "Please try again in 7m12s" (OpenAI, Groq), "in 220ms", "Please retry in 13.9s"
#: (Gemini), "retry after 20 seconds".
_HINT = re.compile(
    r"(?:try again|retry)(?: after| in)\s+(?P<when>[\d.]+\s*(?:seconds?|secs?|milliseconds?|"
    r"minutes?)\b|(?:\d+h)?(?:\d+m(?!s))?(?:[\d.]+(?:ms|s))?)", re.IGNORECASE)
_PART = re.compile(r"([\d.]+)\s*(ms|milliseconds?|h|m(?!s)|minutes?|s|seconds?|secs?)",
                   re.IGNORECASE)
_UNIT = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "h": 3600.0, "m": 60.0,
         "minute": 60.0, "minutes": 60.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0,
         "seconds": 1.0}


@dataclass(frozen=True, slots=True)
class ErrorFacts:
    """What an error answer says, read from its fields."""

    #: The HTTP status; inside a 200 stream the one its type or code stands for (0: none).
    status: int
    type: str
    code: str
    message: str
    #: Seconds to wait: Retry-After / retry-after-ms, a retryDelay detail, or a hint in
    #: the message (in that order); None when nothing says.
    retry_after: float | None
    in_stream: bool
    #: A moderation layer declined the input (its reasons, possibly empty), else None.
    moderated: tuple[str, ...] | None = None


def read_error(body: Any, *, status: int = 0, headers: Mapping[str, str] | None = None
               ) -> ErrorFacts:
    """The facts of an error body (a JSON text, a decoded value, or any other text)."""
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError:
            body = {"message": body if isinstance(body, str) else body.decode("utf-8",
                                                                               "replace")}
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]  # Gemini's compatible endpoint: [{"error": {...}}]
    err: Any = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, str):
        err = {"message": err}  # Ollama: {"error": "model not found"}
    if not isinstance(err, dict):
        err = {}
    kind = _text(err.get("type")) or _text(err.get("status"))
    code_value = err.get("code")
    code = "" if isinstance(code_value, bool) else _text(code_value)
    message = str(err.get("message") or (body.get("message") if isinstance(body, dict) and
                                         body is not err else "") or "")
    in_stream = status < 400
    if in_stream:
        status = _status_of(kind, code)
    retry_after = _header_delay(headers or {})
    if retry_after is None:
        retry_after = _detail_delay(err.get("details")) or _hint(message)
    return ErrorFacts(status, kind, code, message, retry_after, in_stream,
                      _moderation(err, kind, code))


def _moderation(err: dict[str, Any], kind: str, code: str) -> tuple[str, ...] | None:
    """The reasons a moderation layer gave for declining the input (OpenRouter: a 403 whose
    ``metadata`` has ``reasons`` and ``flagged_input``; a ``content_policy_violation`` /
    ``moderation`` type), or None when the error is not a moderation block."""
    meta = err.get("metadata")
    flagged = isinstance(meta, dict) and ("reasons" in meta or "flagged_input" in meta)
    if not flagged and not {kind, code} & _MODERATION_CODES:
        return None
    reasons = meta.get("reasons") if isinstance(meta, dict) else None
    return tuple(str(r)[:80] for r in reasons[:10]) if isinstance(reasons, list) else ()


def classify(facts: ErrorFacts, *, provider: str, url: str, body: str,
             key_setting: str = "LLM_API_KEY") -> ModelError:
    """The ModelError an error stands for (its ``retryable`` says whether to send again)."""
    status, names = facts.status, {facts.type, facts.code}
    shown = redact(body[:2000])
    where = " inside the stream" if facts.in_stream else f" (HTTP {status})"
    common: dict[str, Any] = {"url": url, "retry_after": facts.retry_after,
                              "in_stream": facts.in_stream}
    said = f": {redact(facts.message[:300])}" if facts.message else ""
    if names & _QUOTA_CODES or status == 402:
        return ModelQuotaError(status or 402, shown, message=(
            f"{provider!r} reports the account is out of credit or quota{where}{said}"),
            **common)
    if names & _RATE_CODES:
        return ModelRateLimitError(status or 429, shown, message=(
            f"{provider!r} rate limit{where}{said}"), **common)
    if facts.moderated is not None:
        why = f" ({', '.join(facts.moderated)})" if facts.moderated else ""
        return ModelModeratedError(status or 403, shown, message=(
            f"{provider!r}'s moderation declined the request{why}{where}"), **common)
    if names & _AUTH_CODES or status in (401, 403):
        return ModelAuthError(provider, status or 401, key_setting=key_setting)
    if names & _CONTEXT_CODES or (status in (400, 413, 422)
                                  and _CONTEXT_WORDS.search(facts.message or body)):
        return ContextLengthError(f"{provider!r}: the prompt is longer than the model's "
                                  f"context window: {shown[:200]}")
    if status in (400, 429) and _QUOTA_WORDS.search(facts.message or body):
        return ModelQuotaError(status, shown, message=(
            f"{provider!r} reports the account is out of credit or quota{where}{said}"),
            **common)
    if status == 429:
        return ModelRateLimitError(status, shown, message=f"{provider!r} rate limit{where}"
                                   f"{said}", **common)
    if status == 404:
        return ModelHTTPError(status, shown, message=(
            f"{url!r} answered 404: check LLM_BASE_URL and LLM_MODEL_NAME ({shown[:200]})"),
            **common)
    if facts.in_stream:
        return ModelHTTPError(status, shown, message=(
            f"{provider!r} sent an error{where} ({facts.type or facts.code or 'error'}, "
            f"as HTTP {status}){said}"), **common)
    return ModelHTTPError(status, shown, **common)


def _status_of(kind: str, code: str) -> int:
    """The status an error in a stream stands for: a numeric code (OpenRouter), its type or
    code, else 500 (a failure on the provider's side, which a new call may not meet)."""
    if code.isdigit() and 400 <= int(code) <= 599:
        return int(code)
    return _STATUS_OF.get(kind) or _STATUS_OF.get(code) or 500


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip().lower()


def _header_delay(headers: Mapping[str, str]) -> float | None:
    """Seconds from retry-after-ms or Retry-After (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def _detail_delay(details: Any) -> float | None:
    """A google.rpc.RetryInfo detail's retryDelay ("13s"), as Gemini sends it."""
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and isinstance(detail.get("retryDelay"), str):
            return _duration(detail["retryDelay"])
    return None


def _hint(message: str) -> float | None:
    found = _HINT.search(message)
    return _duration(found.group("when")) if found else None


def _duration(text: str) -> float | None:
    """Seconds in "7m32.5s", "850ms", "2h3m4s", "20 seconds" (None: not a duration)."""
    parts = _PART.findall(text)
    if not parts:
        return None
    try:
        return sum(float(number) * _UNIT[unit.lower()] for number, unit in parts)
    except (KeyError, ValueError):
        return None

"""HTTP for model adapters: one place that maps transport and status errors to ModelErrors
and decides what is retried.

- 401/403: fail fast (ModelAuthError: check the key setting)
- connection refused, DNS, TLS: fail fast (ModelUnreachableError with the URL)
- 429: exponential backoff with jitter, honouring Retry-After; quota exhaustion is not retried
- 5xx, 529, timeouts and connections dropped mid-answer: limited retries with backoff
- a context-length complaint: ContextLengthError, so the caller can shrink and retry once

With ``max_concurrency`` (LLM_MAX_CONCURRENCY) at most that many calls are in flight at
once; the others wait their turn before sending, and the wait is not part of the call's
timeout. A call holds its turn until its answer is read (a stream: until it ends or is
closed), and gives it back before it waits to retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

from .. import _json
from ..errors import (
    ContextLengthError,
    ModelAuthError,
    ModelError,
    ModelHTTPError,
    ModelQuotaError,
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnreachableError,
)
from ..redaction import redact
from . import _transport
from ._transport import Failure, Pool
from .base import ModelAdapter, ModelRequest

log = logging.getLogger(__name__)

_CONTEXT_LENGTH = re.compile(
    r"context[_ ]length|maximum context|context window|prompt is too long|too many tokens|"
    r"reduce the length|input length|exceeds the (?:model's )?(?:max|context)", re.IGNORECASE)
_QUOTA = re.compile(r"insufficient_quota|quota|credit balance|billing|out of credit",
                    re.IGNORECASE)
_MAX_BACKOFF = 30.0
_MAX_RETRY_AFTER = 120.0

Sleep = Callable[[float], Awaitable[None]]


class ModelHTTP:
    """aiohttp's pool (see ``_transport``) with the retry and error rules every adapter
    shares."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        max_retries: int,
        key_setting: str = "LLM_API_KEY",
        backoff_base: float = 0.5,
        sleep: Sleep = asyncio.sleep,
        max_connections: int = 200,
        max_concurrency: int = 0,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.key_setting = key_setting
        self.backoff_base = backoff_base
        self._sleep = sleep
        self._connect_timeout = min(timeout, 10.0)
        self._pool = Pool(headers=headers, max_connections=max_connections)
        self.max_concurrency = max_concurrency
        self._turns = Turns(max_concurrency) if max_concurrency > 0 else None

    @property
    def waiting(self) -> int:
        """Calls waiting for their turn (LLM_MAX_CONCURRENCY) now."""
        return self._turns.waiting if self._turns is not None else 0

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._pool.aclose()

    async def post_json(self, path: str, body: dict[str, Any], request: ModelRequest
                        ) -> dict[str, Any]:
        """POST and return the decoded JSON body, retrying per the rules above."""
        async with self._retrying(path, body, request, stream=False) as (_, raw):
            try:
                data = _json.loads(raw)
            except ValueError as exc:
                raise ModelResponseError(
                    f"{self.provider!r} returned a body that is not JSON: "
                    f"{raw[:200].decode('utf-8', 'replace')!r}") from exc
        if not isinstance(data, dict):
            raise ModelResponseError(f"{self.provider!r} returned JSON that is not an object")
        return data

    async def stream_lines(self, path: str, body: dict[str, Any], request: ModelRequest
                           ) -> AsyncIterator[str]:
        """POST and yield the response's lines as they arrive (SSE or NDJSON)."""
        async with self._retrying(path, body, request, stream=True) as (response, _):
            try:
                async for line in _transport.lines(response):
                    yield line
            except Failure as exc:
                if exc.kind == "timeout":
                    raise ModelTimeoutError(self._url(path), self.timeout) from exc
                raise ModelUnreachableError(self._url(path),
                                            f"stream broke: {_reason(exc)}") from exc

    @asynccontextmanager
    async def _retrying(self, path: str, body: dict[str, Any], request: ModelRequest, *,
                        stream: bool) -> AsyncIterator[tuple[aiohttp.ClientResponse, bytes]]:
        """The response with status < 400, and its whole body unless ``stream``."""
        url = self._url(path)
        data = _json.dumps(body)
        attempt = 0
        while True:
            attempt += 1
            failure: Failure | None = None
            async with self._turns or contextlib.nullcontext():
                try:
                    response = await self._pool.post(url, data, connect=self._connect_timeout,
                                                     read=self.timeout)
                    raw = b"" if stream and response.status < 400 else \
                        await _transport.read_body(response)
                except Failure as exc:
                    failure = exc
                else:
                    if response.status < 400:
                        try:
                            yield response, raw
                        finally:
                            response.release()
                        return
            if failure is not None:
                if failure.kind == "unreachable":
                    raise ModelUnreachableError(url, _reason(failure)) from failure
                if attempt > self.max_retries:
                    if failure.kind == "timeout":
                        raise ModelTimeoutError(url, self.timeout) from failure
                    raise ModelUnreachableError(url, _reason(failure)) from failure
                why = "timeout" if failure.kind == "timeout" else \
                    type(failure.__cause__).__name__
                await self._backoff(attempt, None, why, request)
                continue

            error = self._classify(response, raw.decode("utf-8", "replace"), path)
            retryable = isinstance(error, ModelRateLimitError) or (
                type(error) is ModelHTTPError and error.status_code >= 500)
            if not retryable or attempt > self.max_retries:
                raise error
            assert isinstance(error, ModelHTTPError)
            await self._backoff(attempt, error.retry_after, f"HTTP {error.status_code}", request)

    def _classify(self, response: aiohttp.ClientResponse, text: str, path: str
                  ) -> ModelError:
        status = response.status
        url = self._url(path)
        retry_after = _retry_after(response.headers)
        body = redact(text[:2000])
        if status in (401, 403):
            return ModelAuthError(self.provider, status, key_setting=self.key_setting)
        if status == 402 or (status in (400, 429) and _QUOTA.search(text)
                             and "rate" not in _error_code(text)):
            return ModelQuotaError(status, body, url=url, message=(
                f"{self.provider!r} reports the account is out of credit or quota "
                f"(HTTP {status})"))
        if status == 429:
            return ModelRateLimitError(status, body, url=url, retry_after=retry_after,
                                       message=f"{self.provider!r} rate limit (HTTP 429)")
        if status in (400, 413, 422) and _CONTEXT_LENGTH.search(text):
            return ContextLengthError(f"{self.provider!r}: the prompt is longer than the "
                                      f"model's context window: {body[:200]}")
        if status == 404:
            return ModelHTTPError(status, body, url=url, message=(
                f"{url!r} answered 404: check LLM_BASE_URL and LLM_MODEL_NAME ({body[:200]})"))
        return ModelHTTPError(status, body, url=url, retry_after=retry_after)

    async def _backoff(self, attempt: int, retry_after: float | None, why: str,
                       request: ModelRequest) -> None:
        if retry_after is not None:
            delay = min(retry_after, _MAX_RETRY_AFTER)
        else:
            delay = min(_MAX_BACKOFF, self.backoff_base * 2 ** (attempt - 1))
            delay *= random.uniform(0.5, 1.5)  # jitter spreads replicas' retries apart
        log.info("model %s: %s, retry %d/%d in %.2fs", self.provider, why, attempt,
                 self.max_retries, delay)
        request.emit("MODEL_RETRY", {"provider": self.provider, "reason": why,
                                     "attempt": attempt, "delay": round(delay, 3)})
        await self._sleep(delay)

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"


class HTTPModel(ModelAdapter):
    """An adapter that reaches its model through one ModelHTTP (its connections, retries
    and turns)."""

    #: What ``name`` starts with (None: the ModelHTTP's provider).
    name_prefix: str | None = None

    def __init__(self, http: ModelHTTP, model_name: str, *, native_tools: bool = True) -> None:
        self.http = http
        self.model_name = model_name
        self.native_tools = native_tools
        self.name = f"{self.name_prefix or http.provider}:{model_name}"

    async def aclose(self) -> None:
        await self.http.aclose()

    @property
    def calls_waiting(self) -> int:
        return self.http.waiting


class Turns:
    """At most ``limit`` holders at once; the others wait, first come first served."""

    def __init__(self, limit: int) -> None:
        self._free = asyncio.Semaphore(limit)
        self.waiting = 0

    async def __aenter__(self) -> None:
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1

    async def __aexit__(self, *_: object) -> None:
        self._free.release()


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return redact(text)


def _error_code(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return ""
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return str(err.get("code") or err.get("type") or "").lower()
    return ""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from Retry-After (seconds or HTTP date) or retry-after-ms, when present."""
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
    import datetime as dt

    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a server-sent-events stream."""

    async def gen() -> AsyncIterator[tuple[str, str]]:
        event, data = "message", list[str]()
        async for raw in lines:
            line = raw.rstrip("\r")
            if not line:
                if data:
                    yield event, "\n".join(data)
                event, data = "message", []
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
        if data:
            yield event, "\n".join(data)

    return gen()

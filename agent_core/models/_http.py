"""HTTP for model adapters: one place that maps transport and status errors to ModelErrors
and decides what is retried.

- 401/403: fail fast (ModelAuthError: check the key setting)
- connection refused, DNS, TLS: fail fast (ModelUnreachableError with the URL)
- a rate limit: exponential backoff with jitter, honouring Retry-After or the message's
  "try again in 20s"; a quota error (insufficient_quota, billing_error, 402) is not retried
- 5xx, 529, timeouts and connections dropped mid-answer: limited retries with backoff
- a context-length complaint: ContextLengthError, so the caller can shrink and retry once

An error inside a 200 answer (a stream chunk with an ``error`` object, an SSE ``event:
error``, Anthropic's ``error`` event, a 200 body holding ``error``) is read by the same rules
(``_provider_errors``) and retried or raised the same way: never an empty reply. Retries
over HTTP and inside streams share one budget per call (LLM_MAX_RETRIES).

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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp

from .. import _json
from ..errors import (
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnreachableError,
)
from ..redaction import redact
from . import _transport
from ._provider_errors import classify, read_error
from ._transport import Failure, Pool
from .base import ModelAdapter, ModelRequest

log = logging.getLogger(__name__)

_MAX_BACKOFF = 30.0
_MAX_RETRY_AFTER = 120.0

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


class InStreamError(Exception):
    """An error an adapter read inside a 200 answer (its ``payload``: the chunk or event
    that holds it); ``ModelHTTP.stream`` classifies it like the same error over HTTP."""

    def __init__(self, payload: Any) -> None:
        super().__init__("error inside the answer")
        self.payload = payload


class _Tries:
    """The requests one call has sent (HTTP retries and in-stream retries alike)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


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
        """POST and return the decoded JSON body, retrying per the rules above (a 200 body
        that holds an ``error`` is that error)."""
        return await self.post(path, body, request, _same)

    async def post(self, path: str, body: dict[str, Any], request: ModelRequest,
                   read: Callable[[dict[str, Any]], T]) -> T:
        """POST and ``read`` the decoded JSON body. A 200 body holding ``error``, or one
        ``read`` raises InStreamError for (a finish reason that is an error), is classified
        like the same error over HTTP and retried or raised."""
        tries = _Tries()
        while True:
            async with self._retrying(path, body, request, stream=False, tries=tries) \
                    as (_, raw):
                try:
                    data = _json.loads(raw)
                except ValueError as exc:
                    raise ModelResponseError(
                        f"{self.provider!r} returned a body that is not JSON: "
                        f"{raw[:200].decode('utf-8', 'replace')!r}") from exc
            if not isinstance(data, dict):
                raise ModelResponseError(f"{self.provider!r} returned JSON that is not an "
                                         "object")
            if data.get("error"):
                error = self.in_stream(data, path)
            else:
                try:
                    return read(data)
                except InStreamError as exc:
                    error = self.in_stream(exc.payload, path)
            await self._again(error, tries, request)

    async def stream(self, path: str, body: dict[str, Any], request: ModelRequest,
                     read: Callable[[AsyncIterator[str]], Awaitable[T]]) -> T:
        """POST and ``read`` the answer's lines (SSE or NDJSON) as they arrive. ``read``
        raises InStreamError for an error inside the answer: it is classified and, when
        retryable, the call is sent again (``read`` starts over; MODEL_RETRY says so)."""
        tries = _Tries()
        while True:
            lines = self.stream_lines(path, body, request, tries=tries)
            try:
                return await read(lines)
            except InStreamError as exc:
                error = self.in_stream(exc.payload, path)
            finally:
                await lines.aclose()  # gives the connection and the turn back now
            await self._again(error, tries, request)

    async def stream_lines(self, path: str, body: dict[str, Any], request: ModelRequest, *,
                           tries: _Tries | None = None) -> AsyncGenerator[str, None]:
        """POST and yield the response's lines as they arrive (SSE or NDJSON)."""
        async with self._retrying(path, body, request, stream=True,
                                  tries=tries or _Tries()) as (response, _):
            try:
                async for line in _transport.lines(response):
                    yield line
            except Failure as exc:
                if exc.kind == "timeout":
                    raise ModelTimeoutError(self._url(path), self.timeout) from exc
                raise ModelUnreachableError(self._url(path),
                                            f"stream broke: {_reason(exc)}") from exc

    def in_stream(self, payload: Any, path: str) -> ModelError:
        """The ModelError an error inside a 200 answer stands for."""
        text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
        return classify(read_error(payload), provider=self.provider, url=self._url(path),
                        body=text, key_setting=self.key_setting)

    async def _again(self, error: ModelError, tries: _Tries, request: ModelRequest) -> None:
        """Wait before sending again, or raise ``error`` when it is final."""
        if not isinstance(error, ModelHTTPError) or not error.retryable \
                or tries.n > self.max_retries:
            raise error
        why = f"HTTP {error.status_code}" if not error.in_stream else \
            f"an error in the answer (as HTTP {error.status_code})"
        await self._backoff(tries.n, error.retry_after, why, request)

    @asynccontextmanager
    async def _retrying(self, path: str, body: dict[str, Any], request: ModelRequest, *,
                        stream: bool, tries: _Tries
                        ) -> AsyncIterator[tuple[aiohttp.ClientResponse, bytes]]:
        """The response with status < 400, and its whole body unless ``stream``."""
        url = self._url(path)
        data = _json.dumps(body)
        while True:
            tries.n += 1
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
                if tries.n > self.max_retries:
                    if failure.kind == "timeout":
                        raise ModelTimeoutError(url, self.timeout) from failure
                    raise ModelUnreachableError(url, _reason(failure)) from failure
                why = "timeout" if failure.kind == "timeout" else \
                    type(failure.__cause__).__name__
                await self._backoff(tries.n, None, why, request)
                continue
            text = raw.decode("utf-8", "replace")
            error = classify(read_error(text, status=response.status,
                                        headers=response.headers),
                             provider=self.provider, url=url, body=text,
                             key_setting=self.key_setting)
            await self._again(error, tries, request)

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


def _same(data: dict[str, Any]) -> dict[str, Any]:
    return data


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return redact(text)


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

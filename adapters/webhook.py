"""Signed webhooks: ``POST /webhook/{source}`` in, answers POSTed to a callback URL.

Requests and callbacks are signed the same way: ``X-Hermes-Timestamp`` (unix seconds) and
``X-Hermes-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>">`` with the
source's secret. Requests older or newer than five minutes are refused (replays).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_core import AddressRefused, GuardedResolver, ResolutionRefused, check_url

from .base import Channel, InboundMessage, Ingest, OutboundMessage
from .errors import DeliveryError

log = logging.getLogger(__name__)

TIMESTAMP_HEADER = "X-Hermes-Timestamp"
SIGNATURE_HEADER = "X-Hermes-Signature"
REPLAY_WINDOW = 300
MAX_BODY = 256 * 1024


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value for a body sent at ``timestamp``."""
    return "sha256=" + hmac.digest(secret.encode(), timestamp.encode() + b"." + body,
                                   "sha256").hex()


def signed_headers(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """Headers that sign ``body`` now."""
    ts = str(int(now if now is not None else time.time()))
    return {TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(secret, ts, body),
            "Content-Type": "application/json"}


class WebhookRequest(BaseModel):
    """The JSON body of a webhook call."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str = Field(min_length=1, max_length=150,
                                 pattern=r"^[A-Za-z0-9][A-Za-z0-9:._@+=/-]*$")
    user_id: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=20_000)
    user_name: str = Field("", max_length=200)
    callback_url: str | None = Field(None, max_length=2000)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)

    @field_validator("callback_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL")
        return value


class WebhookChannel(Channel):
    """Webhook sources with their secrets; POSTs answers to callback URLs."""

    name = "webhook"

    def __init__(self, secrets: dict[str, str], *, ingest: Ingest,
                 callback_hosts: list[str] | None = None, timeout: float = 10.0) -> None:
        self.secrets = secrets
        self.ingest = ingest
        self.callback_hosts = set(callback_hosts or ())
        self.timeout = timeout
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # Every name a callback resolves to is checked as it resolves (a public name that
        # later points inside, DNS rebinding); addresses written as literals by _check.
        resolver = GuardedResolver(internal_ok=self.callback_hosts)
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            connector=aiohttp.TCPConnector(limit=200, limit_per_host=50, resolver=resolver))

    def _check(self, url: str) -> None:
        """AddressRefused unless ``url`` is a callback this deployment may call: a host of
        HERMES_WEBHOOK_CALLBACK_HOSTS when that is set (inside the network too), else any
        public host (the SSRF guard: no loopback, private or metadata addresses)."""
        check_url(url, allow_hosts=self.callback_hosts, internal_ok=self.callback_hosts)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()

    # --- inbound -------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.Response:
        """The ``POST /webhook/{source}`` handler."""
        source = request.match_info["source"]
        secret = self.secrets.get(source)
        if secret is None:
            return _error(404, f"unknown webhook source {source!r}")
        if request.content_length is not None and request.content_length > MAX_BODY:
            return _error(413, f"body larger than {MAX_BODY} bytes")
        body = await request.content.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            return _error(413, f"body larger than {MAX_BODY} bytes")
        problem = verify(secret, request.headers, body)
        if problem is not None:
            return _error(401, problem)
        try:
            payload = WebhookRequest.model_validate_json(body)
        except ValidationError as exc:
            return _error(400, _describe(exc))
        if payload.callback_url:
            try:
                self._check(payload.callback_url)
            except AddressRefused as exc:
                return _error(400, f"callback_url refused: {exc}")
        msg = to_inbound(source, payload, request.headers[SIGNATURE_HEADER])
        routed = await self.ingest(msg)
        status = 200 if routed.status == "duplicate" else 202
        return web.json_response({"status": routed.status, "task_id": routed.task_id,
                                  "conversation_id": msg.conversation_id}, status=status)

    # --- outbound ------------------------------------------------------------------------
    async def send(self, message: OutboundMessage) -> dict[str, Any] | None:
        url = message.reply_target.get("callback_url")
        source = str(message.reply_target.get("source", ""))
        if not url:
            return None  # the caller reads the answer from the task API
        secret = self.secrets.get(source)
        if secret is None:
            raise DeliveryError(f"webhook source {source!r} is no longer configured",
                                retryable=False)
        body = json.dumps({
            "task_id": message.task_id, "conversation_id": message.conversation_id,
            "kind": message.kind, "text": message.text, "choices": message.choices,
            "approval": message.approval,
        }, ensure_ascii=False).encode()
        headers = {**signed_headers(secret, body),
                   "Idempotency-Key": f"{message.task_id}:{message.kind}"}
        assert self._http is not None, "start() the channel first"
        try:
            self._check(url)
            async with self._http.post(url, data=body, headers=headers,
                                       allow_redirects=False) as response:
                status = response.status
                retry_after = _seconds(response.headers.get("Retry-After"))
        except AddressRefused as exc:
            raise DeliveryError(f"callback to {url!r} refused: {exc}", retryable=False
                                ) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            refused = isinstance(getattr(exc, "os_error", None), ResolutionRefused)
            raise DeliveryError(f"callback to {url!r} " + (
                f"refused: {exc.os_error}" if refused  # type: ignore[union-attr]
                else f"failed: {type(exc).__name__}"), retryable=not refused) from exc
        if status < 300:
            return None
        retryable = status in (408, 425, 429) or status >= 500
        raise DeliveryError(f"callback to {url!r} answered HTTP {status}",
                            retryable=retryable, retry_after=retry_after)


def verify(secret: str, headers: Any, body: bytes, now: float | None = None) -> str | None:
    """None when the signature is valid and fresh, else what is wrong."""
    ts = headers.get(TIMESTAMP_HEADER)
    signature = headers.get(SIGNATURE_HEADER)
    if not ts or not signature:
        return f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER} header"
    try:
        sent = int(ts)
    except ValueError:
        return f"{TIMESTAMP_HEADER} must be unix seconds"
    if abs((now if now is not None else time.time()) - sent) > REPLAY_WINDOW:
        return "timestamp outside the 5-minute window (replayed or clock skew)"
    if not hmac.compare_digest(sign(secret, ts, body), signature):
        return "signature does not match"
    return None


def to_inbound(source: str, payload: WebhookRequest, signature: str) -> InboundMessage:
    """The normalised message of a webhook call; its delivery identity is the caller's
    idempotency key, or else the request's signature (a retried request is the same)."""
    return InboundMessage(
        channel="webhook", conversation_id=f"webhook:{source}:{payload.conversation_id}",
        user_id=f"{source}:{payload.user_id}", user_name=payload.user_name or payload.user_id,
        text=payload.text, is_direct=True, mentions_bot=True,
        platform_message_id=f"{source}:{payload.idempotency_key or signature}",
        space_id=source,
        reply_target={"source": source, "callback_url": payload.callback_url})


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "invalid body: " + "; ".join(parts)


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None

"""What every resource of the HTTP API shares: the gateway's key in the app, reading a
JSON body into a model (or a 4xx naming what is wrong), and who the caller is."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from adapters.base import ChannelName

from ..service import Gateway

GATEWAY = web.AppKey("gateway", Gateway)
#: A conversation id as API callers give it (the gateway prefixes it with the channel).
LOCAL_ID = r"^[A-Za-z0-9][A-Za-z0-9._@+=/-]{0,150}$"


async def json_body(request: web.Request) -> bytes:
    """The raw body, or 415 unless it is sent as JSON."""
    if request.content_type != "application/json":
        raise bad(415, "send the body as application/json")
    return await request.read()


def invalid(exc: ValidationError) -> str:
    """The first few validation errors, as "field: message; ..."."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
                     for err in exc.errors()[:5])


async def parse(request: web.Request, model: type[BaseModel]) -> Any:
    """The request body as ``model``, or 400 naming what is wrong."""
    raw = await json_body(request)
    try:
        return model.model_validate_json(raw or b"")
    except ValidationError as exc:
        raise bad(400, f"invalid body: {invalid(exc)}") from None


def bad(status: int, reason: str) -> web.HTTPException:
    """The HTTP error to raise: ``status`` with ``{"error": reason}``."""
    cls = {400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden,
           404: web.HTTPNotFound, 409: web.HTTPConflict, 410: web.HTTPGone,
           415: web.HTTPUnsupportedMediaType, 422: web.HTTPUnprocessableEntity}[status]
    return cls(text=json.dumps({"error": reason}), content_type="application/json")


def number(request: web.Request, name: str, *, low: float, high: float,
           default: float | None = None, integer: bool = False) -> float | None:
    """Query parameter ``name`` as a finite number in [low, high], ``default`` when absent;
    400 naming it otherwise (an infinite or huge value would overflow what it feeds)."""
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = float(int(raw)) if integer else float(raw)
    except ValueError:
        raise bad(400, f"{name} must be {'an integer' if integer else 'a number'}") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise bad(400, f"{name} must be between {low:g} and {high:g}")
    return value


def channel_of(request: web.Request) -> ChannelName:
    """"webchat" for the web chat page, "api" for everyone else."""
    return "webchat" if request.headers.get("X-Hermes-Client") == "webchat" else "api"


def identity_of(request: web.Request, user_id: str | None = None) -> str:
    """The identity of an API or web chat caller (channel:user)."""
    channel = channel_of(request)
    user = user_id or request.headers.get("X-Hermes-User") or f"{channel}-user"
    return f"{channel}:{user}"

"""What every resource of the HTTP API shares: the gateway's key in the app, reading a
JSON body into a model (or a 4xx naming what is wrong), and who the caller is."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from adapters.base import ChannelName

from ..auth import Principal
from ..guard import PRINCIPAL, Guard
from ..service import Gateway

GATEWAY = web.AppKey("gateway", Gateway)
GUARD = web.AppKey("guard", Guard)
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


async def body_within(request: web.Request, limit: int) -> bytes:
    """The raw body, read as it comes and refused (413) once past ``limit`` bytes (a route
    that takes more than the app's 1 MB, such as a message with base64 files)."""
    chunks, total = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        total += len(chunk)
        if total > limit:
            raise too_large(f"the body is over {limit} bytes; send large files as "
                            "multipart/form-data")
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(reason: str) -> web.HTTPException:
    """413 with ``{"error": reason}``."""
    return web.HTTPRequestEntityTooLarge(max_size=0, actual_size=0, text=json.dumps(
        {"error": reason}), content_type="application/json")


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
    """"webchat" for the web chat page, "api" for everyone else (where replies show; the
    caller's rights come from its credential either way)."""
    return "webchat" if request.headers.get("X-Hermes-Client") == "webchat" else "api"


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated API caller: the principal its key proves, the user it acts for
    (the principal itself unless its key may act for others), and where it talks."""

    principal: Principal
    user: str
    channel: ChannelName
    admin: bool

    @property
    def identity(self) -> str:
        """``channel:user``, as approvals, tasks and the audit log name people."""
        return f"{self.channel}:{self.user}"

    @property
    def role(self) -> str:
        """The key's role (acting for a user never changes it)."""
        return self.principal.role

    def conversation(self, local_id: str) -> str:
        """A conversation id the caller gives, in its principal's own namespace."""
        return f"{self.channel}:{self.principal.name}:{local_id}"

    def may_see(self, conversation_id: str) -> bool:
        """Whether the caller may read (or change) this conversation: its own principal's,
        or any for an admin."""
        name = self.principal.name
        return self.admin or conversation_id.startswith((f"api:{name}:", f"webchat:{name}:"))


def caller_of(request: web.Request, user_id: str | None = None) -> Caller:
    """Who is calling (the guard has checked its credential) and for which user: the
    principal, or the user ``X-Hermes-User`` (or a body's ``user_id``) names when the key
    may act for them; 403 otherwise."""
    principal = request[PRINCIPAL]
    user = user_id or request.headers.get("X-Hermes-User") or principal.name
    if not principal.may_act_as(user):
        raise bad(403, f"the key of {principal.name!r} may not act for {user[:100]!r} "
                       "(its act_as in HERMES_API_KEYS)")
    roles = request.app[GATEWAY].roles
    return Caller(principal, user, channel_of(request), roles.is_admin(principal.role))


def visible(caller: Caller, conversation_id: str, what: str) -> None:
    """404 unless ``caller`` may see the conversation (404, not 403: whether another's
    task exists is not the caller's to learn)."""
    if not caller.may_see(conversation_id):
        raise bad(404, f"no {what}")

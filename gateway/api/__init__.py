"""The HTTP API, one module per resource. Every route answers JSON; bad input gets a 4xx
with a reason."""

from __future__ import annotations

from aiohttp import web

from . import (
    a2a,
    approvals,
    audit,
    console,
    conversations,
    deadletters,
    files,
    hub,
    schedules,
    service,
    tasks,
    usage,
    workflows,
)
from ._http import GATEWAY, GUARD, parse

__all__ = ["GATEWAY", "GUARD", "parse", "setup"]


def setup(app: web.Application) -> None:
    """Register every API route."""
    for resource in (tasks, conversations, files, approvals, audit, usage, schedules,
                     workflows, a2a, service, console, deadletters, hub):
        resource.setup(app)

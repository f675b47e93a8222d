"""The hermes-gateway service: HTTP API, channels, routing, approvals, scheduler, CLI.

Its parts are imported when first used (the CLI's ``run`` never loads the HTTP app)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .cli import main
    from .service import Gateway, Parts
    from .settings import GatewaySettings

__all__ = ["Gateway", "GatewaySettings", "Parts", "create_app", "main"]

_LAZY = {"create_app": "app", "main": "cli", "Gateway": "service", "Parts": "service",
         "GatewaySettings": "settings"}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first used: ``agent_core``'s
    ``lazy_exports``, written out, as importing ``agent_core`` here would import it before
    the console script turns the garbage collector off (``gateway.start``)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

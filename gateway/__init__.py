"""The hermes-gateway service: HTTP API, channels, routing, approvals, scheduler, CLI.

Its parts are imported when first used (the CLI's ``run`` never loads the HTTP app)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import lazy_exports

if TYPE_CHECKING:
    from .app import create_app
    from .cli import main
    from .service import Gateway, Parts
    from .settings import GatewaySettings

__all__ = ["Gateway", "GatewaySettings", "Parts", "create_app", "main"]

__getattr__ = lazy_exports(__name__, {
    "create_app": "app", "main": "cli", "Gateway": "service", "Parts": "service",
    "GatewaySettings": "settings"})

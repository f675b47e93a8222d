"""Bridges between the hub and other agent protocols, at the edge of the bus: the Synadia
Agent Protocol both ways (our agents as protocol agents: ``sap_host``; protocol agents as
hub agents: ``sap_agents``) and remote A2A agents as hub agents (``a2a_remote``), all behind
the ``bridge`` identity (``runner``; how they are named: ``names``)."""

from __future__ import annotations

from .service import Bridges, bridge_settings

__all__ = ["Bridges", "bridge_settings"]

"""HubDelegation: ``agent_core``'s Delegation, over the hub. What the ``delegate`` tool of
the gateway's agent (and of any TaskLoop agent) calls: discovery, then a ``task_request``
to the chosen agent, then its ``task_response``. The request names the conversation the
caller's task belongs to (``TaskRequest.for_conversation``); the receiving agent believes
it only when the hub's core sent it (the gateway, the hub's own agents)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from agent_core import Delegated

from .bus import Bus
from .discovery import choose, discover
from .errors import BusOverloaded
from .messages import TaskRequest

log = logging.getLogger(__name__)


class HubDelegation:
    """Delegates tasks from ``sender_id`` to the hub's agents."""

    def __init__(self, bus: Bus, sender_id: str) -> None:
        self.bus = bus
        self.sender_id = sender_id

    async def delegate(self, capability: str, text: str, *, arguments: Mapping[str, Any],
                       deadline_ms: int, correlation_id: str, conversation_id: str | None,
                       on_chosen: Callable[[str], None] | None = None) -> Delegated:
        try:
            candidates = await discover(self.bus, capability)
        except Exception as exc:  # no discovery service answers
            log.warning("discovery of %r failed: %s", capability, exc)
            return Delegated("failed", "", {"error": "the hub's discovery did not answer"},
                             "NO_DISCOVERY")
        chosen = choose(candidates, self.bus.settings.hub_traffic.get(capability))
        if chosen is None:
            return Delegated("failed", "", {"error": f"no live agent offers {capability!r}"},
                             "NO_AGENT")
        if on_chosen is not None:
            on_chosen(chosen.agent_id)
        try:
            response = await self.bus.request(chosen.agent_id, TaskRequest(
                sender_id=self.sender_id, intent=capability,
                arguments={"text": text, **arguments}, deadline_ms=deadline_ms,
                correlation_id=_safe(correlation_id)).for_conversation(conversation_id))
        except BusOverloaded as exc:
            return Delegated("failed", chosen.agent_id, {"error": str(exc)}, "OVERLOADED")
        next_steps = response.result.get("next_steps") if response.status == "partial" else []
        return Delegated(response.status, chosen.agent_id, response.result,
                         response.error_code, list(next_steps or []))


def _safe(correlation_id: str) -> str:
    """A correlation id as the envelope accepts it (a trace id usually is one)."""
    cleaned = "".join(c for c in correlation_id if c.isalnum() or c in "_.:@-")[:128]
    return cleaned or "none"

"""The bridges, started with the hub's services: one connection as the ``bridge`` identity,
the runner of the agents it fronts, and each bridge the settings turn on (the Synadia Agent
Protocol both ways with HUB_AGENT_PROTOCOL, the remote A2A agents of HUB_A2A_AGENTS)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..bus import Bus
from ..identity import BRIDGE
from ..settings import HubSettings
from .runner import BridgeRunner

if TYPE_CHECKING:
    from .sap_host import LocalAgent

log = logging.getLogger(__name__)


class _Part(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def bridge_settings(settings: HubSettings) -> HubSettings | None:
    """The settings the bridge connects with (its own credentials), or None when it has
    none: NATS_URL with NATS_CREDS_FILE but no HUB_BRIDGE_CREDS_FILE."""
    if settings.nats_url and settings.nats_creds_file:
        if not settings.hub_bridge_creds_file:
            return None
        return settings.model_copy(update={"nats_creds_file": settings.hub_bridge_creds_file})
    return settings


class Bridges:
    """The hub's bridges to other agent protocols, between ``start`` and ``stop``."""

    def __init__(self, settings: HubSettings, *, local: Sequence[LocalAgent] = ()) -> None:
        self.settings = settings
        #: Agents of this process (the gateway's own) offered in the protocol too.
        self.local = list(local)
        self.bus: Bus | None = None
        self.runner: BridgeRunner | None = None
        self.parts: list[_Part] = []
        self._client: Any = None

    async def start(self) -> None:
        settings = self.settings
        own = bridge_settings(settings)
        if own is None:
            log.warning("the bridges are off: NATS_URL with NATS_CREDS_FILE needs "
                        "HUB_BRIDGE_CREDS_FILE, the credentials of the 'bridge' identity "
                        "(docs/hub.md, Identities)")
            return
        self.bus = bus = await Bus.connect(own, identity=BRIDGE)
        self.runner = runner = BridgeRunner(bus)
        await runner.start()
        signer = await self._signer(own)
        if settings.hub_agent_protocol:
            from synadia_ai.agents import Agents, Identity

            from .sap_agents import ProtocolAgents
            from .sap_host import HostOptions, ProtocolHost

            self._client = Agents(nc=bus.nc, identity=Identity(signer=signer)
                                  if signer is not None else None)
            every = settings.hub_agent_protocol_scan
            self.parts.append(ProtocolAgents(runner, self._client,
                                             owner=settings.hub_agent_protocol_owner,
                                             every=every))
            self.parts.append(ProtocolHost(bus, HostOptions(
                owner=settings.hub_agent_protocol_owner,
                unsigned=settings.hub_agent_protocol_unsigned,
                heartbeat=settings.hub_agent_protocol_heartbeat,
                default_deadline_ms=min(300_000, int(settings.hermes_run_timeout * 1000)),
                signer=signer), every=every, local=self.local))
        if settings.hub_a2a_agents:
            from .a2a_remote import RemoteA2A

            self.parts.append(RemoteA2A(runner, settings.hub_a2a_agents,
                                        internal_ok=settings.hub_a2a_internal_hosts))
        for part in self.parts:
            await part.start()

    async def _signer(self, settings: HubSettings) -> Any:
        """The bridge's NATS key, which signs what it sends as a protocol agent
        (``Agent-Sender``), or None with a login that has none (a shared token)."""
        from synadia_ai.agents import signer_from_creds_file

        creds = settings.nats_creds_file
        if not settings.nats_url:
            from ..server import EmbeddedNats

            creds = str(await asyncio.to_thread(
                EmbeddedNats(settings.hermes_data_dir).creds, BRIDGE))
        return signer_from_creds_file(creds) if creds else None

    async def stop(self) -> None:
        for part in reversed(self.parts):
            with contextlib.suppress(Exception):
                await part.stop()
        self.parts.clear()
        if self._client is not None:
            await self._client.close()
        if self.runner is not None:
            await self.runner.stop()
        if self.bus is not None:
            await self.bus.close()

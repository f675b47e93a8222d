"""The bridge on the bus: agents of other protocols as hub agents, all behind one identity.

Each agent the bridge fronts (a Synadia Agent Protocol agent, a remote A2A agent) is a
``Fronted`` agent with an id of the bridge's namespaces. ``BridgeRunner`` is an
``AgentRunner`` for all of them: it pulls their requests from the bridge's one consumer
(filtered by the core to their subjects: ``enrolment.bridge_consumer``), hands each to the
agent it was sent to (the subject's agent token: ``TaskRequest.addressee``), and answers as
``bridge`` (``reply.bridge.<sender id>``: requesters believe the bridge for these ids only,
``subjects.responders``); acknowledgement, redelivery, dead letters and the deadline are the
runner's as for any agent. ``FrontHeartbeats`` beats for each on ``$HEALTHCHECK.bridge``, so
discovery lists them beside our own agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource

from ..agent import Agent, AgentRunner
from ..bus import TASKS, Bus
from ..discovery import INTERVAL, STOPPING, Heartbeats, healthcheck_subject
from ..enrolment import bridge_consumer
from ..identity import BRIDGE
from ..messages import Heartbeat, LogEvent, TaskRequest, TaskResponse
from ..subjects import log_subject

log = logging.getLogger(__name__)


class Fronted(Agent):
    """An agent of another protocol, as the hub sees it: its id (of the bridge's
    namespaces), capabilities and version, and ``on_message`` that calls it. It answers
    every failure of the other side itself (a failed response), so a request is not sent
    to it again."""

    concurrency = 8
    stop_grace = 2.0

    def __init__(self) -> None:
        super().__init__()
        #: Requests being handled now (its load in discovery).
        self.in_hand = 0

    async def note(self, request: TaskRequest, event_type: str, **details: str) -> None:
        """A progress note about ``request`` (``log.<task id>``: what the A2A edge and a
        workflow run show while it works)."""
        with contextlib.suppress(Exception):
            await self.publish(log_subject(request.task_id), LogEvent(
                sender_id=self.agent_id, correlation_id=request.correlation_id,
                level="info", event_type=event_type, details=dict(details)))


class NotFrontedHere(Exception):
    """A request for an agent this copy of the bridge does not front (another copy may:
    the request is handed back, and redelivered with backoff like any that failed)."""


class BridgeAgent(Agent):
    """The agent the runner runs: it hands each request to the fronted agent it is for."""

    agent_id = BRIDGE
    concurrency = 64
    stop_grace = 5.0

    def __init__(self) -> None:
        super().__init__()
        self.fronts: dict[str, Fronted] = {}

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        front = self.fronts.get(request.addressee or "")
        if front is None:
            raise NotFrontedHere(f"{request.addressee!r} is not fronted by this copy")
        front._publish.set(self._publish.get())
        front.in_hand += 1
        try:
            return await front.on_message(request)
        finally:
            front.in_hand -= 1


class FrontHeartbeats(Heartbeats):
    """Heartbeats of every fronted agent, sent by the bridge on ``$HEALTHCHECK.bridge``."""

    def __init__(self, bus: Bus, fronts: dict[str, Fronted], *,
                 interval: float = INTERVAL) -> None:
        super().__init__(bus, BRIDGE, (), interval=interval)
        self.fronts = fronts

    @property
    def endpoint(self) -> str:
        """This bridge copy, as discovery tells its copies apart."""
        return f"{os.getpid()}:{self.instance}"

    async def stop(self) -> None:
        """Stop beating, and say each fronted agent's copy here is gone."""
        await self._loop.stop()
        for agent_id in list(self.fronts):
            await self.gone(agent_id)

    async def gone(self, agent_id: str) -> None:
        """Discovery forgets ``agent_id``'s copy here at once."""
        goodbye = LogEvent(sender_id=BRIDGE, level="info", event_type=STOPPING,
                           details={"agent_id": agent_id, "endpoint": self.endpoint})
        with contextlib.suppress(Exception):  # its connection may be gone already
            await self.bus.nc.publish(healthcheck_subject(BRIDGE), goodbye.to_json())

    async def beat(self, front: Fronted) -> None:
        """One heartbeat of ``front`` now."""
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        beat = Heartbeat(sender_id=BRIDGE, agent_id=front.agent_id,
                         load_percent=max(0.0, min(100.0, 100.0 * front.in_hand
                                                   / max(1, front.concurrency))),
                         memory_used_mb=rss, capabilities=list(front.capabilities),
                         version=front.version, endpoint=self.endpoint)
        await self.bus.nc.publish(healthcheck_subject(BRIDGE), beat.to_json())

    async def _beat(self) -> None:
        while self._loop.running:
            for front in list(self.fronts.values()):
                try:
                    await self.beat(front)
                except Exception as exc:
                    log.warning("heartbeat of %s not sent: %s", front.agent_id, exc)
            await self._loop.pause(self.interval)


class BridgeRunner(AgentRunner):
    """Runs the bridge's agents on the bus (one copy per bridge process)."""

    def __init__(self, bus: Bus) -> None:
        self.bridge = BridgeAgent()
        super().__init__(bus, self.bridge)
        self.beats = FrontHeartbeats(bus, self.bridge.fronts)
        self.heartbeats = self.beats
        self._bound = False
        self._lock = asyncio.Lock()

    @property
    def fronts(self) -> dict[str, Fronted]:
        """The agents it fronts now, by id."""
        return self.bridge.fronts

    async def start(self) -> None:
        """Beat for the agents it fronts (none yet: it pulls once it fronts one)."""
        self.heartbeats.start()

    async def front(self, agent: Fronted) -> None:
        """Front ``agent``: its requests pulled here, its heartbeats sent (the first at
        once, so discovery lists it when this returns)."""
        async with self._lock:
            ids = sorted({*self.bridge.fronts, agent.agent_id})
            consumer = await bridge_consumer(self.bus, ids)
            self.bridge.fronts[agent.agent_id] = agent
            if not self._bound:
                self._ack_wait = float(consumer.get("ack_wait") or self._ack_wait)
                self._max_deliver = int(consumer.get("max_deliver") or self._max_deliver)
                self._subscription = await self.bus.js.pull_subscribe_bind(
                    durable=str(consumer["durable"]), stream=TASKS)
                self._loop.start(self._pull(), name="bridge-agents")
                self._bound = True
        with contextlib.suppress(Exception):
            await self.beats.beat(agent)
        log.info("the bridge fronts %s (%s)", agent.agent_id, ", ".join(agent.capabilities))

    async def unfront(self, agent_id: str) -> None:
        """Stop fronting ``agent_id`` (a request for it still waiting is handed back:
        another copy may front it; with none, it ends AGENT_FAILED or TIMEOUT)."""
        if self.bridge.fronts.pop(agent_id, None) is not None:
            await self.beats.gone(agent_id)
            log.info("the bridge no longer fronts %s", agent_id)

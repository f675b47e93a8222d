"""Discovery: who is alive, what they can do, how busy they are.

Every running copy of an agent sends a ``heartbeat`` on ``$HEALTHCHECK.<agent id>`` every
few seconds (``Heartbeats``), and a ``log_event`` ``stopping`` when it stops; only that
agent's identity may publish there, and a heartbeat that speaks for another agent than its
subject names is refused. The bridge beats for the agents of other protocols it fronts on
``$HEALTHCHECK.bridge``, and is believed for ids of their namespaces only
(``identity.is_bridged``). The discovery service
(``Discovery``, run by ``hermes-gateway hub``; any number of copies) keeps the latest of each
copy and answers ``$DISCOVERY`` requests
(``{"intent": "validate_claim"}``) with the live agents that have that capability, least
loaded first. A copy is offline after three missed heartbeats. ``choose`` picks one of the
candidates: weighted by the configured traffic split (a canary at 30%), and an agent over
80% load gets a fifth of its share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import random
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg

from agent_core.background import Background
from agent_core.ids import new_id

from .bus import Bus
from .identity import BRIDGE, is_bridged
from .messages import Heartbeat, LogEvent, Violation

log = logging.getLogger(__name__)

HEALTHCHECK, DISCOVERY = "$HEALTHCHECK", "$DISCOVERY"
#: The event a stopping copy sends on $HEALTHCHECK.<agent id>.
STOPPING = "stopping"
INTERVAL = 2.0
MISSED = 3
BUSY = 80.0


def _speaks_for(sender: str, agent_id: str) -> bool:
    """Whether the identity that published on ``$HEALTHCHECK.<sender>`` may speak for
    ``agent_id``: its own, or the bridge for an agent of another protocol."""
    return agent_id == sender or (sender == BRIDGE and is_bridged(agent_id))


def healthcheck_subject(agent_id: str) -> str:
    """Where the copies of ``agent_id`` say they are alive (only it may publish there)."""
    return f"{HEALTHCHECK}.{agent_id}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A live agent with a capability."""

    agent_id: str
    load_percent: float
    copies: int
    version: str
    #: What its copies offer (the union of their heartbeats').
    capabilities: tuple[str, ...] = ()
    #: Seconds since the freshest of its copies' heartbeats came.
    heartbeat_age: float = 0.0


class Heartbeats:
    """Sends one copy's heartbeats until stopped."""

    def __init__(self, bus: Bus, agent_id: str,
                 capabilities: tuple[str, ...] | Callable[[], tuple[str, ...]], *,
                 version: str = "0", load: Callable[[], float] = lambda: 0.0,
                 interval: float = INTERVAL) -> None:
        self.bus = bus
        self.agent_id = agent_id
        #: What it offers, or how to read it at each beat (an agent's may change).
        self.capabilities = capabilities
        self.version = version
        self.load = load
        self.interval = interval
        self.instance = new_id(12)
        self._loop = Background()

    def start(self) -> None:
        """Beat in the background (the first beat at once)."""
        self._loop.start(self._beat(), name=f"heartbeat-{self.agent_id}")

    async def stop(self) -> None:
        """Stop beating, and say so (a ``log_event`` ``stopping`` on its subject):
        discovery forgets the copy at once (a copy that dies is forgotten after three
        missed beats)."""
        await self._loop.stop()
        goodbye = LogEvent(sender_id=self.agent_id, level="info", event_type=STOPPING,
                           details={"agent_id": self.agent_id,
                                    "endpoint": self.heartbeat().endpoint})
        with contextlib.suppress(Exception):  # its connection may be gone already
            await self.bus.nc.publish(healthcheck_subject(self.agent_id), goodbye.to_json())

    def abandon(self) -> None:
        """Stop beating at once (what a crash does)."""
        self._loop.cancel()

    def heartbeat(self) -> Heartbeat:
        """This copy's heartbeat now."""
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return Heartbeat(sender_id=self.agent_id, agent_id=self.agent_id,
                         load_percent=max(0.0, min(100.0, self.load())), memory_used_mb=rss,
                         capabilities=list(self.capabilities() if callable(self.capabilities)
                                           else self.capabilities), version=self.version,
                         endpoint=f"{os.getpid()}:{self.instance}")

    async def _beat(self) -> None:
        while self._loop.running:
            try:
                await self.bus.nc.publish(healthcheck_subject(self.agent_id),
                                          self.heartbeat().to_json())
            except Exception as exc:
                log.warning("heartbeat of %s not sent: %s", self.agent_id, exc)
            await self._loop.pause(self.interval)


class Discovery:
    """Keeps the latest heartbeat of every copy; answers discovery requests."""

    def __init__(self, bus: Bus, *, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bus = bus
        self.interval = interval
        self.clock = clock
        #: (agent id, copy) -> (heartbeat, when it came)
        self.copies: dict[tuple[str, str], tuple[Heartbeat, float]] = {}
        self._subscriptions: list[Any] = []
        #: Queries this copy answered.
        self.answered = 0

    async def start(self) -> None:
        """Listen for heartbeats and answer on $DISCOVERY (a queue group: one copy of the
        service answers each request)."""
        self._subscriptions = [
            await self.bus.nc.subscribe(f"{HEALTHCHECK}.*", cb=self._on_heartbeat),
            await self.bus.nc.subscribe(DISCOVERY, queue="discovery", cb=self._on_query)]

    async def stop(self) -> None:
        """Stop listening: drained, so the server routes no further query here once this
        returns and a query already routed here is still answered (unsubscribing alone
        left one that raced the UNSUB unanswered: its caller waited out its timeout)."""
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.drain()

    async def _on_heartbeat(self, msg: Msg) -> None:
        sender = msg.subject.split(".", 1)[1]  # the identity the server let publish here
        try:
            beat = self.bus.parse(msg.data)
        except Violation as exc:
            log.warning("heartbeat refused: %s", exc)
            return
        if isinstance(beat, Heartbeat):
            if not _speaks_for(sender, beat.agent_id):
                log.warning("a heartbeat on %s for agent %r refused: it speaks for another "
                            "agent", msg.subject, beat.agent_id)
                return
            self.copies[(beat.agent_id, beat.endpoint or "")] = (beat, self.clock())
        elif isinstance(beat, LogEvent) and beat.event_type == STOPPING:
            agent = str(beat.details.get("agent_id") or sender)
            if _speaks_for(sender, agent):
                self.copies.pop((agent, str(beat.details.get("endpoint") or "")), None)

    async def _on_query(self, msg: Msg) -> None:
        try:
            query = json.loads(msg.data)
            intent = str(query["intent"])
        except (ValueError, KeyError, TypeError):
            await msg.respond(json.dumps({"error": "send {\"intent\": \"<capability>\"}"})
                              .encode())
            return
        found = [dataclasses.asdict(c) for c in self.live(None if intent == "*" else intent)]
        self.answered += 1
        await msg.respond(json.dumps({"intent": intent, "agents": found}).encode())

    def live(self, intent: str | None = None) -> list[Candidate]:
        """Live agents (with ``intent`` among their capabilities), least loaded first."""
        now = self.clock()
        cutoff = now - self.interval * MISSED
        agents: dict[str, list[Heartbeat]] = {}
        latest: dict[str, float] = {}
        for (agent_id, _), (beat, seen) in list(self.copies.items()):
            if seen < cutoff:
                continue
            if intent is None or intent in beat.capabilities:
                agents.setdefault(agent_id, []).append(beat)
                latest[agent_id] = max(latest.get(agent_id, seen), seen)
        found = [Candidate(agent_id, sum(b.load_percent for b in beats) / len(beats),
                           len(beats), max(b.version for b in beats),
                           tuple(sorted({c for b in beats for c in b.capabilities})),
                           round(max(0.0, now - latest[agent_id]), 3))
                 for agent_id, beats in agents.items()]
        return sorted(found, key=lambda c: (c.load_percent, c.agent_id))


async def discover(bus: Bus, intent: str, *, wait: float = 2.0) -> list[Candidate]:
    """Ask the discovery service who can do ``intent`` (least loaded first; ``*``: every
    live agent)."""
    reply = await bus.nc.request(DISCOVERY, json.dumps({"intent": intent}).encode(),
                                 timeout=wait)
    data = json.loads(reply.data)
    # Fields a discovery service of another version adds are left out, not a TypeError.
    fields = {f.name for f in dataclasses.fields(Candidate)}
    return [Candidate(**{**{k: v for k, v in agent.items() if k in fields},
                         "capabilities": tuple(agent.get("capabilities", ()))})
            for agent in data.get("agents", [])]


def choose(candidates: list[Candidate], weights: dict[str, float] | None = None, *,
           rng: random.Random | None = None) -> Candidate | None:
    """One candidate: by the traffic split (a capability with a split goes only to the
    agents it names, whatever else offers it: None when none of them is live), a busy
    agent (over 80%) at a fifth of its weight."""
    split = weights or {}
    named = [c for c in candidates if c.agent_id in split]
    pool = named if split else candidates
    if not pool:
        return None

    def weight(c: Candidate) -> float:
        base = split.get(c.agent_id, 1.0) if named else 1.0
        return base * (0.2 if c.load_percent > BUSY else 1.0)

    total = sum(weight(c) for c in pool)
    if total <= 0:
        return pool[0]
    pick = (rng or random).uniform(0, total)
    for candidate in pool:
        pick -= weight(candidate)
        if pick <= 0:
            return candidate
    return pool[-1]


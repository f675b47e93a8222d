"""Enrolment: each agent's durable consumer on ``HMP_TASKS``, made by the hub's core.

An agent reads its requests through its durable consumer (``agent_<id>``, filtered to
``task.request.<id>.*``) and nothing else of the stream. It may not create or change a
consumer itself: a consumer's filter, or a push consumer's delivery subject, would let it
read or republish other agents' requests. So the core makes it: its own agents directly,
any other when the agent asks on ``hmp.enroll.<agent id>`` (a subject only that agent may
publish to), answered ``{"durable", "ack_wait", "max_deliver"}`` or ``{"error": ...}``.

The bridge (``identity.BRIDGE``) reads the requests of every agent of another protocol it
fronts through one consumer (``agent_bridge``), filtered to those agents' subjects: it asks
on ``hmp.enroll.bridge`` with ``{"agents": [ids]}``, and the core adds the ids of the
bridge's namespaces (``identity.is_bridged``) to the filter, never another; when the filter
would pass ``MAX_BRIDGED`` subjects, those of agents discovery no longer lists are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from agent_core import ConfigError

from .bus import TASKS, Bus
from .errors import HubUnreachable
from .identity import BRIDGE, check_agent_id, check_bridged_id, durable_of, is_bridged
from .subjects import requests_for

log = logging.getLogger(__name__)

ENROL = "hmp.enroll"
#: Agents the bridge's one consumer may be filtered to.
MAX_BRIDGED = 1000


async def ensure_consumer(bus: Bus, agent_id: str) -> dict[str, Any]:
    """The core makes (or brings to this configuration) ``agent_id``'s durable consumer;
    its name, ack wait and deliveries."""
    settings = bus.settings
    durable = durable_of(check_agent_id(agent_id))
    await bus.js.add_consumer(TASKS, ConsumerConfig(
        name=durable, durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL, ack_wait=settings.hub_ack_wait,
        max_deliver=settings.hub_max_deliver, filter_subject=requests_for(agent_id)))
    return {"durable": durable, "ack_wait": settings.hub_ack_wait,
            "max_deliver": settings.hub_max_deliver}


async def consumer_for(bus: Bus, agent_id: str, *, wait: float = 60.0) -> dict[str, Any]:
    """``agent_id``'s consumer: made here by the core; for anyone else the one already
    made, or else asked of the core (waited for up to ``wait`` seconds: an agent may start
    before the hub's services)."""
    if bus.core:
        return await ensure_consumer(bus, agent_id)
    durable = durable_of(check_agent_id(agent_id))
    with contextlib.suppress(NotFoundError):
        made = (await bus.js.consumer_info(TASKS, durable)).config
        if made.filter_subject == requests_for(agent_id):
            return {"durable": durable, "ack_wait": made.ack_wait,
                    "max_deliver": made.max_deliver}
    loop = asyncio.get_running_loop()
    until, told = loop.time() + wait, False
    while True:
        try:
            reply = await bus.nc.request(f"{ENROL}.{agent_id}", b"", timeout=10)
            break
        except (NoRespondersError, NatsTimeout):
            if loop.time() >= until:
                raise HubUnreachable(
                    f"agent {agent_id!r} cannot be enrolled: no hub services answered on "
                    f"{ENROL}.{agent_id} within {wait:g} s (start hermes-gateway hub, or the "
                    "gateway with HERMES_HUB)") from None
            if not told:
                log.warning("agent %s waits for the hub's services to enrol it", agent_id)
                told = True
            await asyncio.sleep(1.0)
    answer = json.loads(reply.data)
    if "error" in answer:
        raise ConfigError(f"agent {agent_id!r} was not enrolled: {answer['error']}")
    return dict(answer)


async def ensure_bridge_consumer(bus: Bus, agent_ids: list[str]) -> dict[str, Any]:
    """The core makes (or widens) the bridge's consumer to the requests of ``agent_ids``
    too: each must be an id of the bridge's namespaces (ConfigError otherwise)."""
    wanted = [requests_for(check_bridged_id(agent_id)) for agent_id in agent_ids]
    settings = bus.settings
    durable = durable_of(BRIDGE)
    current: list[str] = []
    with contextlib.suppress(NotFoundError):
        made = (await bus.js.consumer_info(TASKS, durable)).config
        current = list(made.filter_subjects or ([made.filter_subject]
                                                if made.filter_subject else []))
    subjects = sorted(set(current) | set(wanted))
    if not subjects:  # a consumer without a filter would read every request
        raise ConfigError("the bridge names no agent to front")
    if len(subjects) > MAX_BRIDGED:
        # Agents come and go (a protocol agent per session): the filter keeps those asked
        # for now and those discovery still lists, and drops the others.
        subjects = sorted(set(wanted) | (set(current) & await _live_bridged(bus)))
    if len(subjects) > MAX_BRIDGED:
        raise ConfigError(f"the bridge fronts more than {MAX_BRIDGED} agents")
    if subjects != sorted(current) or not current:
        config = ConsumerConfig(
            name=durable, durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL, ack_wait=settings.hub_ack_wait,
            max_deliver=settings.hub_max_deliver, filter_subjects=subjects)
        await bus.js.add_consumer(TASKS, config)  # made, or its filter widened
    return {"durable": durable, "ack_wait": settings.hub_ack_wait,
            "max_deliver": settings.hub_max_deliver, "agents": len(subjects)}


async def _live_bridged(bus: Bus) -> set[str]:
    """The request subjects of the bridge's agents discovery lists now."""
    from .discovery import discover

    try:
        live = await discover(bus, "*")
    except (NoRespondersError, NatsTimeout) as exc:
        raise ConfigError(f"the bridge's agents are not known now: {exc}") from None
    return {requests_for(c.agent_id) for c in live if is_bridged(c.agent_id)}


async def bridge_consumer(bus: Bus, agent_ids: list[str]) -> dict[str, Any]:
    """The bridge's consumer, filtered to ``agent_ids`` among others, asked of the core
    (made here when this is the core)."""
    if bus.core:
        return await ensure_bridge_consumer(bus, agent_ids)
    reply = await bus.nc.request(f"{ENROL}.{BRIDGE}", json.dumps(
        {"agents": agent_ids}).encode(), timeout=10)
    answer = json.loads(reply.data)
    if "error" in answer:
        raise ConfigError(f"the bridge was not enrolled: {answer['error']}")
    return dict(answer)


class Enrolment:
    """Answers agents' enrolment requests (a queue group: one copy of the core answers)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._subscription: Any = None

    async def start(self) -> None:
        self._subscription = await self.bus.nc.subscribe(f"{ENROL}.*", queue="hub-enroll",
                                                         cb=self._on_request)

    async def stop(self) -> None:
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()

    async def _on_request(self, msg: Msg) -> None:
        agent_id = msg.subject.rsplit(".", 1)[-1]
        try:
            if agent_id == BRIDGE:
                asked = json.loads(msg.data or b"{}").get("agents")
                if not isinstance(asked, list):
                    raise ConfigError('send {"agents": [the ids it fronts]}')
                answer = await ensure_bridge_consumer(self.bus, asked)
            else:
                answer = await ensure_consumer(self.bus, agent_id)
        except (ConfigError, ValueError, AttributeError) as exc:
            answer = {"error": str(exc)}
        except Exception as exc:
            log.warning("enrolment of %r failed: %s", agent_id, exc)
            answer = {"error": f"{type(exc).__name__}"}
        else:
            log.info("agent %s enrolled", agent_id)
        await msg.respond(json.dumps(answer).encode())

"""Subjects: where each HMP message goes, and which of their tokens name an identity.

The server lets an identity publish only under its own name (``identity``), so a receiver
reads who sent a message from its subject, never from the body's ``sender_id``:

- ``task.request.<agent>.<sender identity>``: a request for ``agent``;
- ``reply.<responder>.<sender id>``: an answer (the responder: the agent asked, the
  bridge for an agent of another protocol it fronts, or the hub's core for its TIMEOUT);
- ``log.<task id>``: notes about a task while it runs.

A request the core sends on behalf of a conversation carries it in the
``Hmp-Conversation`` header, which a receiver believes only when the subject names the
core as its sender (``conversation_of``).
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

from nats.aio.msg import Msg

from .identity import BRIDGE, CORE, TRUSTED_ORIGINS, is_bridged

log = logging.getLogger(__name__)

#: The conversation a request from the core acts for (percent-encoded).
CONVERSATION = "Hmp-Conversation"


def request_subject(agent_id: str, sender: str = CORE) -> str:
    """Where requests for agent ``agent_id`` from identity ``sender`` go."""
    return f"task.request.{agent_id}.{sender}"


def requests_for(agent_id: str) -> str:
    """Every request for agent ``agent_id``, whoever sent it."""
    return f"task.request.{agent_id}.*"


def requester_of(subject: str) -> str:
    """The identity that sent the request on ``subject`` (the server made sure)."""
    return subject.rsplit(".", 1)[-1]


def addressee_of(subject: str) -> str:
    """The agent a request on ``subject`` (``task.request.<agent>.<sender>``) is for."""
    return subject.split(".")[2]


def responders(agent_id: str) -> tuple[str, ...]:
    """Who may answer a request sent to ``agent_id``: that agent (the bridge, for an agent
    of another protocol it fronts), or the hub's core (its deadline watch's TIMEOUT)."""
    return (BRIDGE, CORE) if is_bridged(agent_id) else (agent_id, CORE)


def reply_subject(responder: str, sender_id: str) -> str:
    """Where ``responder`` answers ``sender_id``."""
    return f"reply.{responder}.{sender_id}"


def replies_to(sender_id: str) -> str:
    """Every answer to ``sender_id``, whoever sent it."""
    return f"reply.*.{sender_id}"


def responder_of(subject: str) -> str:
    """Who sent the answer on ``subject`` (the server made sure)."""
    return subject.split(".", 2)[1]


def conversation_of(msg: Msg) -> str | None:
    """The conversation a received request acts for: the core's ``Hmp-Conversation``
    header, ignored when anyone else sent it."""
    value = (msg.headers or {}).get(CONVERSATION)
    if not value:
        return None
    if requester_of(msg.subject) not in TRUSTED_ORIGINS:
        log.warning("%s from %r names a conversation; only the hub's core may: ignored",
                    msg.subject, requester_of(msg.subject))
        return None
    return unquote(value)


def answers_for(msg: Msg, agent: str, task_id: str) -> bool:
    """Whether ``msg`` comes from who may answer a request sent to ``agent``: that agent
    (the bridge for an agent it fronts), or the hub's core (its deadline watch answers
    TIMEOUT). Anything else is logged and ignored, whatever its body says."""
    responder = responder_of(msg.subject)
    if responder in responders(agent):
        return True
    log.warning("an answer to task %s from %r ignored: %r was asked", task_id, responder,
                agent)
    return False


def log_subject(task_id: str) -> str:
    """Where log events about task ``task_id`` go while it runs."""
    return "log." + ("".join(c if c.isalnum() or c in "_-:@" else "_" for c in task_id)
                     or "unknown")

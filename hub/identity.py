"""Who is speaking on the hub, and what each identity may do there.

Every process connects as one identity, a NATS user whose subject permissions the server
enforces (decentralised JWT users; ``authority`` issues them for the embedded server):

- ``hub``, the core: the gateway and ``hermes-gateway hub`` (discovery, the deadline watch,
  the tool and context services, enrolment, the hub's own agents). Trusted with the bus,
  except writing the published schemas.
- ``schema-admin``: the only identity that may write the ``HMP_SCHEMAS`` bucket.
- an agent's id (``claims-validator``): a hub agent (and any other client of the hub,
  which is an agent that serves nothing). It consumes its own requests only (through its
  durable consumer, which the core creates), and it sends requests, answers and
  heartbeats only as itself.

Where the sender's identity matters, it is a token of the subject and the server refuses a
publish under another: requests ``task.request.<agent>.<sender identity>``, answers
``reply.<responder>.<sender id>``, heartbeats ``$HEALTHCHECK.<agent>``. A receiver trusts
that token, never a body's ``sender_id``. Each identity's inbox is
``_INBOX.<identity>.>``, so nobody reads another's replies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_core import ConfigError

CORE = "hub"
SCHEMA_ADMIN = "schema-admin"
RESERVED = frozenset({CORE, SCHEMA_ADMIN})
#: Identities whose requests may name the conversation they act for (``Hmp-Conversation``).
TRUSTED_ORIGINS = frozenset({CORE})

#: An agent id is one subject token (permissions and durable names are built from it).
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

TASKS = "HMP_TASKS"
SCHEMAS = "HMP_SCHEMAS"
_SCHEMA_STREAM = f"KV_{SCHEMAS}"
#: Reading the published schemas (a watch is an ordered consumer on the bucket's stream,
#: whose messages only the schema admin writes).
_SCHEMA_READS = (
    f"$JS.API.STREAM.INFO.{_SCHEMA_STREAM}",
    f"$JS.API.STREAM.MSG.GET.{_SCHEMA_STREAM}",
    f"$JS.API.DIRECT.GET.{_SCHEMA_STREAM}",
    f"$JS.API.DIRECT.GET.{_SCHEMA_STREAM}.>",
    f"$JS.API.CONSUMER.CREATE.{_SCHEMA_STREAM}",
    f"$JS.API.CONSUMER.CREATE.{_SCHEMA_STREAM}.>",
    f"$JS.API.CONSUMER.INFO.{_SCHEMA_STREAM}.*",
    f"$JS.FC.{_SCHEMA_STREAM}.>",
)
#: What writes or replaces the published schemas: the schema admin's alone.
SCHEMA_WRITES = (
    f"$KV.{SCHEMAS}.>",
    f"$JS.API.STREAM.CREATE.{_SCHEMA_STREAM}",
    f"$JS.API.STREAM.UPDATE.{_SCHEMA_STREAM}",
    f"$JS.API.STREAM.DELETE.{_SCHEMA_STREAM}",
    f"$JS.API.STREAM.PURGE.{_SCHEMA_STREAM}",
    f"$JS.API.STREAM.MSG.DELETE.{_SCHEMA_STREAM}",
    f"$JS.API.STREAM.RESTORE.{_SCHEMA_STREAM}",
)


@dataclass(frozen=True, slots=True)
class Permissions:
    """One identity's subject permissions, as the server enforces them."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    publish_deny: tuple[str, ...] = ()
    #: May answer a request sent to one of its subscriptions (the service API's pings).
    responses: bool = False


def check_agent_id(agent_id: str) -> str:
    """``agent_id`` when it can be an agent's identity; ConfigError otherwise."""
    if not _AGENT_ID.match(agent_id):
        raise ConfigError(f"agent id {agent_id!r}: 1-64 letters, digits, - and _, starting "
                          "with a letter or digit (it is a NATS subject token and user)")
    if agent_id in RESERVED:
        raise ConfigError(f"agent id {agent_id!r} is reserved for the hub's own identities")
    return agent_id


def durable_of(agent_id: str) -> str:
    """The durable consumer every copy of ``agent_id`` pulls from."""
    return f"agent_{agent_id}"


def inbox_prefix(identity: str) -> str:
    """Where the replies to ``identity``'s requests come (only it may subscribe there)."""
    return f"_INBOX.{identity}"


def permissions(identity: str) -> Permissions:
    """What ``identity`` may publish and subscribe to."""
    if identity == CORE:
        return Permissions(publish=(">",), subscribe=(">",), publish_deny=SCHEMA_WRITES)
    if identity == SCHEMA_ADMIN:
        return Permissions(publish=(*SCHEMA_WRITES[:2], *_SCHEMA_READS),
                           subscribe=(f"{inbox_prefix(identity)}.>",))
    agent = check_agent_id(identity)
    durable = durable_of(agent)
    return Permissions(
        publish=(
            f"task.request.*.{agent}",          # requests it sends, as itself
            f"reply.{agent}.>",                  # its answers, as itself
            f"$HEALTHCHECK.{agent}",             # its heartbeats
            f"dead.{agent}",                     # its requests that failed every delivery
            "log.>",                             # notes about the tasks it handles
            "bad_json_log.>",                    # broken JSON it repaired
            "$DISCOVERY", "tool.call.*", "context.update.*",
            f"hmp.enroll.{agent}",               # asks the core for its durable consumer
            f"$JS.API.CONSUMER.INFO.{TASKS}.*",  # how many requests wait (backpressure)
            f"$JS.API.CONSUMER.MSG.NEXT.{TASKS}.{durable}",
            f"$JS.ACK.{TASKS}.{durable}.>",
            *_SCHEMA_READS),
        subscribe=(
            f"{inbox_prefix(agent)}.>",
            f"reply.*.{agent}", f"reply.*.{agent}.>",  # answers to its own requests
            "$SRV.*", f"$SRV.*.{agent}", f"$SRV.*.{agent}.>",
            f"hermes.agent.{agent}.status"),
        responses=True)


def nsc_command(identity: str, account: str = "hermes") -> str:
    """The ``nsc add user`` command that makes ``identity`` on a NATS server of one's own
    (its permissions as ``permissions`` gives them)."""
    granted = permissions(identity)
    flags = [f"--allow-pub '{s}'" for s in granted.publish]
    flags += [f"--deny-pub '{s}'" for s in granted.publish_deny]
    flags += [f"--allow-sub '{s}'" for s in granted.subscribe]
    if granted.responses:
        flags.append("--allow-pub-response 1")
    return f"nsc add user --account {account} --name {identity} \\\n    " + \
        " \\\n    ".join(flags)

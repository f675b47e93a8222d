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
- ``bridge``: the bridges to other agent protocols (the Synadia Agent Protocol, remote A2A
  agents). It speaks for the agents it fronts, whose ids are in namespaces no other
  identity may take (``sap-...``, ``a2a-...``: ``BRIDGED``), and only for them: it answers
  as ``bridge`` (``reply.bridge.<sender id>``), beats for them on ``$HEALTHCHECK.bridge``,
  and sends the requests of protocol callers as itself (``task.request.<agent>.bridge``:
  never the core's, so no request of theirs acts for a conversation). It also speaks the
  Synadia Agent Protocol (``agents.>``, the ``agents`` micro service, the SDK's inbox).
- ``sap-<owner>`` (``sap-alice``): a participant of the Synadia Agent Protocol on the hub's
  server (Claude Code, OpenClaw, Hermes Agent, a caller of our agents) and of nothing of
  HMP. It hosts agents under its own owner token only (``agents.prompt.*.<owner>.*``), and
  discovers and prompts any agent, as the protocol's open fabric has it.

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
BRIDGE = "bridge"
RESERVED = frozenset({CORE, SCHEMA_ADMIN, BRIDGE})
#: The namespaces of the agents the bridge fronts (Synadia Agent Protocol agents, remote
#: A2A agents): no identity but the bridge speaks for an id in them.
BRIDGED = ("sap-", "a2a-")
#: Identities whose requests may name the conversation they act for (``Hmp-Conversation``).
TRUSTED_ORIGINS = frozenset({CORE})

#: An agent id is one subject token (permissions and durable names are built from it).
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
#: A participant of the Synadia Agent Protocol: ``sap-<owner token>``.
PROTOCOL_PARTICIPANT = "sap-"
_OWNER = re.compile(r"^[a-z0-9][a-z0-9_-]{0,59}$")

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
    #: Answers it may send to one request (a prompt's stream is many) and for how long
    #: after the request came (seconds; 0: the server's two minutes).
    response_max: int = 1
    response_ttl: float = 0.0


def check_agent_id(agent_id: str) -> str:
    """``agent_id`` when it can be an agent's identity; ConfigError otherwise."""
    if not _AGENT_ID.match(agent_id):
        raise ConfigError(f"agent id {agent_id!r}: 1-64 letters, digits, - and _, starting "
                          "with a letter or digit (it is a NATS subject token and user)")
    if agent_id in RESERVED:
        raise ConfigError(f"agent id {agent_id!r} is reserved for the hub's own identities")
    if is_bridged(agent_id):
        raise ConfigError(f"agent id {agent_id!r}: ids starting with "
                          f"{' or '.join(BRIDGED)} are the bridge's (agents of other "
                          "protocols)")
    return agent_id


def check_bridged_id(agent_id: object) -> str:
    """``agent_id`` when it can be an agent the bridge fronts; ConfigError otherwise."""
    if not isinstance(agent_id, str) or not _AGENT_ID.match(agent_id) or \
            not is_bridged(agent_id):
        raise ConfigError(f"the bridge fronts agents of its namespaces ({', '.join(BRIDGED)}"
                          f"...) only, not {str(agent_id)[:80]!r}")
    return agent_id


def is_bridged(agent_id: str) -> bool:
    """Whether ``agent_id`` names an agent the bridge fronts (of another protocol)."""
    return agent_id.startswith(BRIDGED)


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
    if identity == BRIDGE:
        return _bridge()
    if identity.startswith(PROTOCOL_PARTICIPANT):
        return _participant(check_owner(identity.removeprefix(PROTOCOL_PARTICIPANT)))
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


#: Seconds the bridge may stream answers to one prompt (the longest HMP deadline, 300 s,
#: with room for the question a partial answer asks the caller), and how many: the ack,
#: keep-alives, a progress note per step or tool call, the answer, the terminator.
_STREAM_TTL, _STREAM_MAX = 900.0, 10_000


def _bridge() -> Permissions:
    """The bridge's permissions: HMP as the agents it fronts (answers, heartbeats and dead
    letters as ``bridge``, requests as ``bridge``, its one consumer), and the Synadia Agent
    Protocol (our agents' prompt and status endpoints in the ``agents`` micro service,
    heartbeats, prompting other agents, the SDK's ``_INBOX.agents`` inbox). Answers to a
    prompt are a stream: up to ``_STREAM_MAX`` within ``_STREAM_TTL``."""
    durable = durable_of(BRIDGE)
    return Permissions(
        publish=(
            f"task.request.*.{BRIDGE}",          # requests of protocol callers, as itself
            f"reply.{BRIDGE}.>",                  # answers of the agents it fronts
            f"$HEALTHCHECK.{BRIDGE}",            # their heartbeats
            f"dead.{BRIDGE}",
            "log.>", "bad_json_log.>", "$DISCOVERY",
            f"hmp.enroll.{BRIDGE}",              # asks the core for its consumer
            f"$JS.API.CONSUMER.INFO.{TASKS}.*",
            f"$JS.API.CONSUMER.MSG.NEXT.{TASKS}.{durable}",
            f"$JS.ACK.{TASKS}.{durable}.>",
            *_SCHEMA_READS,
            # The Synadia Agent Protocol: heartbeats of the agents it hosts, prompting and
            # probing other agents, discovering them, its own identity (signed prompts).
            "agents.hb.*.*.*", "agents.prompt.*.*.*", "agents.status.*.*.*",
            "$SRV.*", "$SRV.*.agents", "$SRV.*.agents.>", "$SYS.REQ.USER.INFO"),
        subscribe=(
            f"{inbox_prefix(BRIDGE)}.>", "_INBOX.agents.>",
            f"reply.*.{BRIDGE}", f"reply.*.{BRIDGE}.>",
            "log.>",                             # notes of the tasks it sent, streamed back
            "agents.prompt.*.*.*", "agents.status.*.*.*", "agents.hb.*.*.*",
            "$SRV.*", "$SRV.*.agents", "$SRV.*.agents.>"),
        responses=True, response_max=_STREAM_MAX, response_ttl=_STREAM_TTL)


def check_owner(owner: str) -> str:
    """``owner`` when it can be a Synadia Agent Protocol owner token; ConfigError
    otherwise."""
    if not _OWNER.match(owner):
        raise ConfigError(f"owner {owner!r}: 1-60 lowercase letters, digits, - and _, "
                          "starting with a letter or digit (the protocol's owner token)")
    return owner


#: What every participant of the protocol may do: discover agents, prompt and probe
#: them, follow heartbeats, answer a query on the SDK's inbox, know its own identity.
_PROTOCOL_CALLER = ("agents.prompt.*.*.*", "agents.status.*.*.*", "$SRV.*",
                    "$SRV.*.agents", "$SRV.*.agents.>", "$SYS.REQ.USER.INFO")


def _participant(owner: str) -> Permissions:
    """A participant of the Synadia Agent Protocol: it hosts agents under ``owner`` only
    (their endpoints and heartbeats), calls any agent, and touches nothing of HMP."""
    return Permissions(
        publish=(*_PROTOCOL_CALLER, f"agents.hb.*.{owner}.*", "_INBOX.agents.>"),
        subscribe=(f"{inbox_prefix(PROTOCOL_PARTICIPANT + owner)}.>", "_INBOX.agents.>",
                   f"agents.prompt.*.{owner}.*", f"agents.status.*.{owner}.*",
                   "agents.hb.*.*.*", "$SRV.*", "$SRV.*.agents", "$SRV.*.agents.>"),
        responses=True, response_max=_STREAM_MAX, response_ttl=_STREAM_TTL)


def nsc_command(identity: str, account: str = "hermes") -> str:
    """The ``nsc add user`` command that makes ``identity`` on a NATS server of one's own
    (its permissions as ``permissions`` gives them)."""
    granted = permissions(identity)
    flags = [f"--allow-pub '{s}'" for s in granted.publish]
    flags += [f"--deny-pub '{s}'" for s in granted.publish_deny]
    flags += [f"--allow-sub '{s}'" for s in granted.subscribe]
    if granted.responses:
        flags.append(f"--allow-pub-response {granted.response_max}")
        if granted.response_ttl:
            flags.append(f"--response-ttl {granted.response_ttl:g}s")
    return f"nsc add user --account {account} --name {identity} \\\n    " + \
        " \\\n    ".join(flags)

"""How agents of other protocols are named on the hub, and ours in theirs.

A Synadia Agent Protocol agent ``agents.prompt.<agent>.<owner>.<session>`` is the hub agent
``sap-<agent>-<owner>-<session>``; a remote A2A agent is ``a2a-<name>``. Those namespaces are
the bridge's (``identity.BRIDGED``): no other identity speaks for an id in them. An id longer
than an agent id may be keeps its first 57 characters and a hash of the whole. Our agent
``claims_validator`` is the protocol agent ``claims-validator`` (its token: lowercase letters,
digits and ``-``), and its exact id rides in the registration's metadata (``hmp_agent_id``).
"""

from __future__ import annotations

import hashlib
import re

SAP, A2A = "sap-", "a2a-"
_MAX_ID = 64
_CAPABILITY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_VERBS = ("can_", "is_", "has_", "does_")


def _fit(agent_id: str) -> str:
    """``agent_id`` within an agent id's 64 characters (cut, with a hash of the whole)."""
    if len(agent_id) <= _MAX_ID:
        return agent_id
    digest = hashlib.sha256(agent_id.encode()).hexdigest()[:6]
    return f"{agent_id[:_MAX_ID - 7]}-{digest}"


def _token(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_") or "agent"


def sap_id(agent: str, owner: str, session: str) -> str:
    """The hub's id of the protocol agent ``agent``/``owner``/``session``."""
    return _fit(f"{SAP}{_token(agent)}-{_token(owner)}-{_token(session or 'default')}")


def a2a_id(name: str) -> str:
    """The hub's id of the remote A2A agent called ``name``."""
    return _fit(f"{A2A}{_token(name)}")


def protocol_agent(agent_id: str) -> str:
    """Our agent ``agent_id`` as a protocol agent token (lowercase, digits, ``-``)."""
    return re.sub(r"[^a-z0-9-]+", "-", agent_id.lower()).strip("-") or "agent"


def capability(text: str) -> str | None:
    """``text`` as a hub capability (a noun: ``claude_code`` for ``claude-code``), or None
    when nothing of it can be one."""
    name = re.sub(r"[^a-z0-9_]+", "_", text.strip().lower()).strip("_")
    if name and not name[0].isalpha():
        name = f"agent_{name}"
    name = name[:64]
    if not _CAPABILITY.match(name) or name.startswith(_VERBS):
        return None
    return name


def capabilities(*texts: str) -> tuple[str, ...]:
    """Each of ``texts`` that can be a capability, as one, once, in order."""
    found = (capability(t) for t in texts)
    return tuple(dict.fromkeys(c for c in found if c))

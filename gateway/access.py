"""Who may do what: the access policy (who may talk to the bot, where, and when it should
answer at all) and the roles (what a ``channel:user`` identity may do)."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from adapters.base import InboundMessage
from agent_core.tools.context import ALL_PERMISSIONS

from .settings import GatewaySettings

Verdict = Literal["allow", "refuse", "ignore"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a message, and why (for logs)."""

    verdict: Verdict
    reason: str


class AccessPolicy:
    """Allowlists of users, spaces (workspaces, groups) and rooms (channels); DMs on/off;
    in group spaces the bot only answers when addressed.

    Entries are ``channel:id`` (``slack:U123``, ``telegram:-100123``, ``slack:C9``); an
    empty list allows everyone. A user not on a configured user allowlist is refused once,
    politely.
    """

    def __init__(self, *, users: list[str], spaces: list[str], rooms: list[str],
                 allow_dms: bool) -> None:
        self.users = frozenset(users)
        self.spaces = frozenset(spaces)
        self.rooms = frozenset(rooms)
        self.allow_dms = allow_dms

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> AccessPolicy:
        """The policy the settings describe."""
        return cls(users=settings.hermes_allowed_users, spaces=settings.hermes_allowed_spaces,
                   rooms=settings.hermes_allowed_rooms, allow_dms=settings.hermes_allow_dms)

    def check(self, msg: InboundMessage) -> Decision:
        """allow, refuse (say no once) or ignore (stay silent)."""
        if msg.channel in ("api", "webchat", "schedule", "webhook"):
            return Decision("allow", f"{msg.channel} callers are authenticated upstream")
        if not msg.is_direct and not msg.mentions_bot:
            return Decision("ignore", "a group message that does not address the bot")
        if self.spaces and msg.space_id and f"{msg.channel}:{msg.space_id}" not in self.spaces:
            return Decision("ignore", f"space {msg.space_id!r} is not allowed")
        if self.rooms and not msg.is_direct and f"{msg.channel}:{msg.room_id}" not in self.rooms:
            return Decision("ignore", f"room {msg.room_id!r} is not allowed")
        if msg.is_direct and not self.allow_dms:
            return Decision("refuse", "direct messages are turned off")
        if self.users and f"{msg.channel}:{msg.user_id}" not in self.users:
            return Decision("refuse", f"user {msg.user_id!r} is not on the allowlist")
        return Decision("allow", "allowed")


class Roles:
    """Roles of identities (``channel:user``, matched against HERMES_ROLES patterns, the
    first role that matches wins) and the permissions each grants."""

    def __init__(self, *, roles: dict[str, list[str]], default: str,
                 permissions: dict[str, list[str]]) -> None:
        self.roles = roles
        self.default = default
        self.permissions = permissions

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Roles:
        """The roles the settings describe."""
        return cls(roles=settings.hermes_roles, default=settings.hermes_default_role,
                   permissions=settings.hermes_role_permissions)

    def role_of(self, identity: str) -> str:
        """The role of ``channel:user`` (the first role with a matching pattern)."""
        for role, patterns in self.roles.items():
            if any(fnmatchcase(identity, p) for p in patterns):
                return role
        return self.default

    def role_of_sender(self, msg: InboundMessage) -> str:
        """The role of a message's sender: what its credential proved (an API key's), or
        what HERMES_ROLES gives its identity."""
        return msg.role or self.role_of(f"{msg.channel}:{msg.user_id}")

    def permissions_of(self, role: str) -> frozenset[str]:
        """The permissions a role grants (none for an unknown role)."""
        return frozenset(self.permissions.get(role, ()))

    def is_admin(self, role: str) -> bool:
        """Whether ``role`` holds every permission ("*"): it sees every conversation, the
        audit log, every schedule."""
        return ALL_PERMISSIONS in self.permissions_of(role)

    def grants(self, role: str, permission: str) -> bool:
        """Whether ``role`` holds ``permission``."""
        granted = self.permissions_of(role)
        return ALL_PERMISSIONS in granted or permission in granted

    def allows(self, identity: str, permission: str) -> bool:
        """Whether ``channel:user`` holds ``permission`` through their role (the same rule
        as ``ToolContext.allows``: "*" holds every permission)."""
        return self.grants(self.role_of(identity), permission)

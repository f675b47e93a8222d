"""Who is calling the HTTP API: the bearer token proves a principal and its role.

A caller's identity never comes from what it says (a header, a body field): a key of
``HERMES_API_KEYS`` names its principal (``user``), its ``role`` and the users it may act
for (``act_as``). With no keys configured the gateway keeps a local token (``<data
dir>/local-token``, 0600, made at first start) that proves the operator of this machine:
the principal ``local``, role admin (it may act for any user), accepted only from a local
client. The web chat page
gets it from a same-origin-only route (``guard.py`` says what that means).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from agent_core.store.embedded import kept_secret

from .settings import GatewaySettings

#: The principal of the local token: the operator of this machine.
LOCAL = "local"
#: The role the local token holds.
LOCAL_ROLE = "admin"
TOKEN_FILE = "local-token"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a credential proves the caller to be."""

    name: str
    role: str
    #: Patterns of the users this principal may act for (``X-Hermes-User``, ``user_id``).
    act_as: tuple[str, ...] = ()
    #: The local token's principal, valid only from this machine.
    local: bool = False

    def may_act_as(self, user: str) -> bool:
        """Whether this principal may speak for ``user`` (itself always)."""
        return user == self.name or any(fnmatchcase(user, p) for p in self.act_as)


class Credentials:
    """The bearer tokens this gateway accepts, each with its principal."""

    def __init__(self, keys: list[tuple[str, Principal]]) -> None:
        self._keys = [(token.encode(), principal) for token, principal in keys]

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Credentials:
        """The keys of HERMES_API_KEYS; with none, the local token."""
        if settings.hermes_api_keys:
            return cls([(k.key.get_secret_value(),
                         Principal(k.user, k.role, tuple(k.act_as)))
                        for k in settings.hermes_api_keys])
        return cls([(local_token(settings.hermes_data_dir),
                     Principal(LOCAL, LOCAL_ROLE, ("*",), local=True))])

    @property
    def keyless(self) -> bool:
        """No HERMES_API_KEYS: only the local token is accepted."""
        return all(p.local for _, p in self._keys)

    def principal(self, token: str) -> Principal | None:
        """The principal ``token`` proves, or None. Every key is compared (in constant
        time each), so the time taken says nothing about which one was close."""
        raw, found = token.encode(), None
        for key, principal in self._keys:
            if hmac.compare_digest(raw, key):
                found = principal
        return found

    def local_token(self) -> str | None:
        """The local token, when this gateway is keyless."""
        for key, principal in self._keys:
            if principal.local:
                return key.decode()
        return None


def local_token(data_dir: Path) -> str:
    """The local token of a data directory (made at first use, kept 0600)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / TOKEN_FILE
    token = kept_secret(path)
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return token

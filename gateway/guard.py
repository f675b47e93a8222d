"""The checks every request passes at the gateway's edge, before any handler.

1. **Host.** A browser sends the name it resolved in ``Host``. A page whose name an
   attacker re-binds to 127.0.0.1 (DNS rebinding) therefore arrives with the attacker's
   name, and is refused: only this connection's own address and the loopback names (with
   the port the connection came in on), ``HERMES_PUBLIC_URL``'s host and the names of
   ``HERMES_ALLOWED_HOSTS`` are served. Health probes (a kubelet asks by pod address) and
   the platforms' signed webhooks (a forged one fails its signature) are exempt.
2. **Origin.** A state-changing request (POST, PUT, PATCH, DELETE) that a browser sends from
   another site carries that site's ``Origin`` or ``Sec-Fetch-Site: cross-site``: refused,
   so a cross-site form cannot press anything (CSRF). Clients that are not browsers send
   neither and are judged by their credential alone.
3. **Credential.** ``/agent/*``, ``/metrics`` and the A2A edge's calls need a bearer token
   (``auth.py``); the local token only from a local client.

A client is local when it connects over loopback and its request was not forwarded by a
proxy: a request from a loopback peer that carries ``X-Forwarded-For`` (or ``Forwarded``,
``X-Real-IP``) came through a proxy on this host, so it is not local, unless the proxy is in
``HERMES_TRUSTED_PROXIES``, whose forwarded address then names the client.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from .auth import Credentials, Principal
from .settings import GatewaySettings

log = logging.getLogger(__name__)

PRINCIPAL = web.RequestKey("principal", Principal)
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_FORWARDED = ("X-Forwarded-For", "Forwarded", "X-Real-IP")
#: Paths whose requests prove themselves (a signature, a secret token) or say nothing.
_PROBES = frozenset({"/healthz", "/readyz"})
_SIGNED = ("/slack/events", "/telegram/webhook")


def is_loopback(host: str | None) -> bool:
    """Whether an address (or host name) is this machine."""
    if not host:
        return False
    if host in _LOOPBACK_NAMES:  # what almost every local caller is: no address parsing
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def protected(path: str) -> bool:
    """/agent/*, /metrics and the A2A edge's calls (its agent cards are public: they say
    how to authenticate)."""
    return path.startswith("/agent/") or path == "/metrics" or (
        path.startswith("/a2a/") and not path.endswith("/.well-known/agent-card.json"))


def _signed(request: web.Request) -> bool:
    """A platform's webhook, which proves itself by its signature."""
    path = request.path
    return path in _SIGNED or (path.startswith("/webhook/") and request.method == "POST"
                               and path.count("/") == 2)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused, and with which status."""

    status: int
    reason: str
    challenge: bool = False

    def response(self) -> web.Response:
        """The JSON answer."""
        headers = {"WWW-Authenticate": 'Bearer realm="hermes"'} if self.challenge else None
        return web.json_response({"error": self.reason}, status=self.status, headers=headers)


class Guard:
    """Host, origin and credential checks of one gateway's settings."""

    def __init__(self, settings: GatewaySettings, credentials: Credentials) -> None:
        self.credentials = credentials
        names = {h.lower().rstrip(".") for h in settings.hermes_allowed_hosts}
        public = urlsplit(settings.hermes_public_url or "").hostname
        if public:
            names.add(public.lower())
        self.names = frozenset(names)
        self.proxies = tuple(ipaddress.ip_network(p, strict=False)
                             for p in settings.hermes_trusted_proxies)
        self._warned = False

    def refuse(self, request: web.Request) -> Refusal | None:
        """Why ``request`` may not go on (None: it may; its principal is then set)."""
        path = request.path
        if path in _PROBES or _signed(request):
            return None
        if not self.host_allowed(request):
            return Refusal(421, f"this gateway does not answer to the host "
                                f"{request.headers.get('Host', '')[:100]!r}; name it in "
                                "HERMES_ALLOWED_HOSTS or HERMES_PUBLIC_URL")
        if request.method in _CHANGES and self.cross_site(request):
            return Refusal(403, "cross-site requests may not change anything here")
        if protected(path):
            return self.authenticate(request)
        return None

    # --- host ----------------------------------------------------------------------------
    def host_allowed(self, request: web.Request) -> bool:
        """Whether the request names this gateway in its Host header."""
        host = request.headers.get("Host")
        if host is None:
            return True  # no browser sends a request without one
        name, port = split_host(host)
        if name is None:
            return False
        if name in self.names:
            return True
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        if not sock or (port or (443 if request.secure else 80)) != sock[1]:
            return False
        # This connection's own address or a loopback name, with its own port: what a
        # rebinding page cannot send, since its Host is the attacker's name.
        return name in _LOOPBACK_NAMES or name == str(sock[0]).lower() or is_loopback(name)

    # --- origin --------------------------------------------------------------------------
    def cross_site(self, request: web.Request) -> bool:
        """Whether a browser sent this request from another site."""
        origin = request.headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            if origin == "null" or not parts.hostname:
                return True
            name, port = split_host(request.headers.get("Host", ""))
            origin_port = parts.port or (443 if parts.scheme == "https" else 80)
            # Behind a proxy the Host may carry no port while the Origin's is 443: then the
            # name decides. A browser always writes a port that is not its scheme's default.
            return name != parts.hostname.lower().rstrip(".") or \
                (port is not None and port != origin_port)
        fetch_site = request.headers.get("Sec-Fetch-Site")
        return fetch_site is not None and fetch_site not in ("same-origin", "none")

    # --- the client ----------------------------------------------------------------------
    def client(self, request: web.Request) -> tuple[str | None, bool]:
        """The client's address and whether a proxy forwarded the request without being
        trusted (the client is then unknown)."""
        remote = request.remote
        forwarded = any(h in request.headers for h in _FORWARDED)
        if not forwarded:
            return remote, False
        if self._trusted(remote):
            hops = [h.strip() for h in ",".join(
                request.headers.getall("X-Forwarded-For", [])).split(",") if h.strip()]
            for hop in reversed(hops):
                if not self._trusted(hop):
                    return hop, False
            return (hops[0] if hops else remote), False
        if not self._warned:
            self._warned = True
            log.warning("requests from %s carry proxy headers (%s) but it is not in "
                        "HERMES_TRUSTED_PROXIES: they are not treated as local", remote,
                        ", ".join(h for h in _FORWARDED if h in request.headers))
        return remote, True

    def is_local(self, request: web.Request) -> bool:
        """Whether the client is on this machine (and not behind an untrusted proxy)."""
        address, untrusted = self.client(request)
        return not untrusted and is_loopback(address)

    def _trusted(self, address: str | None) -> bool:
        if not address or not self.proxies:
            return False
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return False
        return any(ip in network for network in self.proxies)

    # --- the credential --------------------------------------------------------------------
    def authenticate(self, request: web.Request) -> Refusal | None:
        """Set the caller's principal from its bearer token, or say why not."""
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not token and request.path.endswith("/events"):
            token = request.query.get("access_token", "")  # EventSource cannot set headers
        keyless = self.credentials.keyless
        if keyless and not self.is_local(request):
            return Refusal(403, "the API is open only to this machine until HERMES_API_KEYS "
                                "is set")
        principal = self.credentials.principal(token) if token else None
        if principal is None:
            reason = ("missing or invalid bearer token: this gateway has no HERMES_API_KEYS, "
                      "so send its local token (the file local-token in its data directory)"
                      if keyless else "missing or invalid bearer token")
            return Refusal(401, reason, challenge=True)
        request[PRINCIPAL] = principal
        return None


def split_host(host: str) -> tuple[str | None, int | None]:
    """(lower-case name, the port it names or None) of a Host header; (None, None) when
    it is not one."""
    try:
        parts = urlsplit(f"//{host}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return None, None
    if not name or parts.username is not None or parts.path:
        return None, None
    return name.rstrip("."), port

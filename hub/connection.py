"""The connection to NATS: NATS_URL (several servers, TLS, credentials) or the embedded
server, and a first connection that says why it failed instead of trying for ever.

nats-py retries a first connection without end when reconnecting is unlimited, and after
a failed TLS handshake or a refused login it waits for the closed TLS stream, which never
comes. So the first connection tries each server a few times, gives up at once on what
will not fix itself (a certificate the CA does not vouch for, wrong credentials), and
names the servers (without their credentials) and the reason. Once connected, an outage
is waited out for as long as it takes.

Each process connects as an identity (``identity``): with the embedded server, the
credentials of that identity kept under the data directory; with ``NATS_URL``, those of
``NATS_CREDS_FILE``. Its inbox is its own (``_INBOX.<identity>``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nats.aio.client import Client
from nats.errors import AuthorizationError, NoServersError

from agent_core import ConfigError

from .errors import HubUnreachable
from .identity import CORE, inbox_prefix
from .server import EmbeddedNats
from .settings import HubSettings

log = logging.getLogger(__name__)

#: Tries of each server before a first connection is given up.
_FIRST_ATTEMPTS = 2
_CONNECT_TIMEOUT = 5.0
#: Failures no retry mends.
_PERMANENT = (ssl.SSLError, AuthorizationError)
_TELLING = ("SSL", "Authorization")


def shared_identity(settings: HubSettings) -> bool:
    """Whether every process shares one login (NATS_URL with a token, a password or
    nothing, and no NATS_CREDS_FILE): then nothing tells one identity from another, and
    every client holding that login is trusted as the hub's core."""
    return bool(settings.nats_url) and not settings.nats_creds_file


async def open_connection(settings: HubSettings, identity: str = CORE
                          ) -> tuple[Client, EmbeddedNats | None]:
    """A client connected as ``identity``, and the embedded server when this process
    started it."""
    _check_files(settings)
    embedded = None
    if settings.nats_url:
        servers = [u.get_secret_value() for u in settings.nats_url]
        creds = settings.nats_creds_file
    else:
        embedded = EmbeddedNats(settings.hermes_data_dir)
        servers = [(await embedded.start()).url]
        creds = str(await asyncio.to_thread(embedded.creds, identity))
    try:
        return await _connect(servers, settings, creds=creds, identity=identity), embedded
    except BaseException:
        if embedded is not None:
            await embedded.stop()
        raise


async def _connect(servers: list[str], settings: HubSettings, *, creds: str | None,
                   identity: str) -> Client:
    options: dict[str, Any] = {"name": f"hermes-hub {identity}",
                               "connect_timeout": _CONNECT_TIMEOUT,
                               "max_reconnect_attempts": _FIRST_ATTEMPTS,
                               "reconnect_time_wait": 0.5,
                               "inbox_prefix": inbox_prefix(identity)}
    if creds:
        options["user_credentials"] = creds
    tls = tls_context(settings)
    if tls is not None:
        options["tls"] = tls
    failures: list[str] = []
    connected = False
    hopeless = asyncio.Event()

    async def on_error(exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if connected:  # a lost connection, a slow consumer: nats-py reconnects by itself
            log.warning("NATS: %s", text)
            return
        failures.append(text)
        if isinstance(exc, _PERMANENT):
            hopeless.set()

    nc = Client()
    connecting = asyncio.ensure_future(nc.connect(servers, **options, error_cb=on_error))
    giving_up = asyncio.ensure_future(hopeless.wait())
    budget = len(servers) * (_FIRST_ATTEMPTS + 1) * (_CONNECT_TIMEOUT + 1)
    try:
        await asyncio.wait({connecting, giving_up}, timeout=budget,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        giving_up.cancel()
    if connecting.done() and connecting.exception() is None:
        connected = True
        nc.options.update(max_reconnect_attempts=-1, reconnect_time_wait=2.0)
        return nc
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(nc.close(), 1.0)
    error = None if connecting.cancelled() else connecting.exception()
    if error is not None and not isinstance(error, NoServersError):
        failures.append(f"{type(error).__name__}: {error}")
    # Every distinct reason, the telling ones first (a reset can hide a refused login).
    reasons = sorted(dict.fromkeys(failures), key=lambda r: not r.startswith(_TELLING))
    reason = "; ".join(reasons) if reasons else f"no answer within {budget:g} s"
    raise HubUnreachable(f"cannot connect to NATS at {', '.join(map(public_url, servers))}: "
                         f"{reason}")


def _check_files(settings: HubSettings) -> None:
    """The files the settings name exist (said before anything is tried)."""
    for name in ("nats_creds_file", "nats_tls_ca_file", "nats_tls_cert_file",
                 "nats_tls_key_file"):
        path = getattr(settings, name)
        if path and not Path(path).is_file():
            raise ConfigError(f"{name.upper()}={path}: no such file")


def tls_context(settings: HubSettings) -> ssl.SSLContext | None:
    """The TLS context NATS_TLS_* describe, or None for nats-py's default."""
    if not (settings.nats_tls_ca_file or settings.nats_tls_cert_file):
        return None
    context = ssl.create_default_context(cafile=settings.nats_tls_ca_file)
    if settings.nats_tls_cert_file:
        context.load_cert_chain(settings.nats_tls_cert_file, settings.nats_tls_key_file)
    return context


def public_url(url: str) -> str:
    """``url`` without its credentials (user, password or token)."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}"

"""Trust stores read at a context's first TLS handshake, not when it is built.

Reading the system's CA bundle into an ``ssl.SSLContext`` costs ~45 ms and ~2.3 MB here
(~0.8 MB for each further context), and aiohttp does it twice as it is imported: its
default verified context and the unverified one ``ssl=False`` selects. A process that
speaks only plain HTTP (a local model, the embedded stores, the web chat) never uses
either, and one that does uses them after start-up.

:class:`DeferredTrust` is an ``ssl.SSLContext`` that records the calls that load trust
(``load_default_certs``, ``set_default_verify_paths``, ``load_verify_locations``) made
while it was built and makes them, in order and once, before its first handshake
(``wrap_bio``, which asyncio's, uvloop's and anyio's TLS call, or ``wrap_socket``) or first
look at its store: the same files and the same verification, read when first needed.
aiohttp's two default contexts are such contexts when aiohttp is imported after
``agent_core`` (:func:`defer_default_contexts`, an import hook of ``agent_core.lean``);
:func:`tls_client_context` is the verified one, for clients of other libraries to share
one trust store.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

_LOADERS = ("load_default_certs", "set_default_verify_paths", "load_verify_locations")
_LOCK = threading.Lock()


Call = tuple[str, tuple[Any, ...], dict[str, Any]]


class DeferredTrust(ssl.SSLContext):
    """A context whose trust is loaded at its first handshake (see the module's text)."""

    _pending: list[Call] | None = None
    _ready = True

    @classmethod
    def adopt(cls, ctx: ssl.SSLContext, pending: list[Call]) -> DeferredTrust:
        """Make a built context (a plain ``ssl.SSLContext``) defer these trust loads."""
        ctx.__class__ = cls
        assert isinstance(ctx, cls)
        ctx._pending, ctx._ready = list(pending), False
        return ctx

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if self._pending is None:
            return False
        self._pending.append((name, args, kwargs))
        return True

    def load_default_certs(self, *args: Any, **kwargs: Any) -> None:
        if not self._record("load_default_certs", args, kwargs):
            super().load_default_certs(*args, **kwargs)

    def set_default_verify_paths(self) -> None:
        if not self._record("set_default_verify_paths", (), {}):
            super().set_default_verify_paths()

    def load_verify_locations(self, *args: Any, **kwargs: Any) -> None:
        if not self._record("load_verify_locations", args, kwargs):
            super().load_verify_locations(*args, **kwargs)

    def trust(self) -> None:
        """Make the recorded loads now; later calls do nothing."""
        if not self._ready:
            self._load()

    def _load(self) -> None:
        with _LOCK:  # a second thread's first handshake waits for the first's load
            if self._ready:
                return
            pending, self._pending = self._pending or [], None
            for name, args, kwargs in pending:
                getattr(self, name)(*args, **kwargs)
            self._ready = True

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self.trust()
        return super().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self.trust()
        return super().wrap_socket(*args, **kwargs)

    def get_ca_certs(self, *args: Any, **kwargs: Any) -> Any:
        self.trust()
        return super().get_ca_certs(*args, **kwargs)

    def cert_store_stats(self) -> dict[str, int]:
        self.trust()
        return super().cert_store_stats()


@contextmanager
def _loads_recorded(calls: list[tuple[ssl.SSLContext, Call]]) -> Iterator[None]:
    """The trust loads of every context in this block are recorded instead of made."""
    cls: Any = ssl.SSLContext
    saved = {name: cls.__dict__.get(name) for name in _LOADERS}

    def recorder(name: str) -> Any:
        def record(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
            calls.append((self, (name, args, kwargs)))
        return record

    for name in _LOADERS:
        setattr(cls, name, recorder(name))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                delattr(cls, name)
            else:
                setattr(cls, name, value)


def defer_default_contexts(execute: Callable[[], None], module: ModuleType) -> None:
    """Run aiohttp.connector's code (``execute``) with its trust loads recorded; its two
    default contexts then defer theirs (``agent_core.lean`` calls this at that import)."""
    calls: list[tuple[ssl.SSLContext, Call]] = []
    with _loads_recorded(calls):
        execute()
    adopted: list[ssl.SSLContext] = []
    for name in ("_SSL_CONTEXT_VERIFIED", "_SSL_CONTEXT_UNVERIFIED"):
        ctx = getattr(module, name, None)
        if type(ctx) is ssl.SSLContext:
            adopted.append(DeferredTrust.adopt(ctx, [call for c, call in calls if c is ctx]))
    for ctx, (name, args, kwargs) in calls:  # any other context (none now): loaded now
        if not any(ctx is c for c in adopted):
            getattr(ctx, name)(*args, **kwargs)


def tls_client_context() -> ssl.SSLContext:
    """The process's verified client context: aiohttp's default one (the system's trust
    store, or SSL_CERT_FILE / SSL_CERT_DIR), which aiohttp's clients already use."""
    from aiohttp import connector

    ctx: ssl.SSLContext = connector._SSL_CONTEXT_VERIFIED
    return ctx

"""What a process should not import, or do as it imports.

Import hooks, installed by ``import agent_core`` (:func:`install`) and each run once,
at the import of one third-party module, when that comes after ``agent_core``'s:

- ``aiohttp.connector`` builds two SSL contexts, each reading the CA bundle (~45 ms and
  ~3 MB in all); they read it at their first handshake instead (``agent_core._tls``);
- ``redis.observability.providers`` imports OpenTelemetry's metrics SDK, when it is
  installed (the ``otel`` extra, and so the Docker image), only to annotate a type with
  it: ~50 modules, ~2 MB and 40-100 ms here in every process that imports redis-py. It
  runs as it does without the SDK; redis-py's metrics, turned on, import it themselves;
- ``frozenlist`` (aiohttp's signal lists, frozen at start-up) picks its C++ build, which
  loads libstdc++ (~0.8 MB resident); it gets its pure-Python FrozenList, the same class
  (``FROZENLIST_NO_EXTENSIONS``, its own switch, set while it is imported unless the
  environment sets it): ~0.1 µs more to iterate one, a few times a request;
- ``telegram`` (python-telegram-bot) imports ``cryptography.hazmat``, when cryptography is
  installed (other packages bring it), for Telegram Passport only, which needs a bot's
  private key (never given here): its bindings and their own OpenSSL, ~7.5 MB resident
  in a gateway with a Telegram channel. It imports as it does without cryptography
  (passports are not decrypted). redis-py's own ``import cryptography`` (a flag, for OCSP
  checks, which import the rest when used) loads none of that.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from importlib.machinery import PathFinder
from typing import Any

#: ``around(execute, module)``: runs the module's code by calling ``execute()``.
Around = Callable[[Callable[[], None], types.ModuleType], None]

def _without(name: str) -> Around:
    """A hook under which importing ``name`` raises ImportError, as if it were not
    installed (unless it is imported already: then there is nothing to spare)."""

    def around(execute: Callable[[], None], module: types.ModuleType) -> None:
        if name in sys.modules:
            execute()
            return
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
        try:
            execute()
        finally:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]

    return around


def _pure_frozenlist(execute: Callable[[], None], module: types.ModuleType) -> None:
    if "FROZENLIST_NO_EXTENSIONS" in os.environ:  # the environment's choice stands
        execute()
        return
    os.environ["FROZENLIST_NO_EXTENSIONS"] = "1"
    try:
        execute()
    finally:
        os.environ.pop("FROZENLIST_NO_EXTENSIONS", None)


def _defer_trust(execute: Callable[[], None], module: types.ModuleType) -> None:
    from ._tls import defer_default_contexts

    defer_default_contexts(execute, module)


HOOKS: dict[str, Around] = {
    "aiohttp.connector": _defer_trust,
    "redis.observability.providers": _without("opentelemetry.sdk.metrics"),
    "frozenlist": _pure_frozenlist,
    "telegram": _without("cryptography.hazmat"),
}


class _Loader:
    """A module's own loader, its code run inside a hook."""

    def __init__(self, loader: Any, around: Around) -> None:
        self._loader, self._around = loader, around

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._around(lambda: self._loader.exec_module(module), module)


class _Finder:
    """Wraps the loaders of the hooked modules not imported yet, once each."""

    def __init__(self) -> None:
        self.pending: dict[str, Around] = {}

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        around = self.pending.pop(name, None)
        if around is None:
            return None
        if not self.pending:
            uninstall()
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, around)  # type: ignore[assignment]
        return spec


_FINDER = _Finder()


def install() -> None:
    """Hook the modules of ``HOOKS`` that are not imported yet."""
    _FINDER.pending = {name: around for name, around in HOOKS.items()
                       if name not in sys.modules}
    if _FINDER.pending and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def skip_httpx_cli() -> None:
    """Keep httpx from importing its command-line client.

    ``import httpx`` imports ``httpx._main`` (rich, click, pygments: ~80 modules, ~4 MB of
    memory and ~100 ms here) whenever click is installed, and the MCP SDK brings click (its
    uvicorn needs it). python-telegram-bot, the MCP SDK and a2a-sdk import httpx; none of
    them, nor we, call its command line. The console script calls this before anything
    imports httpx; ``httpx.main`` then says to run the ``httpx`` command instead."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    module = types.ModuleType("httpx._main", "httpx's command line, not loaded here")

    def main(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("httpx's command line is not loaded in this process "
                           "(agent_core.lean.skip_httpx_cli); run the httpx command")

    module.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = module

"""How ``serve`` runs the aiohttp application: aiohttp's own runner and site, with two limits
aiohttp does not have.

- A request's head (its request line and headers) must arrive within
  ``HERMES_HEADER_TIMEOUT`` seconds of its first byte; a client that trickles it in is
  answered 408 and closed. (aiohttp waits for a head as long as its keep-alive timeout
  allows, and only for a connection that has been idle since its last response.)
- A process holds at most ``HERMES_MAX_CONNECTIONS`` connections. At the cap a new one
  closes the oldest idle one (waiting for a request, nothing of one received), as a
  browser's spare keep-alive connections are; when none is idle it is answered 503 and
  closed.

Idle connections are closed after :data:`KEEPALIVE_TIMEOUT` seconds, aiohttp's default for
``run_app``. :func:`serve` is ``web.run_app`` with this runner: SIGINT and SIGTERM stop it
gracefully, open requests get ``shutdown_timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)

#: Seconds an idle keep-alive connection is kept (longer than the 60 s proxies use for
#: their upstream connections, so that the proxy, not us, closes one first).
KEEPALIVE_TIMEOUT = 75.0

_TOO_SLOW = (b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
_BODY = b'{"error": "too many connections; retry shortly"}'
_TOO_MANY = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
             % (len(_BODY), _BODY))


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits of one serving process's connections."""

    header_timeout: float = 10.0
    max_connections: int = 1000


class GuardedHandler(RequestHandler):
    """aiohttp's protocol for one connection, with a deadline on each request's head."""

    __slots__ = ("_head_timeout", "_head_timer")

    def __init__(self, manager: GuardedServer, *, head_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        """Waiting for a request, with nothing of one received."""
        return (self._head_timer is None and not self._messages and not self._force_close
                and not getattr(self, "_request_in_progress", False))

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and not getattr(self, "_request_in_progress", False) \
                and not self._upgraded and b"\r\n\r\n" not in data:
            # The first bytes of a head, not all of it: the rest is due by the deadline. (A
            # head that came whole, as almost every one does, needs no timer: one less
            # to set and cancel per request.)
            self._head_timer = self._loop.call_later(self._head_timeout, self._too_slow)
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._head_timer = None
        if self.transport is not None and not self.transport.is_closing():
            log.debug("closing a connection whose request head took over %gs",
                      self._head_timeout)
            self.transport.write(_TOO_SLOW)
        self.force_close()


class GuardedServer(web.Server):
    """aiohttp's low-level server making :class:`GuardedHandler` connections, at most
    ``limits.max_connections`` of them."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        #: Connections refused at the cap, and idle ones closed to make room.
        self.refused = 0
        self.evicted = 0

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, head_timeout=self.limits.header_timeout,
                              **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if len(self._connections) <= self.limits.max_connections:
            return
        # The oldest idle connection makes room (the dict keeps them in order of arrival).
        for other in self._connections:
            if other is not handler and isinstance(other, GuardedHandler) and other.idle:
                self.evicted += 1
                other.force_close()
                return
        self.refused += 1
        if self.refused == 1 or self.refused % 1000 == 0:
            log.warning("HTTP connections at HERMES_MAX_CONNECTIONS (%d): refusing new ones "
                        "(%d so far)", self.limits.max_connections, self.refused)
        transport.write(_TOO_MANY)
        handler.force_close()


class GuardedRunner(web.AppRunner):
    """aiohttp's runner of an application, serving it through :class:`GuardedServer`."""

    def __init__(self, app: web.Application, *, limits: ConnectionLimits,
                 **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=KEEPALIVE_TIMEOUT, **kwargs)
        self.limits = limits

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # the application started, and its server
        # The same server, as the guarded kind: its handler, request factory and the
        # connections' options (aiohttp keeps those in ``_kwargs``).
        return GuardedServer(made.request_handler, request_factory=made.request_factory,
                             handler_cancellation=made.handler_cancellation,
                             loop=asyncio.get_running_loop(), limits=self.limits,
                             **made._kwargs)


def serve(app: web.Application, *, host: str, port: int, limits: ConnectionLimits,
          loop: asyncio.AbstractEventLoop, shutdown_timeout: float, backlog: int,
          reuse_port: bool) -> None:
    """Serve ``app`` on ``host:port`` until SIGINT or SIGTERM (``web.run_app``, guarded)."""

    async def main() -> None:
        runner = GuardedRunner(app, limits=limits, access_log=None,
                               shutdown_timeout=shutdown_timeout, handle_signals=True)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, backlog=backlog,
                              reuse_port=reuse_port).start()
            await asyncio.Event().wait()  # until a signal ends the loop's run
        finally:
            await runner.cleanup()

    asyncio.set_event_loop(loop)
    task = loop.create_task(main())
    try:
        loop.run_until_complete(task)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        try:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(task)
        finally:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still running, as asyncio.run does on its way out."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler({"message": "unhandled exception at shutdown",
                                         "exception": task.exception(), "task": task})

"""Several serving processes on one port, for machines with more than one core.

One Python process uses one core. ``serve --processes N`` (HERMES_PROCESSES) runs N
gateways bound to the same address with SO_REUSEPORT, so the kernel spreads incoming
connections across them; they share the store (the first one's embedded Valkey, or
REDIS_URL) like replicas on several machines do, so every queue, lock and lease works
across them unchanged. Each has its own HERMES_WORKERS.

The first process is the parent. It starts its gateway (and with it the embedded store),
then the others, as ``serve --child``; they find the store running and reuse it. A child
that dies is started again a second later; one that dies again within a minute, after a
delay that doubles each time up to a minute (a child that cannot start does not spin). Its
share of the live gauges leaves the metrics' sums; the conversations it held are taken up
by the others when their leases run out. On SIGTERM the parent stops the others first and its
store last. A child whose parent is gone (killed outright) stops itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

from aiohttp import web

from agent_core import ConfigError

from .metrics import forget_process

log = logging.getLogger(__name__)

#: The line a child prints on stdout once it serves.
READY = "hermes-gateway: serving"
#: Seconds a child has to start; then the parent gives up on it.
START_TIMEOUT = 60.0
#: The delay before a dead child is started again: the first, and the longest it doubles
#: to while children keep dying young (seconds).
RESTART_DELAY = (1.0, 60.0)
#: A child that lived this long (seconds) died of something else than its start: the next
#: one starts after the first delay again.
STABLE_AFTER = 60.0

Child = asyncio.subprocess.Process


class Siblings:
    """The parent's view of the other serving processes: starts them, starts again any
    that dies, stops them."""

    def __init__(self, count: int, host: str, port: int, *, stop_timeout: float) -> None:
        self.count = count
        self.host = host
        self.port = port
        self.stop_timeout = stop_timeout
        self.children: list[Child] = []
        self._keepers: list[asyncio.Task[None]] = []

    def attach(self, app: web.Application) -> None:
        """Start the others once this process serves, and keep them running; stop them
        before it stops."""

        async def start(_: web.Application) -> None:
            await self.start()

        async def stop(_: web.Application) -> None:
            await self.stop()

        app.on_startup.append(start)
        app.on_shutdown.append(stop)

    async def start(self) -> None:
        """Start ``count - 1`` children, wait until each serves, then watch them."""
        for _ in range(self.count - 1):
            self.children.append(await self._spawn())
        for child in self.children:
            await _ready(child)
        self._keepers = [asyncio.create_task(self._keep(slot))
                         for slot in range(len(self.children))]
        log.info("serving from %d processes (pids %s)", self.count,
                 ", ".join(str(p) for p in [os.getpid(), *(c.pid for c in self.children)]))

    async def stop(self) -> None:
        """SIGTERM every child and wait for it; kill what outlives the timeout."""
        for keeper in self._keepers:
            keeper.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)
        for child in self.children:
            if child.returncode is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for child in self.children:
            try:
                await asyncio.wait_for(child.wait(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                log.warning("serving process %d did not stop in time; killing it", child.pid)
                child.kill()
                await child.wait()

    async def _keep(self, slot: int) -> None:
        """Start the child in ``slot`` again whenever it dies."""
        first, longest = RESTART_DELAY
        delay, born = first, time.monotonic()
        while True:
            dead = self.children[slot]
            code = await dead.wait()
            if time.monotonic() - born >= STABLE_AFTER:
                delay = first
            log.warning("serving process %d %s; starting another in %g s", dead.pid,
                        f"was killed by signal {-code}" if code < 0 else f"exited ({code})",
                        delay)
            forget_process(dead.pid)  # its live gauges; its counters stay counted
            await asyncio.sleep(delay)
            delay, born = min(delay * 2, longest), time.monotonic()
            self.children[slot] = child = await self._spawn()
            try:
                await _ready(child)
            except RuntimeError as exc:  # it exited at start (said above) or hangs
                if child.returncode is None:
                    log.warning("%s; killing it", exc)
                    child.kill()
            else:
                log.info("serving process %d replaces %d", child.pid, dead.pid)

    async def _spawn(self) -> Child:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.cli", "serve", "--child",
            "--host", self.host, "--port", str(self.port),
            env={**os.environ, "HERMES_PARENT_PID": str(os.getpid())},
            stdout=asyncio.subprocess.PIPE)


def check_port_free(host: str, port: int) -> None:
    """Fail if something already listens there. Sockets bound with SO_REUSEPORT share a
    port with any other such socket of the same user, so a forgotten gateway on the port
    would silently take a share of the traffic."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the server's own socket is (asyncio sets SO_REUSEADDR): connections of a
        # gateway just stopped, waiting out TIME_WAIT, do not hold the port; a listener does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot serve on {host}:{port}: {exc.strerror or exc} "
                              "(another process listens there?)") from None


async def _ready(child: Child) -> None:
    """Wait for a child's ``READY`` line."""
    assert child.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while line := await child.stdout.readline():
                if line.decode(errors="replace").strip() == READY:
                    return
    except TimeoutError:
        raise RuntimeError(f"serving process {child.pid} did not start within "
                           f"{START_TIMEOUT:g} s") from None
    raise RuntimeError(f"serving process {child.pid} exited at start "
                       f"(code {await child.wait()}); see its log above")


def as_child(app: web.Application) -> None:
    """Say when this child serves, and stop it if its parent goes away."""
    parent = int(os.environ.get("HERMES_PARENT_PID", "0") or 0)

    async def ready(app: web.Application) -> None:
        print(READY, flush=True)
        # Nobody reads the pipe after this line: anything else printed could fill it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        app[_ORPHAN_WATCH] = asyncio.create_task(_watch_parent(parent, _stop_self))

    async def stop(app: web.Application) -> None:
        task = app.get(_ORPHAN_WATCH)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.on_startup.append(ready)
    app.on_cleanup.append(stop)


_ORPHAN_WATCH = web.AppKey("orphan_watch", asyncio.Task)


async def _watch_parent(parent: int, stop: Callable[[], None], every: float = 1.0) -> None:
    while True:
        await asyncio.sleep(every)
        if parent and os.getppid() != parent:
            log.warning("the parent serving process %d is gone; stopping", parent)
            stop()
            return


def _stop_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)

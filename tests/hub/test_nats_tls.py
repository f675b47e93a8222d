"""NATS_URL naming a server of the deployment's own: TLS with a private CA (trustme), a
client certificate, a user and password, a .creds file (operator mode), a server that is
down or restarts. The servers
are real nats-server processes (the pinned binary) with their own configuration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from agent_core import ConfigError
from agent_core.store.embedded import free_port
from hub import AgentRunner, Bus, HubSettings, TaskRequest
from hub.errors import HubUnreachable
from hub.server import _answers, binary_path
from tests.hub.conftest import unique
from tests.hub.nats_jwt import Operator
from tests.hub.test_bus import Echo

PASSWORD = "nats-pw-7f3k9q2"


@dataclass
class Server:
    """A nats-server of the test's own."""

    port: int
    config: Path
    process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.process = subprocess.Popen([str(binary_path()), "-c", str(self.config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        async with asyncio.timeout(30):
            while not await _answers(self.port, None):
                assert self.process.poll() is None, "nats-server exited"
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            await asyncio.to_thread(self.process.wait, 30)


@dataclass
class Certificates:
    ca: Path
    other_ca: Path
    client: Path


ServerFactory = Callable[..., Awaitable[Server]]


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    ca = trustme.CA()
    server = ca.issue_cert("localhost")
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    server.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
    ca.issue_cert("hermes-hub").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "client.pem"))
    return Certificates(tmp_path / "ca.pem", tmp_path / "other-ca.pem", tmp_path / "client.pem")


@pytest.fixture
async def nats_server(tmp_path: Path, certificates: Certificates
                      ) -> AsyncIterator[ServerFactory]:
    """Started nats-servers with JetStream, a user and password, and TLS when asked."""
    servers: list[Server] = []

    async def factory(*, tls: bool = True, verify_clients: bool = False,
                      auth: list[str] | None = None) -> Server:
        port = free_port()
        store = tmp_path / f"store-{port}"
        lines = ["host: 127.0.0.1", f"port: {port}",
                 f"jetstream {{ store_dir: {json.dumps(str(store))} }}",
                 *(auth or [f"authorization {{ user: hermes, password: {json.dumps(PASSWORD)} }}"])]
        if tls:
            lines.append("tls { " + ", ".join([
                f"cert_file: {json.dumps(str(tmp_path / 'server.pem'))}",
                f"key_file: {json.dumps(str(tmp_path / 'server.key'))}",
                f"ca_file: {json.dumps(str(certificates.ca))}",
                f"verify: {'true' if verify_clients else 'false'}"]) + " }")
        config = tmp_path / f"nats-{port}.conf"
        config.write_text("\n".join(lines) + "\n")
        server = Server(port, config)
        await server.start()
        servers.append(server)
        return server

    yield factory
    for server in servers:
        await server.stop()


def settings(tmp_path: Path, url: str, **overrides: Any) -> HubSettings:
    return HubSettings(_env_file=None, nats_url=url,  # type: ignore[call-arg]
                       hermes_data_dir=tmp_path, **overrides)


async def round_trip(bus: Bus) -> None:
    """A request answered through the bus (streams, consumer, reply)."""
    agent_id = unique("tls-echo")
    runner = AgentRunner(bus, Echo(agent_id))
    await runner.start()
    try:
        response = await bus.request(agent_id, TaskRequest(sender_id=unique("caller"),
                                                           intent="echo", deadline_ms=20_000))
        assert response.status == "success"
    finally:
        await runner.stop()


async def test_a_tls_server_with_a_private_ca_and_a_password(
        nats_server: ServerFactory, certificates: Certificates, tmp_path: Path) -> None:
    server = await nats_server()
    url = f"tls://hermes:{PASSWORD}@localhost:{server.port}"
    bus = await Bus.connect(settings(tmp_path, url, nats_tls_ca_file=str(certificates.ca)))
    try:
        await round_trip(bus)
    finally:
        await bus.close()


@pytest.mark.parametrize("case", ["unknown CA", "wrong password", "nobody listening"])
async def test_a_connection_that_cannot_be_made_is_a_clear_error_without_the_password(
        case: str, nats_server: ServerFactory, certificates: Certificates,
        tmp_path: Path) -> None:
    server = await nats_server()
    ca, password, port = str(certificates.ca), PASSWORD, server.port
    if case == "unknown CA":
        ca = str(certificates.other_ca)
    elif case == "wrong password":
        password = "not-the-password-1"
    else:
        port = free_port()
    url = f"tls://hermes:{password}@localhost:{port}"
    async with asyncio.timeout(60):  # said, not retried for ever
        with pytest.raises(HubUnreachable) as raised:
            await Bus.connect(settings(tmp_path, url, nats_tls_ca_file=ca))
    text = str(raised.value)
    assert f"tls://localhost:{port}" in text and password not in text
    expected = {"unknown CA": "certificate verify failed", "wrong password": "authorization",
                "nobody listening": "Connect"}[case]
    assert expected.lower() in text.lower(), text


async def test_a_server_that_verifies_clients_takes_the_configured_certificate(
        nats_server: ServerFactory, certificates: Certificates, tmp_path: Path) -> None:
    server = await nats_server(verify_clients=True)
    url = f"tls://hermes:{PASSWORD}@localhost:{server.port}"
    bus = await Bus.connect(settings(tmp_path, url, nats_tls_ca_file=str(certificates.ca),
                                     nats_tls_cert_file=str(certificates.client)))
    try:
        await round_trip(bus)
    finally:
        await bus.close()
    with pytest.raises(HubUnreachable):
        await Bus.connect(settings(tmp_path, url, nats_tls_ca_file=str(certificates.ca)))


async def test_a_bus_waits_out_a_server_restart(nats_server: ServerFactory,
                                                tmp_path: Path) -> None:
    server = await nats_server(tls=False)
    bus = await Bus.connect(settings(tmp_path, f"nats://hermes:{PASSWORD}@127.0.0.1:"
                                               f"{server.port}"))
    try:
        await round_trip(bus)
        await server.stop()
        async with asyncio.timeout(30):
            while bus.nc.is_connected:
                await asyncio.sleep(0.05)
        await server.start()  # same port, same store
        async with asyncio.timeout(60):
            while not bus.nc.is_connected:
                await asyncio.sleep(0.05)
        await round_trip(bus)
    finally:
        with contextlib.suppress(Exception):
            await bus.close()


async def test_a_creds_file_logs_in_to_an_operator_mode_server(nats_server: ServerFactory,
                                                               tmp_path: Path) -> None:
    operator = Operator.create()
    server = await nats_server(tls=False, auth=operator.config)
    url = f"nats://127.0.0.1:{server.port}"
    creds = operator.creds(tmp_path / "gateway.creds")
    bus = await Bus.connect(settings(tmp_path, url, nats_creds_file=str(creds)))
    try:
        await round_trip(bus)
    finally:
        await bus.close()
    forged = operator.creds(tmp_path / "forged.creds", signed_by=Operator.stranger())
    for refused in (forged, None):
        async with asyncio.timeout(60):
            with pytest.raises(HubUnreachable, match="uthorization"):
                await Bus.connect(settings(tmp_path, url, nats_creds_file=str(refused)
                                           if refused else None))


@pytest.mark.parametrize("setting", ["nats_creds_file", "nats_tls_ca_file"])
async def test_a_settings_file_that_is_not_there_is_named(setting: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"{setting.upper()}=.*missing.pem: no such file"):
        await Bus.connect(settings(tmp_path, "tls://localhost:4222",
                                   **{setting: str(tmp_path / "missing.pem")}))

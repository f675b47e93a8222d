"""Trust read at the first handshake (agent_core._tls): the same verification, later."""

from __future__ import annotations

import asyncio
import socket
import ssl
import types
from pathlib import Path
from typing import Any

import pytest
import trustme

from agent_core import _tls

LOADERS = {name: ssl.SSLContext.__dict__.get(name) for name in _tls._LOADERS}


@pytest.fixture
def ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    return authority, str(tmp_path / "ca.pem")


class Inner:
    """A module's loader, the module building contexts the way aiohttp.connector does."""

    def __init__(self, cafile: str, *, names: tuple[str, ...], fail: bool = False) -> None:
        self.cafile, self.names, self.fail = cafile, names, fail

    def exec_module(self, module: Any) -> None:
        for name in self.names:
            setattr(module, name, ssl.create_default_context(cafile=self.cafile))
        module.other = ssl.create_default_context(cafile=self.cafile)
        if self.fail:
            raise ImportError("broken module")


def run(loader: Inner) -> Any:
    module = types.ModuleType("fake")
    _tls.defer_default_contexts(lambda: loader.exec_module(module), module)
    return module


def test_the_default_contexts_load_their_trust_at_the_first_look_and_others_at_once(
        ca: tuple[trustme.CA, str]) -> None:
    module = run(Inner(ca[1], names=("_SSL_CONTEXT_VERIFIED", "_SSL_CONTEXT_UNVERIFIED")))
    verified = module._SSL_CONTEXT_VERIFIED
    assert isinstance(verified, _tls.DeferredTrust) and not verified._ready
    assert verified._pending == [("load_verify_locations", (ca[1], None, None), {})]
    assert verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname
    assert verified.cert_store_stats()["x509_ca"] == 1 and verified._ready
    assert type(module.other) is ssl.SSLContext  # not aiohttp's: not deferred
    assert module.other.cert_store_stats()["x509_ca"] == 1
    assert {n: ssl.SSLContext.__dict__.get(n) for n in _tls._LOADERS} == LOADERS


def test_a_module_without_the_default_contexts_has_every_load_made_at_once(
        ca: tuple[trustme.CA, str]) -> None:
    module = run(Inner(ca[1], names=("something_else",)))
    assert module.something_else.cert_store_stats()["x509_ca"] == 1
    assert module.other.cert_store_stats()["x509_ca"] == 1


def test_a_failing_import_leaves_the_ssl_module_as_it_was(
        ca: tuple[trustme.CA, str]) -> None:
    with pytest.raises(ImportError, match="broken"):
        run(Inner(ca[1], names=("_SSL_CONTEXT_VERIFIED",), fail=True))
    assert {n: ssl.SSLContext.__dict__.get(n) for n in _tls._LOADERS} == LOADERS
    assert ssl.create_default_context(cafile=ca[1]).cert_store_stats()["x509_ca"] == 1


async def test_a_deferred_context_verifies_at_its_first_handshake(
        ca: tuple[trustme.CA, str], tmp_path: Path) -> None:
    """Trusted by the recorded CA (first handshakes in four threads at once all wait for
    the one load), refused with another."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca[0].issue_cert("127.0.0.1").configure_cert(server_ctx)

    async def hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hi")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hello, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]

    def deferred(cafile: str) -> _tls.DeferredTrust:
        return _tls.DeferredTrust.adopt(
            ssl.create_default_context(), [("load_verify_locations", (cafile,), {})])

    async def greet(ctx: ssl.SSLContext) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        data = await reader.read()
        writer.close()
        return data

    def greet_blocking(ctx: ssl.SSLContext) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.recv(2)

    other = trustme.CA()
    other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    try:
        trusted = deferred(ca[1])
        assert await asyncio.gather(*(asyncio.to_thread(greet_blocking, trusted)
                                      for _ in range(4))) == [b"hi"] * 4
        assert await greet(deferred(ca[1])) == b"hi"
        with pytest.raises(ssl.SSLCertVerificationError):
            await greet(deferred(str(tmp_path / "other.pem")))
    finally:
        server.close()
        await server.wait_closed()

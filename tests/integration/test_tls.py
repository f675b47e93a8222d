"""rediss://: the store's clients over TLS, certificates checked as redis-py checks them.

The test server is the session's Valkey behind a TLS terminator (a thread with its own
event loop, like stunnel in front of Redis), with a throwaway CA from ``trustme``: the
client side is real TLS, negotiated and verified by Python's ssl module.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
import redis.asyncio as aioredis
import trustme
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.store import connect
from agent_core.store.multiplex import MultiplexedRedis
from tests.integration.conftest import GatewayFactory, answer_echo


@dataclass
class TLSRedis:
    """Where the TLS front listens, and what the client needs to trust it."""

    port: int
    password: str
    ca_file: Path
    client_cert: Path
    #: A CA that did not sign the server's certificate.
    other_ca_file: Path
    #: TLS sessions the front completed (each is one client connection).
    sessions: list[str] = field(default_factory=list)

    def url(self, host: str = "localhost", **query: str) -> str:
        options = {"ssl_ca_certs": str(self.ca_file), **query}
        return f"rediss://:{self.password}@{host}:{self.port}/0?{urlencode(options)}"


class _Front:
    """Accepts TLS on a port and pipes the plaintext to the Redis server."""

    def __init__(self, context: ssl.SSLContext, upstream: tuple[str, int],
                 sessions: list[str]) -> None:
        self.context, self.upstream, self.sessions = context, upstream, sessions
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.writers: list[asyncio.StreamWriter] = []
        self.piping: list[asyncio.Future[Any]] = []

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()
        for writer in self.writers:
            writer.close()
        self.loop.run_until_complete(asyncio.gather(
            server.wait_closed(), *self.piping, return_exceptions=True))
        self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.sessions.append(str(writer.get_extra_info("ssl_object").version()))
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()
            with contextlib.suppress(ConnectionError, OSError):
                await dst.wait_closed()

        piping = asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.piping.append(piping)
        await piping

    def start(self) -> int:
        self.thread.start()
        self.ready.wait(10)
        return self.port

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _front(redis_tcp_url: str, tmp_path: Path, *, require_client_cert: bool) -> Iterator[TLSRedis]:
    ca = trustme.CA()
    server_cert = ca.issue_cert("localhost")  # not 127.0.0.1: a name check can fail
    client_cert = ca.issue_cert("hermes-gateway")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(context)
    if require_client_cert:
        ca.configure_trust(context)
        context.verify_mode = ssl.CERT_REQUIRED
    ca_file, client_file = tmp_path / "ca.pem", tmp_path / "client.pem"
    other_ca_file = tmp_path / "other-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    trustme.CA().cert_pem.write_to_path(str(other_ca_file))
    client_cert.private_key_and_cert_chain_pem.write_to_path(str(client_file))
    upstream = urlsplit(redis_tcp_url)
    if upstream.scheme != "redis":
        pytest.skip("the TLS front needs the test server over plain TCP")
    sessions: list[str] = []
    front = _Front(context, (upstream.hostname or "127.0.0.1", upstream.port or 6379),
                   sessions)
    port = front.start()
    try:
        yield TLSRedis(port, upstream.password or "", ca_file, client_file, other_ca_file,
                       sessions)
    finally:
        front.stop()


@pytest.fixture
def tls_redis(redis_tcp_url: str, tmp_path: Path) -> Iterator[TLSRedis]:
    yield from _front(redis_tcp_url, tmp_path, require_client_cert=False)


@pytest.fixture
def mutual_tls_redis(redis_tcp_url: str, tmp_path: Path) -> Iterator[TLSRedis]:
    yield from _front(redis_tcp_url, tmp_path, require_client_cert=True)


async def _round_trip(url: str) -> None:
    client = connect(url)
    try:
        key = f"tls:{uuid.uuid4().hex}"
        await client.set(key, "v", ex=60)
        assert await client.get(key) == b"v"
        await client.delete(key)
    finally:
        await client.aclose()


async def test_multiplexed_commands_share_one_tls_connection(tls_redis: TLSRedis) -> None:
    client = connect(tls_redis.url())
    assert isinstance(client, MultiplexedRedis)
    keys = [f"tls:{uuid.uuid4().hex}" for _ in range(50)]
    try:
        await client.ping()
        before = client.writes
        await asyncio.gather(*(client.set(k, f"v{n}", ex=60) for n, k in enumerate(keys)))
        assert client.writes == before + 1, "the 50 SETs of one turn went in one write"
        assert await asyncio.gather(*(client.get(k) for k in keys)) == \
            [f"v{n}".encode() for n in range(50)]
        assert len(tls_redis.sessions) == 1, "all of it on one TLS connection"
        assert tls_redis.sessions[0].startswith("TLSv1.")
        # A transaction goes through redis-py's pool, over TLS too.
        async with client.pipeline(transaction=True) as pipe:
            pipe.incr(keys[0] + ":n")
            pipe.incr(keys[0] + ":n")
            results = await pipe.execute()
        assert results == [1, 2]
        assert len(tls_redis.sessions) == 2
    finally:
        await client.delete(*keys, keys[0] + ":n")
        await client.aclose()


def test_the_shared_tls_connection_works_on_uvloop(tls_redis: TLSRedis) -> None:
    uvloop = pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_round_trip(tls_redis.url()))
    assert len(tls_redis.sessions) == 1


# Each case: the URL's options, and what is wrong (None: it connects).
CASES: dict[str, tuple[Callable[[TLSRedis], str], str | None]] = {
    "trusted CA, right name": (lambda t: t.url(), None),
    "unknown CA": (lambda t: t.url(ssl_ca_certs=str(t.other_ca_file)),
                   "certificate verify failed"),
    "name mismatch": (lambda t: t.url("127.0.0.1"), "certificate verify failed"),
    "name check off": (lambda t: t.url("127.0.0.1", ssl_check_hostname="false"), None),
    "checks off": (lambda t: t.url("127.0.0.1", ssl_cert_reqs="none",
                                   ssl_ca_certs=""), None),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("multiplex", [True, False], ids=["multiplexed", "pooled"])
async def test_certificates_are_checked_the_same_way_on_both_paths(
        tls_redis: TLSRedis, case: str, multiplex: bool) -> None:
    make_url, problem = CASES[case]
    client: aioredis.Redis = connect(make_url(tls_redis), multiplex=multiplex)
    try:
        if problem is None:
            assert await client.ping() is True
        else:
            with pytest.raises(RedisConnectionError) as raised:
                await client.ping()
            assert problem in str(raised.value).lower()
    finally:
        await client.aclose()


async def test_a_client_certificate_is_presented_when_configured(
        mutual_tls_redis: TLSRedis) -> None:
    await _round_trip(mutual_tls_redis.url(ssl_certfile=str(mutual_tls_redis.client_cert)))
    with pytest.raises(RedisConnectionError):
        await _round_trip(mutual_tls_redis.url())


async def test_the_gateway_runs_on_a_tls_store(tls_redis: TLSRedis,
                                               make_gateway: GatewayFactory) -> None:
    # Few workers, so the start warms few pooled connections: every TLS handshake runs in
    # the front's one Python thread, and forty at once can outlast the connect timeout on
    # a busy machine.
    h = await make_gateway(redis_url=tls_redis.url(), hermes_workers=2)
    h.model.responder = answer_echo
    response = await h.client.post("/agent/run", json={"text": "over tls",
                                                         "conversation_id": "tls-1"})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    assert body["status"] == "answered" and body["text"] == "answer to: over tls"
    assert len(tls_redis.sessions) >= 2, "the store and the queue's blocking client"

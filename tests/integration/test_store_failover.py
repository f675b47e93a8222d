"""A store failover under traffic, on real servers started on loopback (tests/clusters.py):
two gateway processes (``python -m gateway.cli serve``, each with its own data directory,
the generic webhook channel and the scripted model server) share a Redis Cluster (three
primaries, a replica each) or a primary found through Sentinel (a replica, three
sentinels); conversations send messages in order, each delivered twice (a platform's retry,
to the other gateway); a primary is SIGKILLed while messages are in flight and its replica
takes its place. Every message a gateway acknowledged is answered at the callback server,
once, in its conversation's order; both gateways are ready and idle at the end, and the
killed node is back as a replica. A message refused while the store fails over (503) is
sent again by its sender, as a platform does. The gateways' stderr goes to a file per
process, printed when the test fails; every process is stopped at the test's end."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapters.webhook import signed_headers
from agent_core.models.replay import ReplayModelServer
from agent_core.store.embedded import free_port
from agent_core.store.keys import Keys
from tests.clusters import (
    SENTINEL_PASSWORD,
    LocalCluster,
    LocalSentinel,
    Node,
    start_cluster,
    start_sentinel,
    until,
)
from tests.integration.conftest import WEBHOOK_SECRET, GatewayFactory, answer_echo
from tests.integration.test_serve import parse_metrics

pytestmark = pytest.mark.timeout(150)

ROOT = Path(__file__).resolve().parents[2]
CONVERSATIONS = 8
MESSAGES = 6
#: The default lease. A failover, with the killed node back as the replica that
#: acknowledges writes, takes a few seconds; an outage longer than the lease lets the other
#: gateway take a conversation whose answer was being delivered when the primary died, and
#: deliver it again (with 5 s: 8 answers twice in 1 run of 2, behind Sentinel): the
#: platform's side of a delivery and the store's record of it are not one step
#: (docs/gateway.md, "Past one store node").
LEASE = "30"


class Gateway:
    """A ``python -m gateway.cli serve`` process; its stderr in ``log``."""

    def __init__(self, root: Path, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.data = root / name
        self.data.mkdir(parents=True)
        self.log = root / f"{name}.log"
        with self.log.open("wb") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--port", str(self.port)],
                env={**env, "HERMES_DATA_DIR": str(self.data)}, cwd=ROOT,
                stdout=subprocess.DEVNULL, stderr=errors)

    @property
    def auth(self) -> dict[str, str]:
        """The API's header: the local token the gateway made in its data directory."""
        return {"Authorization": f"Bearer {(self.data / 'local-token').read_text().strip()}"}

    def alive(self) -> None:
        assert self.process.poll() is None, \
            f"{self.name} exited ({self.process.returncode}):\n{self.tail()}"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:] if self.log.exists() else ""

    async def ready(self, http: aiohttp.ClientSession) -> bool:
        """GET /readyz is 200."""
        self.alive()
        async with http.get(f"{self.base}/readyz") as response:
            return response.status == 200

    async def idle(self, http: aiohttp.ClientSession) -> bool:
        """No conversation has queued work (the store's count, every replica's) and this
        process works on none."""
        self.alive()
        async with http.get(f"{self.base}/metrics", headers=self.auth) as response:
            samples = parse_metrics(await response.text())
        return samples[("hermes_conversations_waiting", ())] == 0 and \
            samples[("hermes_active_conversations", ())] == 0

    async def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within 30 s; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait, 10)
                return None
        return self.process.returncode


class Fleet:
    """The gateway processes of a test."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.started: list[Gateway] = []

    async def start(self, store: dict[str, str]) -> list[Gateway]:
        """Two ``serve`` processes on the store ``store`` (its environment) names, ready."""
        made = [Gateway(self.root, f"gateway{n}", {**self.env, **store}) for n in range(2)]
        self.started.extend(made)
        async with aiohttp.ClientSession() as http:
            for g in made:
                await until(functools.partial(g.ready, http), f"{g.name} to be ready", 60)
        return made

    @contextlib.contextmanager
    def shown_on_failure(self) -> Iterator[None]:
        """Print every gateway's stderr if the block fails (pytest shows it then)."""
        try:
            yield
        except BaseException:
            for g in self.started:
                print(f"----- {g.name} (exit {g.process.poll()}), the end of its stderr "
                      f"({g.log}):\n{g.tail()}")
            raise

    async def stop(self) -> list[int | None]:
        return [await g.stop() for g in self.started]


@pytest.fixture
async def model() -> AsyncIterator[ReplayModelServer]:
    server = ReplayModelServer(responder=answer_echo)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def fleet(tmp_path: Path, model: ReplayModelServer) -> AsyncIterator[Fleet]:
    """Gateway processes answering with the scripted model; each stopped (SIGTERM, then
    SIGKILL) at the end, whatever happened."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_PROVIDER": "openai",
           "LLM_MODEL_NAME": "scripted", "LLM_BASE_URL": model.openai_url,
           "LLM_API_KEY": "sk-test-0123456789abcdef", "LLM_MAX_RETRIES": "0",
           "AGENT_REPLAN_EVERY": "0", "HERMES_LEASE_SECONDS": LEASE,
           "HERMES_WEBHOOK_SECRETS": json.dumps({"crm": WEBHOOK_SECRET}),
           "HERMES_WEBHOOK_CALLBACK_HOSTS": "127.0.0.1",
           "SLACK_BOT_TOKEN": "", "TELEGRAM_BOT_TOKEN": "",
           "LOG_LEVEL": "INFO", "REDIS_PREFIX": f"t{uuid.uuid4().hex[:10]}"}
    made = Fleet(tmp_path / "gateways", env)
    try:
        yield made
    finally:
        await made.stop()


class Traffic:
    """Conversations talking to two gateways; what was acknowledged, and what answered."""

    def __init__(self, gateways: list[Gateway], callback: dict[str, Any],
                 http: aiohttp.ClientSession) -> None:
        self.gateways = gateways
        self.callback = callback
        self.http = http
        self.acked: list[str] = []
        self.refused = 0

    async def send(self, g: Gateway, conversation: str, text: str) -> None:
        """Until the gateway acknowledges the message (202, or 200: a duplicate)."""
        body = json.dumps({"conversation_id": conversation, "user_id": "u1", "text": text,
                           "idempotency_key": text,
                           "callback_url": self.callback["url"]}).encode()
        while True:
            g.alive()
            async with self.http.post(f"{g.base}/webhook/crm", data=body,
                                      headers=signed_headers(WEBHOOK_SECRET, body)) as r:
                if r.status in (200, 202):
                    return
                assert r.status == 503, f"{r.status} {await r.text()}"
            self.refused += 1
            await asyncio.sleep(0.05)  # the sender's back-off before it tries again

    async def talk(self, number: int) -> None:
        conversation = f"failover-{number}"
        for n in range(MESSAGES):
            text = f"{conversation}/{n}"
            first = self.gateways[(number + n) % 2]
            second = self.gateways[(number + n + 1) % 2]
            await self.send(first, conversation, text)
            self.acked.append(text)
            await self.send(second, conversation, text)  # the platform's retry

    def answers(self) -> list[str]:
        return [p["text"].removeprefix("answer to: ") for _, _, p in self.callback["received"]]

    async def run_through(self, fail: Callable[[], Awaitable[None]]) -> None:
        """Traffic, with ``fail`` run once a third of the messages were acknowledged."""
        talks = asyncio.gather(*(self.talk(n) for n in range(CONVERSATIONS)))
        try:
            await until(self._started, "a third of the messages to be acknowledged", 60)
            await fail()
            await talks
        finally:
            if not talks.done():
                talks.cancel()
                await asyncio.gather(talks, return_exceptions=True)

    async def _started(self) -> bool:
        return len(self.acked) >= CONVERSATIONS * MESSAGES // 3

    async def check(self) -> None:
        """Every acknowledged message answered once, in order; both gateways ready and
        idle (nothing left to answer late)."""
        everything = CONVERSATIONS * MESSAGES
        assert len(self.acked) == everything
        await until(self._all_answered, "every acknowledged message to be answered", 60)
        for g in self.gateways:
            await until(functools.partial(g.ready, self.http), f"{g.name} to be ready", 30)
            await until(functools.partial(g.idle, self.http), f"{g.name} to be idle", 30)
        answers = self.answers()
        twice = [text for text, count in Counter(answers).items() if count > 1]
        assert twice == [], f"answered more than once: {twice}"
        assert set(answers) == set(self.acked), "an acknowledged message was lost"
        for number in range(CONVERSATIONS):
            mine = [a for a in answers if a.startswith(f"failover-{number}/")]
            assert mine == [f"failover-{number}/{n}" for n in range(MESSAGES)], "order"

    async def _all_answered(self) -> bool:
        for g in self.gateways:
            g.alive()
        return set(self.answers()) >= set(self.acked)


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))


async def _promoted(cluster: LocalCluster, key: str, victim: Node) -> bool:
    primary = await cluster.primary_of(key)
    return primary is not victim and await cluster.role(primary) == "master"


async def test_a_cluster_primary_killed_mid_traffic_loses_and_repeats_nothing(
        tmp_path: Path, fleet: Fleet, callback_server: dict[str, Any]) -> None:
    cluster = await start_cluster(tmp_path / "cluster")
    try:
        with fleet.shown_on_failure():
            gateways = await fleet.start({"REDIS_CLUSTER_NODES": cluster.seeds,
                                          "REDIS_URL": cluster.url})
            # The primary of the first conversation's shard: busy when it dies.
            key = Keys(fleet.env["REDIS_PREFIX"], shards=16).queue.queue(
                "webhook:crm:failover-0")
            victim = await cluster.primary_of(key)

            async def fail() -> None:
                victim.kill()
                await until(lambda: _promoted(cluster, key, victim), "the replica's promotion")
                victim.start()  # back, as the new primary's replica

            async with session() as http:
                traffic = Traffic(gateways, callback_server, http)
                await traffic.run_through(fail)
                await traffic.check()
            await until(cluster.healthy, "the cluster to heal", 60)
            assert await cluster.role(victim) == "slave", "the killed primary is a replica"
            assert await fleet.stop() == [0, 0], "both gateways stop cleanly"
    finally:
        await fleet.stop()  # while their store is up
        cluster.close()


async def test_a_primary_behind_sentinel_killed_mid_traffic_loses_and_repeats_nothing(
        tmp_path: Path, fleet: Fleet, callback_server: dict[str, Any]) -> None:
    sentinel: LocalSentinel = await start_sentinel(tmp_path / "sentinel")
    try:
        with fleet.shown_on_failure():
            gateways = await fleet.start({
                "REDIS_SENTINELS": sentinel.addresses, "REDIS_SENTINEL_MASTER": sentinel.master,
                "REDIS_URL": sentinel.url, "REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD})
            victim = await sentinel.primary()

            async def fail() -> None:
                victim.kill()
                await until(_failed_over, "the sentinels to promote the replica", 60)
                victim.start()  # back, turned into the new primary's replica by the sentinels

            async def _failed_over() -> bool:
                return await sentinel.primary() is not victim

            async with session() as http:
                traffic = Traffic(gateways, callback_server, http)
                await traffic.run_through(fail)
                await traffic.check()
            await until(sentinel.settled, "the sentinels to settle", 60)
            assert (await victim.info("replication"))["role"] == "slave", \
                "the killed primary is a replica"
            assert await fleet.stop() == [0, 0], "both gateways stop cleanly"
    finally:
        await fleet.stop()
        sentinel.close()


async def test_a_gateway_behind_sentinel_stops_promptly_when_every_server_is_gone(
        tmp_path: Path, make_gateway: GatewayFactory) -> None:
    sentinel = await start_sentinel(tmp_path / "sentinel")
    try:
        h = await make_gateway(redis_sentinels=sentinel.addresses,
                               redis_sentinel_master=sentinel.master, redis_url=sentinel.url,
                               redis_sentinel_password=SENTINEL_PASSWORD)
    finally:
        sentinel.close()
    started = time.monotonic()
    await h.client.close()
    # Each look-up of the primary once took ~20 s with redis-py's default retries of the
    # sentinels (a stop ~50 s), past any termination grace period.
    assert time.monotonic() - started < 5

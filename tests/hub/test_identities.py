"""The hub's identities against the credentials an attacker would hold (an ordinary agent's
.creds, the core's where the attack is the core's, a stranger's), on the real nats-server:
the server refuses what an identity may not do, and what it may do under its own name is
not taken for another's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats as nats_py
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig

from hub import Agent, Bus, Heartbeat, HubSettings, LogEvent, TaskRequest, TaskResponse
from hub.bus import TASKS
from hub.discovery import Discovery, healthcheck_subject
from hub.enrolment import Enrolment, ensure_consumer
from hub.errors import HubUnreachable
from hub.identity import durable_of, inbox_prefix
from hub.messages import schemas
from hub.schemas import BUCKET
from hub.subjects import replies_to, reply_subject, request_subject
from tests.conftest import NatsServer
from tests.hub.conftest import BusFactory, RunnerFactory, unique
from tests.hub.nats_jwt import Operator
from tests.hub.test_bus import Echo, until, watch


@dataclass
class Intruder:
    """A plain nats-py client logged in as ``identity``, and what the server refused it."""

    nc: Client
    identity: str
    errors: list[str] = field(default_factory=list)

    async def refused(self, what: str, subject: str) -> None:
        """Wait until the server has refused ``what`` (publish, subscription) on
        ``subject``."""
        wanted = f'permissions violation for {what} to "{subject.lower()}'
        await until(lambda: any(wanted in e.lower() for e in self.errors))


IntruderFactory = Callable[[str], Awaitable[Intruder]]


@pytest.fixture
async def intruder(nats: NatsServer) -> AsyncIterator[IntruderFactory]:
    """Clients with the credentials of an identity (an agent's id, or the core's)."""
    made: list[Intruder] = []

    async def factory(identity: str) -> Intruder:
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        nc = await nats_py.connect(nats.url, user_credentials=nats.creds(identity),
                                inbox_prefix=inbox_prefix(identity), error_cb=on_error)
        made.append(Intruder(nc, identity, errors))
        return made[-1]

    yield factory
    for each in made:
        await each.nc.close()


class Held(Agent):
    """Answers ``verdict: valid`` once released."""

    def __init__(self, agent_id: str) -> None:
        super().__init__()
        self.agent_id = agent_id
        self.capabilities = ("validate_claim",)
        self.requests: list[TaskRequest] = []
        self.release = asyncio.Event()

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.requests.append(request)
        async with asyncio.timeout(30):
            await self.release.wait()
        return self.respond(request, "success", {"verdict": "valid"})


@pytest.fixture
async def core(make_bus: BusFactory) -> AsyncIterator[Bus]:
    """The hub's core, with its enrolment service (agents of their own identity start)."""
    bus = await make_bus()
    enrolment = Enrolment(bus)
    await enrolment.start()
    yield bus
    await enrolment.stop()


async def test_a_forged_answer_is_ignored_and_the_agents_own_is_taken(
        core: Bus, make_bus: BusFactory, run_agent: RunnerFactory,
        intruder: IntruderFactory) -> None:
    victim = Held(unique("validator"))
    await run_agent(await make_bus(identity=victim.agent_id), victim)
    mallory = await intruder(unique("mallory"))
    # The worst case: the attacker knows the request's sender and task ids.
    request = TaskRequest(sender_id=unique("gateway"), intent="validate_claim",
                          deadline_ms=20_000)
    seen = await watch(core, replies_to(request.sender_id))
    answer = asyncio.ensure_future(core.request(victim.agent_id, request))
    await until(lambda: victim.requests)
    forged = TaskResponse(sender_id=victim.agent_id, receiver_id=request.sender_id,
                          correlation_id=request.correlation_id, task_id=request.task_id,
                          status="success", result={"verdict": "forged"}).to_json()
    # As the agent, or as the hub's deadline watch: the server refuses both.
    for responder in (victim.agent_id, "hub"):
        await mallory.nc.publish(reply_subject(responder, request.sender_id), forged)
        await mallory.refused("publish", reply_subject(responder, request.sender_id))
    # As itself (all it may), the body claiming to be the agent: delivered, and ignored.
    own = reply_subject(mallory.identity, request.sender_id)
    await mallory.nc.jetstream().publish(own, forged)
    await until(lambda: any(m.subject == own for m in seen))
    assert not answer.done()
    victim.release.set()
    response = await asyncio.wait_for(answer, 20)
    assert response.result == {"verdict": "valid"}, "the agent's own answer was taken"


async def test_a_heartbeat_for_another_agent_changes_nothing_in_discovery(
        make_bus: BusFactory, run_agent: RunnerFactory, intruder: IntruderFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    bus = await make_bus()
    discovery = Discovery(bus)
    await discovery.start()
    try:
        capability = f"claims_{unique('x').replace('-', '_')}"
        honest = Echo(unique("honest"))
        honest.capabilities = (capability,)
        runner = await run_agent(bus, honest)
        await until(lambda: [c.agent_id for c in discovery.live(capability)]
                    == [honest.agent_id])
        before = discovery.live(capability)
        mallory = await intruder(unique("mallory"))
        fake = Heartbeat(sender_id=honest.agent_id, agent_id=honest.agent_id,
                         load_percent=0, memory_used_mb=1, capabilities=[capability],
                         version="99", endpoint="mallory:1").to_json()
        # Under the honest agent's subject: the server refuses it.
        await mallory.nc.publish(healthcheck_subject(honest.agent_id), fake)
        await mallory.refused("publish", healthcheck_subject(honest.agent_id))
        # Under its own, speaking for the honest agent: discovery refuses it.
        await mallory.nc.publish(healthcheck_subject(mallory.identity), fake)
        await until(lambda: "speaks for another agent" in caplog.text)
        # Saying the honest agent's copy stops, under its own subject: its own copy only.
        stopping = LogEvent(sender_id=honest.agent_id, level="info", event_type="stopping",
                            details={"agent_id": honest.agent_id, "endpoint":
                                     runner.heartbeats.heartbeat().endpoint}).to_json()
        await mallory.nc.publish(healthcheck_subject(mallory.identity), stopping)
        seen = await watch(bus, healthcheck_subject("*"))
        await until(lambda: any(m.subject == healthcheck_subject(honest.agent_id)
                                for m in seen))  # a beat of the honest agent since
        # The same agents as before, with the same load and copies (a heartbeat's age moves
        # on with the clock).
        def seen_as(cs: list[Any]) -> list[tuple[Any, ...]]:
            return [(c.agent_id, c.load_percent, c.copies, c.version, c.capabilities)
                    for c in cs]

        assert seen_as(discovery.live(capability)) == seen_as(before)
        assert mallory.identity not in [c.agent_id for c in discovery.live()]
    finally:
        await discovery.stop()


async def test_an_agent_reads_no_request_but_its_own(
        core: Bus, make_bus: BusFactory, run_agent: RunnerFactory,
        intruder: IntruderFactory) -> None:
    victim = Echo(unique("victim"))
    await run_agent(await make_bus(identity=victim.agent_id), victim)
    mallory_id = unique("mallory")
    await ensure_consumer(core, mallory_id)  # an enrolled agent, with its own consumer
    mallory = await intruder(mallory_id)
    sniffed: list[Msg] = []

    async def keep(msg: Msg) -> None:
        sniffed.append(msg)

    await mallory.nc.subscribe("task.request.>", cb=keep)
    await mallory.refused("subscription", "task.request.>")
    js = mallory.nc.jetstream(timeout=1)
    attempts: dict[str, Callable[[], Awaitable[Any]]] = {
        # The stream's messages, read directly.
        f"$JS.API.STREAM.MSG.GET.{TASKS}": lambda: js.get_last_msg(
            TASKS, request_subject(victim.agent_id)),
        # A consumer of its own over every request (ephemeral, as an ordered consumer
        # makes, or named and pulled).
        f"$JS.API.CONSUMER.CREATE.{TASKS}": lambda: js.add_consumer(
            TASKS, ConsumerConfig(filter_subject="task.request.>")),
        f"$JS.API.CONSUMER.CREATE.{TASKS}.sniff": lambda: js.add_consumer(
            TASKS, ConsumerConfig(name="sniff", filter_subject="task.request.>")),
        # Its own durable consumer widened to every request.
        f"$JS.API.CONSUMER.CREATE.{TASKS}.{durable_of(mallory_id)}": lambda: js.add_consumer(
            TASKS, ConsumerConfig(name=durable_of(mallory_id), filter_subject="task.request.>")),
        # The victim's consumer, pulled from.
        f"$JS.API.CONSUMER.MSG.NEXT.{TASKS}.{durable_of(victim.agent_id)}": lambda: _pull(
            js, durable_of(victim.agent_id)),
    }
    for subject, attempt in attempts.items():
        try:
            got = await attempt()
        except Exception:  # the server answers a refused request with nothing at all
            got = None
        assert got in (None, []), subject
        await mallory.refused("publish", subject)
    # Enrolled as the victim: its consumer made for it, to pull from.
    await mallory.nc.publish(f"hmp.enroll.{victim.agent_id}", b"")
    await mallory.refused("publish", f"hmp.enroll.{victim.agent_id}")
    response = await core.request(victim.agent_id, TaskRequest(
        sender_id=unique("caller"), intent="echo", arguments={"secret": "C-7"},
        deadline_ms=20_000))
    assert response.status == "success" and victim.seen
    assert await _pull(js, durable_of(mallory_id)) == [], "its own consumer has only its own"
    assert sniffed == []


async def _pull(js: Any, durable: str) -> list[Msg]:
    subscription = await js.pull_subscribe_bind(durable=durable, stream=TASKS)
    try:
        return list(await subscription.fetch(1, timeout=0.5))
    except nats_py.errors.TimeoutError:
        return []
    finally:
        await subscription.unsubscribe()


async def test_only_the_schema_admin_writes_the_schemas(
        make_bus: BusFactory, intruder: IntruderFactory) -> None:
    admin = await make_bus(identity="schema-admin")
    assert admin.schemas is not None
    before = admin.schemas.version("task_request")
    poisoned = json.dumps({"version": before + 1, "schema": {"type": "object",
                                                               "maxProperties": 0}}).encode()
    for identity in (unique("mallory"), "hub"):  # an agent, and not even the core
        someone = await intruder(identity)
        kv = await someone.nc.jetstream(timeout=1).key_value(BUCKET)  # reading is allowed
        with pytest.raises(Exception):  # noqa: B017 - refused: no answer comes
            await kv.put("task_request", poisoned)
        await someone.refused("publish", f"$KV.{BUCKET}.task_request")
    kv = await admin.js.key_value(BUCKET)
    entry = await kv.get("task_request")
    assert json.loads(entry.value or b"{}")["version"] == before


async def test_a_stranger_cannot_log_in(nats: NatsServer, tmp_path: Path) -> None:
    # An operator and an account the server never trusted.
    operator = Operator.create(tmp_path / "operator")
    forged = operator.creds(tmp_path / "forged.creds")
    for creds in (str(forged), None):
        async with asyncio.timeout(60):
            with pytest.raises(HubUnreachable, match="uthorization"):
                await Bus.connect(HubSettings(  # type: ignore[call-arg]
                    _env_file=None, nats_url=nats.url, nats_creds_file=creds,
                    hermes_data_dir=tmp_path))


class Tarpit:
    """A local HTTP server that records every connection and never answers (it hangs up
    after a few seconds, so that a process that did fetch is stalled, not stuck)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen()
        self._socket.settimeout(0.2)
        self.port = self._socket.getsockname()[1]
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, address = self._socket.accept()
            except TimeoutError:
                continue
            self.hits.append(f"{address}")
            self._held.append(conn)  # never answered
            threading.Timer(3.0, conn.close).start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._socket.close()


async def test_a_schema_with_a_remote_ref_is_refused_without_a_fetch_or_a_frozen_loop(
        make_bus: BusFactory, run_agent: RunnerFactory, nats: NatsServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """What an admin's mistake (or a bucket written before identities) can hold: every
    running process refuses the schema (logged), fetches nothing, keeps answering with the
    last good version, and a process started afterwards becomes ready with it."""
    tarpit = Tarpit()
    ticks: list[float] = []
    loop = asyncio.get_running_loop()

    async def ticker() -> None:
        while True:
            ticks.append(loop.time())
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    admin = await make_bus(identity="schema-admin")
    try:
        agent_bus = await make_bus()
        agent = Echo(unique("steady"))
        await run_agent(agent_bus, agent)
        assert admin.schemas is not None and agent_bus.schemas is not None
        good = agent_bus.schemas.version("task_request")
        remote = {"$ref": f"http://127.0.0.1:{tarpit.port}/task_request.json"}
        kv = await admin.js.key_value(BUCKET)
        caplog.set_level(logging.WARNING, logger="hub.schemas")
        started = len(ticks)
        await kv.put("task_request", json.dumps({"version": good + 1,
                                                 "schema": remote}).encode())
        await until(lambda: f"schema v{good + 1} of 'task_request' refused" in caplog.text)
        assert "must be self-contained" in caplog.text
        gaps = [b - a for a, b in zip(ticks[started:], ticks[started + 1:], strict=False)]
        assert gaps and max(gaps) < 0.5, f"the loop stalled {max(gaps, default=0):.2f} s"
        assert agent_bus.schemas.version("task_request") == good, "the last good one stays"
        caller = await make_bus()
        answer = await caller.request(agent.agent_id, TaskRequest(
            sender_id=unique("caller"), intent="echo", deadline_ms=20_000))
        assert answer.status == "success"
        # A process that starts now becomes ready, with the last good version.
        async with asyncio.timeout(20):
            restarted = await make_bus()
        assert restarted.schemas is not None
        assert restarted.schemas.version("task_request") == good
        assert tarpit.hits == [], "nothing fetched the remote $ref"
    finally:
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
        # v1's rule back for the rest of the session's tests.
        assert admin.schemas is not None
        await admin.schemas.publish("task_request", schemas()["task_request"])
        tarpit.close()


async def test_an_embedded_server_of_the_shared_token_kind_is_replaced(tmp_path: Path) -> None:
    """A data directory whose embedded server still runs with the shared token (started
    before identities): it is stopped, never reused, and the new server is in operator
    mode, so no process keeps logging in with the token."""
    import subprocess

    from agent_core.store.embedded import free_port
    from hub.server import EmbeddedNats, _answers, binary_path

    directory = tmp_path / "nats"
    directory.mkdir()
    port = free_port()
    config = directory / "nats.conf"
    config.write_text(f'host: 127.0.0.1\nport: {port}\nauthorization {{ token: "old" }}\n'
                      f'jetstream {{ store_dir: "{directory / "store"}" }}\n')
    old = subprocess.Popen([str(binary_path()), "-c", str(config)], start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reaped = threading.Thread(target=old.wait, daemon=True)
    reaped.start()
    server = EmbeddedNats(tmp_path)
    try:
        async with asyncio.timeout(20):
            while not await _answers(port, None):
                await asyncio.sleep(0.05)
        (directory / "server.json").write_text(json.dumps({"pid": old.pid, "port": port}))
        info = await server.start()
        await asyncio.to_thread(reaped.join, 10)
        assert old.returncode is not None, "the token server was stopped"
        assert info.port != port
        bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
            _env_file=None, hermes_data_dir=tmp_path))
        await bus.close()
    finally:
        await server.stop()
        if old.poll() is None:
            old.kill()


def test_a_capability_pinned_by_the_traffic_split_goes_to_no_other_agent() -> None:
    """An enrolled agent may offer any capability under its own name; HUB_TRAFFIC names
    the agents a capability may go to, and no other gets it, even when they are down."""
    from hub.discovery import Candidate, choose

    mallory = Candidate("mallory", 0.0, 1, "9", ("validate_claim",))
    honest = Candidate("claims-validator", 90.0, 1, "1", ("validate_claim",))
    pinned = {"claims-validator": 100.0}
    assert all(choose([mallory, honest], pinned) == honest for _ in range(50))
    assert choose([mallory], pinned) is None


def test_the_documented_permissions_are_the_ones_issued() -> None:
    """docs/hub.md lists, ready to paste, exactly the permissions this code issues."""
    from hub.identity import nsc_command

    doc = (Path(__file__).resolve().parents[2] / "docs" / "hub.md").read_text()
    for identity in ("hub", "schema-admin", "claims-validator"):
        assert nsc_command(identity) in doc, f"docs/hub.md: the permissions of {identity}"

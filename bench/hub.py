"""The hub's cost over bare NATS, in one run against one embedded nats-server.

1. A task round trip through the hub (task_request published to JetStream, pulled by a
   do-nothing agent, its task_response published back, correlation headers, HMP
   validation on both ends) against raw nats-py request-reply to a do-nothing responder.
2. 1 MiB context_update throughput (HMP validation of the gzip+base64 data, a JetStream
   publish of the encoded message; the sender's compression is done once, outside the
   timing, and printed) against raw JetStream publishes of the same 1 MiB, for two kinds
   of data: JSON records (what shared context usually is) and random bytes (which gzip
   cannot shrink, so base64 makes the message a third larger than the raw one).

3. A three-step workflow (three do-nothing agents one after another, through the
   executor: run state kept in its bucket before and after each step, the steps' requests
   and answers on the bus) against three bare task round trips, alternating.
4. An A2A SendMessage to a do-nothing hub agent through the gateway's A2A edge (the
   a2a-sdk client, real HTTP, the task kept in the embedded Valkey) against the bare hub
   round trip, alternating.
5. A prompt of the Synadia Agent Protocol to the same agent through the bridge (the stock
   client SDK, its stream read to the terminator: ack, answer, terminator; the bridge's
   task_request and its answer on the bus) against the bare hub round trip, alternating;
   unsigned, and signed (the SDK then asks the server who it is before each prompt).

    .venv/bin/python bench/hub.py [--requests 500] [--contexts 40] [--runs 200]

Targets on this machine: hub round trip p50 <= raw + 1 ms; 1 MiB throughput >= 80% of raw;
a workflow adds <= 2 ms p50 per step over the bare round trips; the bridge adds <= 1 ms p50
over the bare round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

# This script is bench/hub.py: keep its folder off the path, or it would shadow the package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from nats.js.api import StreamConfig  # noqa: E402

from hub import Agent, AgentRunner, Bus, ContextUpdate, HubSettings, TaskRequest, TaskResponse  # noqa: E402
from hub.bus import Headers  # noqa: E402
from hub.server import EmbeddedNats  # noqa: E402

MIB = 1024 * 1024


class Noop(Agent):
    agent_id = "bench-noop"

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        return self.respond(request, "success")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def round_trips(bus: Bus, n: int) -> tuple[list[float], list[float]]:
    async def respond(msg: object) -> None:
        await msg.respond(b"{}")  # type: ignore[attr-defined]

    await bus.nc.subscribe("bench.raw", cb=respond)
    raw, hub = [], []
    for _ in range(20):  # warm both paths
        await bus.nc.request("bench.raw", b"{}", timeout=5)
        await bus.request(Noop.agent_id, TaskRequest(sender_id="bench", intent="noop",
                                                     deadline_ms=5000))
    for _ in range(n):
        started = time.perf_counter()
        await bus.nc.request("bench.raw", b'{"type": "task_request"}', timeout=5)
        raw.append(time.perf_counter() - started)
        started = time.perf_counter()
        answer = await bus.request(Noop.agent_id, TaskRequest(
            sender_id="bench", intent="noop", deadline_ms=5000))
        hub.append(time.perf_counter() - started)
        assert answer.status == "success"
    return raw, hub


def records(size: int) -> bytes:
    """``size`` bytes of JSON records, the shape shared context usually has."""
    rows = [{"id": i, "claim": f"C-{i}", "status": "open" if i % 3 else "closed",
             "amount": round(i * 13.7, 2), "note": f"adjuster visit {i % 17} pending"}
            for i in range(size // 40)]
    return json.dumps(rows).encode()[:size]


async def throughput(bus: Bus, n: int, blob: bytes, rounds: int = 5
                     ) -> tuple[float, float, float]:
    """Raw 1 MiB JetStream publishes against context_updates carrying ``blob``, in
    alternating rounds of ``n`` messages (so drift in the machine's load hits both): the
    median messages/s of each, and the milliseconds the sender's packing took (gzip and
    base64, once: it is the sender's work, timed apart)."""
    suffix = uuid.uuid4().hex[:8]
    raw_subject, hub_subject = f"bench.raw.{suffix}", f"bench.hub.{suffix}"
    await bus.js.add_stream(StreamConfig(name=f"BENCH_RAW_{suffix}", subjects=[raw_subject]))
    await bus.js.add_stream(StreamConfig(name=f"BENCH_HUB_{suffix}", subjects=[hub_subject]))
    headers = Headers("bench", "bench")
    started = time.perf_counter()
    data = ContextUpdate.pack(blob)
    packing = (time.perf_counter() - started) * 1000
    raw_rates, hub_rates, version = [], [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(n):
            await bus.js.publish(raw_subject, blob)
        raw_rates.append(n / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(n):
            version += 1
            update = ContextUpdate(sender_id="bench", context_id="ctx-1", version=version,
                                   data=data, expires_at=time.time() + 60)
            await bus.publish(hub_subject, update, headers)
        hub_rates.append(n / (time.perf_counter() - started))
    return statistics.median(raw_rates), statistics.median(hub_rates), packing


async def workflow_overhead(bus: Bus, runs: int) -> tuple[list[float], list[float]]:
    """Three bare round trips against a three-step workflow over the same agent, one of
    each in turn: the seconds each took."""
    from hub.workflows.executor import WorkflowExecutor
    from hub.workflows.store import WorkflowStore

    executor = WorkflowExecutor(bus, WorkflowStore(bus), agent_id="bench-executor")
    await executor.start()
    runner = AgentRunner(bus, executor)
    await runner.start()
    await executor.store.put({"workflow_id": "bench-three", "steps": [
        {"id": f"s{i}", "agent": Noop.agent_id, "intent": "noop",
         **({"after": [f"s{i - 1}"]} if i else {})} for i in range(3)]})
    bare, flow = [], []
    try:
        for n in range(runs + 10):
            started = time.perf_counter()
            for _ in range(3):
                answer = await bus.request(Noop.agent_id, TaskRequest(
                    sender_id="bench", intent="noop", deadline_ms=5000))
            took_bare = time.perf_counter() - started
            started = time.perf_counter()
            answer = await bus.request("bench-executor", TaskRequest(
                sender_id="bench", intent="run_workflow", deadline_ms=10_000,
                arguments={"workflow_id": "bench-three", "input": {}}))
            took_flow = time.perf_counter() - started
            assert answer.status == "success", answer
            if n >= 10:  # the first ten warm both paths
                bare.append(took_bare)
                flow.append(took_flow)
    finally:
        await runner.stop()
        await executor.stop()
    return bare, flow


async def a2a_round_trips(settings: HubSettings, bus: Bus, n: int
                          ) -> tuple[list[float], list[float]]:
    """A2A SendMessage through the gateway's edge against the bare hub round trip."""
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import a2a_pb2 as pb
    from aiohttp import web

    from gateway import GatewaySettings
    from gateway.app import create_app

    app = create_app(GatewaySettings(  # type: ignore[call-arg]
        _env_file=None, nats_url=[u.get_secret_value() for u in settings.nats_url],
        nats_creds_file=settings.nats_creds_file, hermes_data_dir=settings.hermes_data_dir,
        hermes_hub=True, hub_executor=False))
    site_runner = web.AppRunner(app, access_log=None)
    await site_runner.setup()
    site = web.TCPSite(site_runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site_runner.addresses[0][1]}"
    bare, a2a = [], []
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            card_url = f"{base}/a2a/{Noop.agent_id}/.well-known/agent-card.json"
            for _ in range(400):  # until the gateway's discovery has the agent's heartbeat
                if (await http.get(card_url)).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            card = await A2ACardResolver(http, f"{base}/a2a/{Noop.agent_id}").get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)
                                   ).create(card)
            for i in range(n + 10):
                started = time.perf_counter()
                await bus.request(Noop.agent_id, TaskRequest(sender_id="bench", intent="noop",
                                                             deadline_ms=5000))
                took_bare = time.perf_counter() - started
                request = pb.SendMessageRequest(message=pb.Message(
                    message_id=uuid.uuid4().hex, role=pb.ROLE_USER,
                    parts=[pb.Part(text="noop")]))
                started = time.perf_counter()
                [event] = [e async for e in client.send_message(request)]
                took = time.perf_counter() - started
                assert event.task.status.state == pb.TASK_STATE_COMPLETED, event
                if i >= 10:
                    bare.append(took_bare)
                    a2a.append(took)
    finally:
        await site_runner.cleanup()
    return bare, a2a


async def protocol_round_trips(settings: HubSettings, server: EmbeddedNats, bus: Bus,
                               n: int) -> dict[str, list[float]]:
    """A protocol prompt through the bridge (unsigned, and signed) against the bare hub
    round trip and the protocol alone (a prompt to a do-nothing agent of the stock host
    SDK, no hub behind it), one of each in turn."""
    import contextlib

    import nats
    from synadia_ai.agent_service import AgentService
    from synadia_ai.agents import Agents, DiscoverFilter, Identity, signer_from_creds_file

    from hub.bridges import Bridges
    from hub.services import hub_services

    async with contextlib.AsyncExitStack() as stack:
        for service in hub_services(bus, settings)[:3]:  # discovery, deadlines, enrolment
            await service.start()
            stack.push_async_callback(service.stop)
        bridges = Bridges(settings.model_copy(update={
            "hub_bridge_creds_file": str(server.creds("bridge")),
            "hub_agent_protocol_owner": "bench", "hub_agent_protocol_unsigned": True,
            "hub_agent_protocol_scan": 0.5}))
        stack.push_async_callback(bridges.stop)
        await bridges.start()
        creds = str(server.creds("sap-bench-caller"))
        nc = await nats.connect(settings.nats_url[0].get_secret_value(),
                                user_credentials=creds, inbox_prefix="_INBOX.sap-bench-caller")
        stack.push_async_callback(nc.close)
        plain = Agents(nc=nc)
        signed = Agents(nc=nc, identity=Identity(signer=signer_from_creds_file(creds)))
        stack.push_async_callback(plain.close)
        stack.push_async_callback(signed.close)
        agent = None
        for _ in range(400):  # until the bridge has registered the agent
            found = [a for a in await plain.discover(filter=DiscoverFilter(owner="bench"))
                     if a.metadata.get("hmp_agent_id") == Noop.agent_id]
            if found:
                agent = found[0]
                break
            await asyncio.sleep(0.05)
        assert agent is not None, "the bridge did not register the agent"
        as_signed = (await signed.discover(filter=DiscoverFilter(owner="bench")))
        agent_signed = next(a for a in as_signed
                            if a.metadata.get("hmp_agent_id") == Noop.agent_id)
        host = await nats.connect(settings.nats_url[0].get_secret_value(),
                                  user_credentials=str(server.creds("sap-bench-echo")),
                                  inbox_prefix="_INBOX.sap-bench-echo")
        stack.push_async_callback(host.close)
        echo = AgentService(agent="echo", owner="bench-echo", session_name="default", nc=host,
                            max_concurrent_prompts=32)

        async def answer(envelope: object, stream: object) -> None:
            await stream.send("{}")  # type: ignore[attr-defined]

        echo.on_prompt(answer)  # type: ignore[arg-type]
        await echo.start()
        stack.push_async_callback(echo.stop)
        [alone] = await plain.discover(filter=DiscoverFilter(owner="bench-echo"))
        took: dict[str, list[float]] = {"bare": [], "alone": [], "unsigned": [], "signed": []}
        for i in range(n + 10):
            started = time.perf_counter()
            await bus.request(Noop.agent_id, TaskRequest(sender_id="bench", intent="noop",
                                                         deadline_ms=5000))
            now = {"bare": time.perf_counter() - started}
            for name, target in (("alone", alone), ("unsigned", agent),
                                 ("signed", agent_signed)):
                started = time.perf_counter()
                chunks = [c async for c in target.prompt("noop")]
                now[name] = time.perf_counter() - started
                assert len(chunks) == 2, chunks
            if i >= 10:
                for name, seconds in now.items():
                    took[name].append(seconds)
    return took


async def main(requests: int, contexts: int, runs: int, only: str = "all") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(Path(tmp))
        info = await server.start()
        settings = HubSettings(_env_file=None, nats_url=info.url,  # type: ignore[call-arg]
                               nats_creds_file=str(server.creds("hub")),
                               hermes_data_dir=Path(tmp))
        bus = await Bus.connect(settings)
        agent_bus = await Bus.connect(settings)
        runner = AgentRunner(agent_bus, Noop())
        await runner.start()
        try:
            if only == "all":
                raw, hub = await round_trips(bus, requests)
                shapes = {name: await throughput(bus, contexts, blob) for name, blob in (
                    ("JSON records", records(MIB)), ("random bytes", os.urandom(MIB)))}
                bare, flow = await workflow_overhead(bus, runs)
                bare_hop, a2a = await a2a_round_trips(settings, bus, runs)
            protocol = await protocol_round_trips(settings, server, bus, runs)
        finally:
            await runner.stop()
            await agent_bus.close()
            await bus.close()
            await server.stop()
    ms = 1000
    if only == "all":
        _print_hub(requests, contexts, runs, raw, hub, shapes, bare, flow, bare_hop, a2a)
    direct = protocol["bare"]
    print(f"Synadia Agent Protocol prompt (stock client SDK, through the bridge) against the "
          f"bare hub round trip, {runs} of each alternating:")
    print(f"  bare hub round trip        p50 {statistics.median(direct) * ms:6.2f} ms   "
          f"p99 {pct(direct, 0.99) * ms:6.2f} ms")
    for name, label in (("alone", "the protocol alone (echo)"), ("unsigned", "bridged prompt"),
                        ("signed", "bridged prompt, signed")):
        took = protocol[name]
        print(f"  {label:26} p50 {statistics.median(took) * ms:6.2f} ms   "
              f"p99 {pct(took, 0.99) * ms:6.2f} ms   (bare + "
              f"{(statistics.median(took) - statistics.median(direct)) * ms:.2f} ms, "
              f"x{statistics.median(took) / statistics.median(direct):.2f})")
    print("  target: the bridge adds <= 1 ms at p50 (the unsigned prompt over the bare trip)")


def _print_hub(requests: int, contexts: int, runs: int, raw: list[float], hub: list[float],
               shapes: dict[str, tuple[float, float, float]], bare: list[float],
               flow: list[float], bare_hop: list[float], a2a: list[float]) -> None:
    ms = 1000
    print(f"task round trip over {requests} requests (one at a time):")
    print(f"  raw nats request-reply   p50 {statistics.median(raw) * ms:6.2f} ms   "
          f"p99 {pct(raw, 0.99) * ms:6.2f} ms")
    print(f"  hub task_request/response p50 {statistics.median(hub) * ms:6.2f} ms   "
          f"p99 {pct(hub, 0.99) * ms:6.2f} ms")
    added = (statistics.median(hub) - statistics.median(raw)) * ms
    print(f"  hub adds {added:.2f} ms at p50 (target <= 1 ms)")
    print(f"1 MiB context_update throughput, median of 5 alternating rounds of {contexts} "
          "messages:")
    for name, (raw_rate, hub_rate, packing) in shapes.items():
        print(f"  {name + ':':13} raw JetStream publish {raw_rate:6.1f} msg/s, hub "
              f"context_update {hub_rate:6.1f} msg/s ({hub_rate / raw_rate * 100:.0f}% of raw; "
              f"target >= 80%); the sender's gzip+base64 took {packing:.1f} ms")
    per_step = (statistics.median(flow) - statistics.median(bare)) / 3 * ms
    print(f"three-step workflow against three bare round trips, {runs} of each alternating:")
    print(f"  three bare round trips   p50 {statistics.median(bare) * ms:6.2f} ms   "
          f"p99 {pct(bare, 0.99) * ms:6.2f} ms")
    print(f"  the workflow             p50 {statistics.median(flow) * ms:6.2f} ms   "
          f"p99 {pct(flow, 0.99) * ms:6.2f} ms")
    print(f"  the executor adds {per_step:.2f} ms per step at p50 (target <= 2 ms)")
    print(f"A2A SendMessage (a2a-sdk client, the gateway's edge) against the bare hub round "
          f"trip, {runs} of each alternating:")
    print(f"  bare hub round trip      p50 {statistics.median(bare_hop) * ms:6.2f} ms   "
          f"p99 {pct(bare_hop, 0.99) * ms:6.2f} ms")
    print(f"  A2A SendMessage          p50 {statistics.median(a2a) * ms:6.2f} ms   "
          f"p99 {pct(a2a, 0.99) * ms:6.2f} ms   (adds "
          f"{(statistics.median(a2a) - statistics.median(bare_hop)) * ms:.2f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--contexts", type=int, default=40)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--only", choices=["all", "protocol"], default="all",
                        help="protocol: only the Synadia Agent Protocol bridge's round trip")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.contexts, args.runs, args.only))

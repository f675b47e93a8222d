"""The hub's cost over bare NATS, in one run against one embedded nats-server.

1. A task round trip through the hub (task_request published to JetStream, pulled by a
   do-nothing agent, its task_response published back, correlation headers, HMP
   validation on both ends) against raw nats-py request-reply to a do-nothing responder.
2. 1 MiB context_update throughput (HMP validation of the gzip+base64 data, a JetStream
   publish of the encoded message; the sender's compression is done once, outside the
   timing, and printed) against raw JetStream publishes of the same 1 MiB, for two kinds
   of data: JSON records (what shared context usually is) and random bytes (which gzip
   cannot shrink, so base64 makes the message a third larger than the raw one).

    .venv/bin/python bench/hub.py [--requests 500] [--contexts 40]

Targets on this machine: hub round trip p50 <= raw + 1 ms; 1 MiB throughput >= 80% of raw.
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


async def main(requests: int, contexts: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(Path(tmp))
        info = await server.start()
        settings = HubSettings(_env_file=None, nats_url=info.url,  # type: ignore[call-arg]
                               hermes_data_dir=Path(tmp))
        bus = await Bus.connect(settings)
        agent_bus = await Bus.connect(settings)
        runner = AgentRunner(agent_bus, Noop())
        await runner.start()
        try:
            raw, hub = await round_trips(bus, requests)
            shapes = {name: await throughput(bus, contexts, blob) for name, blob in (
                ("JSON records", records(MIB)), ("random bytes", os.urandom(MIB)))}
        finally:
            await runner.stop()
            await agent_bus.close()
            await bus.close()
            await server.stop()
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--contexts", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.contexts))

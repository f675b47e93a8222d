"""Bursts of first messages through the signed webhook: the gateway's CPU per ingested
request and the acknowledgement latency, burst after burst.

The ack p99 of ``bench/gateway_load.py`` is set by its first 200 messages, which arrive at
the same instant: one process reads, checks and queues them one after another, and the
last is acknowledged only when all of it is done. So that figure is close to the burst's
CPU per request times the burst size, and this bench measures that CPU directly: each
burst goes to connections opened beforehand, and the gateway's CPU is read from
``/proc/<pid>/task/*/schedstat`` (nanoseconds; ``/proc/<pid>/stat`` counts 10 ms ticks,
about one whole burst) just before the first request and just after the last ack.
The gateway runs one worker and no model, so the tasks the burst queues are answered
"no model configured", after the burst: a worker claims nothing while ingests wait for
the store (``WorkQueue.quiet``).

The floor is the same bursts against a server that only answers 202, on uvloop as
``serve`` runs: ``app`` (the default), an aiohttp application (router, request and
response objects, as the gateway's); ``lowlevel``, aiohttp's low-level ``web.Server`` (no
application, no router); ``raw``, an ``asyncio.Protocol`` that finds each request's end by
its Content-Length and writes a prepared response (no HTTP library: what the event loop
and the kernel cost alone, a measuring device, not a server). The gateway and the floor
take turns, ``--runs`` of each (which goes first alternates), each a fresh process
sent ``--bursts`` bursts; a run's figure is the median over its bursts after the first
(whose requests meet cold code), and the figures printed are the medians over the runs,
and their ratios: the gateway's to the floor's (issue 46's targets: CPU per request and
ack p99 both <= 1.5x the ``app`` floor's).

    .venv/bin/python bench/ingest_burst.py [--runs 3] [--bursts 11] [--size 200]
                                           [--floor app|lowlevel|raw] [--only SERVER]

``--only gateway`` (or ``app``, ``lowlevel``, ``raw``) measures one server, no ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gateway_load import _NULL_SERVER, _UVLOOP, SECRET, RawHTTP, percentile

from adapters.webhook import signed_headers

ROOT = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of a process, from the scheduler's nanosecond counters."""
    total = 0
    for thread in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total += int((thread / "schedstat").read_text().split()[0])
    return total / 1e9


# aiohttp's low-level server: a handler per request, no application or router.
_LOWLEVEL_SERVER = _UVLOOP + """
import asyncio, sys
from aiohttp import web

async def accept(request):
    await request.read()
    return web.json_response({"task_id": "-"}, status=202)

async def main():
    runner = web.ServerRunner(web.Server(accept, access_log=None), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(sys.argv[1])).start()
    await asyncio.Event().wait()

asyncio.run(main())
"""

# No HTTP library: the requests' ends found by Content-Length, a prepared 202 written.
_RAW_SERVER = _UVLOOP + """
import asyncio, re, sys
LENGTH = re.compile(rb"\\r\\ncontent-length:[ \\t]*([0-9]+)", re.IGNORECASE)
BODY = b'{"task_id":"-"}'
RESPONSE = (b"HTTP/1.1 202 Accepted\\r\\nContent-Type: application/json\\r\\n"
            b"Content-Length: %d\\r\\n\\r\\n%s" % (len(BODY), BODY))

class Accept(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while (end := self.buffer.find(b"\\r\\n\\r\\n")) >= 0:
            found = LENGTH.search(self.buffer, 0, end + 2)
            size = end + 4 + (int(found[1]) if found else 0)
            if len(self.buffer) < size:
                return
            self.buffer = self.buffer[size:]
            self.transport.write(RESPONSE)

async def main():
    await asyncio.get_running_loop().create_server(Accept, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()

asyncio.run(main())
"""

#: ``--floor``'s choices: what each is, and its script.
FLOORS = {"app": ("do-nothing aiohttp app", _NULL_SERVER),
          "lowlevel": ("do-nothing aiohttp low-level server", _LOWLEVEL_SERVER),
          "raw": ("do-nothing asyncio protocol, no HTTP library", _RAW_SERVER)}


def start_server(floor: str | None, port: int, data: Path) -> subprocess.Popen[bytes]:
    if floor:
        return subprocess.Popen([sys.executable, "-c", FLOORS[floor][1], str(port)])
    env = {**os.environ, "HERMES_DATA_DIR": str(data), "LOG_LEVEL": "WARNING",
           "HERMES_WORKERS": "1", "LLM_PROVIDER": "", "LLM_MODEL_NAME": "",
           "HERMES_WEBHOOK_SECRETS": json.dumps({"load": SECRET}),
           "SLACK_BOT_TOKEN": "", "TELEGRAM_BOT_TOKEN": "", "REDIS_URL": ""}
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)], env=env,
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=(data / "gateway.log").open("wb"))


async def wait_until_listening(port: int, server: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if server.poll() is not None:
            raise SystemExit("the server exited at start")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise SystemExit("the server did not start")


async def burst(pid: int, port: int, n: int, size: int) -> tuple[float, list[float]]:
    """CPU seconds per request of one burst, and its ack times."""
    connections = [RawHTTP("127.0.0.1", port) for _ in range(size)]
    for http in connections:  # opened first: the burst measures the requests alone
        await http.connect()
    bodies = [json.dumps({"conversation_id": f"b{n}-c{i}", "user_id": f"u{i}",
                          "text": f"hello {i}"}).encode() for i in range(size)]

    async def post(http: RawHTTP, body: bytes) -> float:
        status, _ = await http.post("/webhook/load", body, signed_headers(SECRET, body))
        assert status == 202, status
        return time.perf_counter() - http.written

    before = cpu_seconds(pid)
    acks = await asyncio.gather(*(post(h, b) for h, b in zip(connections, bodies, strict=True)))
    used = cpu_seconds(pid) - before
    await asyncio.gather(*(h.close() for h in connections))
    return used / size, list(acks)


#: The targets (issue 46): the gateway's figure over the ``app`` floor's, measured beside it.
CPU_TARGET = 1.5
P99_TARGET = 1.5


@dataclass(frozen=True)
class Run:
    """One server's figures in one run: medians over its bursts after the first."""

    cpu: float  # seconds of CPU per request
    p50: float
    p99: float


async def one_run(floor: str | None, bursts: int, size: int, port: int) -> Run:
    """A fresh server (``floor``, or the gateway for None) sent ``bursts`` bursts."""
    data = Path(tempfile.mkdtemp(prefix="hermes-burst-"))
    server = start_server(floor, port, data)
    try:
        await wait_until_listening(port, server)
        await asyncio.sleep(0.5)
        cpu, p50, p99 = [], [], []
        for n in range(bursts):
            per_request, acks = await burst(server.pid, port, n, size)
            cpu.append(per_request)
            p50.append(percentile(acks, .5))
            p99.append(percentile(acks, .99))
            await asyncio.sleep(1.0)  # the queued tasks are answered meanwhile
    finally:
        server.terminate()
        server.wait(20)
    return Run(statistics.median(cpu[1:]), statistics.median(p50[1:]),
               statistics.median(p99[1:]))


def describe(name: str, runs: list[Run]) -> str:
    cpu = " / ".join(f"{r.cpu * 1e6:.1f}" for r in runs)
    p99 = " / ".join(f"{r.p99 * 1000:.1f}" for r in runs)
    return (f"{name}\n"
            f"  CPU per request  {statistics.median(r.cpu for r in runs) * 1e6:7.1f} us"
            f"   (runs: {cpu})\n"
            f"  ack p50          {statistics.median(r.p50 for r in runs) * 1000:7.2f} ms\n"
            f"  ack p99          {statistics.median(r.p99 for r in runs) * 1000:7.2f} ms"
            f"   (runs: {p99})")


async def main(*, runs: int, bursts: int, size: int, floor: str, only: str | None,
               port: int) -> None:
    servers: list[str] = [only] if only else ["gateway", floor]
    found: dict[str, list[Run]] = {name: [] for name in servers}
    for n in range(runs):
        for name in (servers if n % 2 == 0 else servers[::-1]):
            found[name].append(await one_run(None if name == "gateway" else name,
                                             bursts, size, port))
    print(f"{runs} run(s) of each server, taking turns; a run: {bursts - 1} bursts of "
          f"{size} first messages on open connections (medians, first burst left out); "
          "figures: medians over the runs")
    for name in servers:
        what = "gateway, 1 worker, no model" if name == "gateway" \
            else f"{FLOORS[name][0]} (uvloop)"
        print(describe(what, found[name]))
    if only:
        return
    gateway, base = found["gateway"], found[floor]
    cpu = statistics.median(r.cpu for r in gateway) / statistics.median(r.cpu for r in base)
    p99 = statistics.median(r.p99 for r in gateway) / statistics.median(r.p99 for r in base)
    pairs = " / ".join(f"{g.cpu / f.cpu:.2f}" for g, f in zip(gateway, base, strict=True))
    print(f"gateway / {floor} floor\n"
          f"  CPU per request  {cpu:7.2f}x   (each run's pair: {pairs})"
          + (f"   target <= {CPU_TARGET}" if floor == "app" else "") + "\n"
          f"  ack p99          {p99:7.2f}x"
          + (f"   target <= {P99_TARGET}" if floor == "app" else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each server")
    parser.add_argument("--bursts", type=int, default=11, help="bursts in a run")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--port", type=int, default=18991)
    parser.add_argument("--floor", default="app", choices=sorted(FLOORS),
                        help="the do-nothing server measured beside the gateway")
    parser.add_argument("--only", choices=["gateway", *sorted(FLOORS)],
                        help="measure this server alone")
    args = parser.parse_args()
    asyncio.run(main(runs=args.runs, bursts=args.bursts, size=args.size, floor=args.floor,
                     only=args.only, port=args.port))

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
"no model configured", mostly after the burst. ``--floor`` measures the same bursts
against a server that only answers 202, on uvloop as ``serve`` runs: ``app``, an aiohttp
application (router, request and response objects, as the gateway's); ``lowlevel``,
aiohttp's low-level ``web.Server`` (no application, no router); ``raw``, an
``asyncio.Protocol`` that finds each request's end by its Content-Length and writes a
prepared response (no HTTP library: what the event loop and the kernel cost alone, a
measuring device, not a server).

    .venv/bin/python bench/ingest_burst.py [--bursts 21] [--size 200]
                                           [--floor [app|lowlevel|raw]]

Prints medians over the bursts after the first (its requests meet cold code).
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


async def main(bursts: int, size: int, floor: str | None, port: int) -> None:
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
    what = f"{FLOORS[floor][0]} (uvloop)" if floor else "gateway, 1 worker, no model"
    print(f"{what}: {bursts - 1} bursts of {size} first messages on open connections "
          "(medians, first burst left out)")
    print(f"  CPU per request  {statistics.median(cpu[1:]) * 1e6:7.1f} us   "
          f"(first burst {cpu[0] * 1e6:.1f} us)")
    print(f"  ack              p50 {statistics.median(p50[1:]) * 1000:6.2f} ms   "
          f"p99 {statistics.median(p99[1:]) * 1000:6.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=21)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--port", type=int, default=18991)
    parser.add_argument("--floor", nargs="?", const="app", choices=sorted(FLOORS),
                        help="a do-nothing server instead of the gateway (default: app)")
    args = parser.parse_args()
    asyncio.run(main(args.bursts, args.size, args.floor, args.port))

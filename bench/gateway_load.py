"""Load through the signed webhook channel.

N conversations talk at once, each sending M messages one after another (the next after the
previous answer arrived), to a gateway running in its own process (``hermes-gateway serve``
with an embedded Valkey), backed by the scripted model server with a fixed latency (in a
process of its own, as a remote model would be). The answers come back to a callback
receiver in this process.

Each conversation is one HTTP/1.1 connection, opened for its first message and kept alive
for the next ones, as a platform's sender would. The requests are written by a minimal
HTTP client (``RawHTTP``, prepared bytes on an asyncio stream) rather than aiohttp's: with
aiohttp's client, this process needed ~0.25 ms of CPU per request, so 200 requests "at the
same instant" left it over ~50 ms apart and the measured ack of the last one was mostly
this process's own queue (see ``--floor``, which measures both clients against a
do-nothing server).

Prints ack latency p50/p99 (all messages; then apart, the first message of every
conversation, which all arrive at the same instant on fresh connections, and the later
ones), end-to-end throughput, gateway-added latency (end-to-end minus the model time the
gateway itself measured for the task, from its TaskReport), the gateway's CPU per answer,
and lost, duplicated or wrong answers.

Ack and end-to-end times run from the moment the request is written to the connection.
For the first messages the bench also prints them from before the connection was opened:
this one process opens all 200 connections before it gets round to writing any request
on them (each connect is a step of its own event loop), so that figure carries up to
~25 ms of the load generator's own queue, not the gateway's.

    .venv/bin/python bench/gateway_load.py [--conversations 200] [--messages 5]
                                           [--model-latency 0.05] [--workers N]
                                           [--processes 1] [--replicas 1] [--floor]
                                           [--sync 50]

``--sync N`` then sends N synchronous ``POST /agent/run`` calls one after another (the
gateway otherwise idle) and prints what each took beyond the model time its task measured
(the model server's latency, plus its own and the HTTP time to it).

``--processes N`` runs the gateway as ``serve --processes N`` (N processes on one port);
``--replicas R`` runs R separate gateways on consecutive ports, conversations spread
over them.

``--store cluster`` runs the gateways on a Redis Cluster of three primaries with a replica
each, started on loopback from the valkey-server binary the project ships
(``tests/clusters.py``), with REDIS_CLUSTER_NODES (writes acknowledged by a replica:
HERMES_STORE_REPLICA_ACKS=1, the default there); ``--store embedded`` (the default) is the
embedded Valkey. Either way the bench prints the store's commands per answer (the servers'
own count, every primary's, from INFO).

``--floor`` first sends the same burst of first messages to an aiohttp app that only
answers 202 (in its own process), on fresh and on kept-alive connections, with this
client and with aiohttp's: the part of the ack time that is the HTTP stack and the load
generator, not the gateway.

Targets on the reference machine (2 cores): ack p99 < 50 ms at 200 concurrent
conversations; gateway-added latency p50 < 5 ms; zero lost or duplicated answers.
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
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from redis.asyncio import Redis

from adapters.webhook import signed_headers

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-secret"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_cpu(pid: int) -> float:
    """CPU seconds of a gateway and of the serving processes it started (not its Valkey)."""
    total = cpu_seconds(pid)
    for thread in Path(f"/proc/{pid}/task").iterdir():  # children are listed per thread
        for child in (thread / "children").read_text().split():
            with contextlib.suppress(OSError):
                if b"gateway.cli" in Path(f"/proc/{child}/cmdline").read_bytes():
                    total += cpu_seconds(int(child))
    return total


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


# The start of a do-nothing server's script: on uvloop when it is installed, as `serve` runs.
_UVLOOP = """
try:
    import uvloop
    uvloop.install()
except ImportError:
    pass
"""

_NULL_SERVER = _UVLOOP + """
import sys
from aiohttp import web

async def accept(request):
    await request.read()
    return web.json_response({"task_id": "-"}, status=202)

app = web.Application()
app.router.add_post("/webhook/{source}", accept)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""

# The scripted model, answering "answer to: <the last user message>" after a fixed latency.
_MODEL_SERVER = """
import asyncio, sys
from agent_core.models.replay import ReplayModelServer, Reply

def echo(path, body):
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    return Reply("answer to: " + last["content"])

async def serve():
    model = ReplayModelServer(responder=echo, latency=float(sys.argv[1]))
    await model.start()
    print(model.openai_url, flush=True)
    await asyncio.Event().wait()

asyncio.run(serve())
"""


class RawHTTP:
    """One kept-alive HTTP/1.1 connection writing prepared requests: the load generator's
    client, a few µs of CPU per request."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        #: When the last request was written (after connecting, if it had to).
        self.written = 0.0

    async def connect(self) -> None:
        """Open the connection now, if it is not (a first ``post`` opens it otherwise)."""
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """Status and body of a POST (connecting first if needed)."""
        await self.connect()
        assert self._reader is not None and self._writer is not None
        self.written = time.perf_counter()
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                           f"Content-Length: {len(body)}\r\n{head}\r\n".encode() + body)
        status = int((await self._reader.readline()).split()[1])
        length = 0
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self._reader.readexactly(length)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._writer = None


def first_message(n: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"conversation_id": f"c{n}", "text": f"c{n}-m0"}).encode()
    return body, signed_headers(SECRET, body)


async def raw_burst(connections: list[RawHTTP], path: str) -> tuple[list[float], list[float]]:
    """One message per connection, all sent at the same instant: the ack times (request
    written to response read) and the same from before connecting."""

    async def post(n: int, http: RawHTTP) -> tuple[float, float]:
        body, headers = first_message(n)
        sent = time.perf_counter()
        status, _ = await http.post(path, body, headers)
        assert status == 202, status
        done = time.perf_counter()
        return done - http.written, done - sent

    timed = await asyncio.gather(*(post(n, h) for n, h in enumerate(connections)))
    return [ack for ack, _ in timed], [whole for _, whole in timed]


async def aiohttp_burst(session: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    """The same with aiohttp's client."""

    async def post(n: int) -> float:
        body, headers = first_message(n)
        sent = time.perf_counter()
        async with session.post(url, data=body, headers=headers) as r:
            await r.read()
        return time.perf_counter() - sent

    return list(await asyncio.gather(*(post(n) for n in range(count))))


async def wait_ready(session: aiohttp.ClientSession, base: str, *, seconds: float = 15.0,
                     exited: Callable[[], bool] = lambda: False) -> None:
    """Return once ``base``'s /readyz answers 200; SystemExit when ``exited()`` says the
    gateway's process ended, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if exited():
            raise SystemExit(f"the gateway at {base} exited at start")
        try:
            async with session.get(f"{base}/readyz") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit(f"the gateway at {base} did not start")


def ms(values: list[float]) -> str:
    return (f"p50 {percentile(values, .5) * 1000:7.2f} ms   "
            f"p99 {percentile(values, .99) * 1000:7.2f} ms")


async def floor(conversations: int, port: int) -> None:
    """The same burst of first messages against an aiohttp app that only answers 202, in
    its own process: what the HTTP stack and the load generator cost before any gateway
    work, with this bench's client and with aiohttp's."""
    server = subprocess.Popen(  # noqa: ASYNC220 - starts and returns
        [sys.executable, "-c", _NULL_SERVER, str(port)])
    url = f"http://127.0.0.1:{port}/webhook/load"
    try:
        async with aiohttp.ClientSession() as probe:
            for _ in range(100):
                try:
                    async with probe.post(url) as r:
                        await r.read()
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        connections = [RawHTTP("127.0.0.1", port) for _ in range(conversations)]
        for label in ("fresh", "kept-alive"):
            acks, with_connect = await raw_burst(connections, "/webhook/load")
            print(f"floor: {conversations} messages at once to a do-nothing aiohttp app, "
                  f"{label} connections, this bench's client: {ms(acks)}"
                  + (f"; from before connecting {ms(with_connect)}" if label == "fresh" else ""))
        await asyncio.gather(*(c.close() for c in connections))
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=conversations + 10)) as session:
            for label in ("fresh", "kept-alive"):
                acks = await aiohttp_burst(session, url, conversations)
                print(f"floor: {conversations} messages at once to a do-nothing aiohttp app, "
                      f"{label} connections, aiohttp's client (from before connecting): "
                      f"{ms(acks)}")
    finally:
        server.terminate()
        server.wait(10)


async def sync_runs(session: aiohttp.ClientSession, base: str, runs: int, token: str
                    ) -> list[float]:
    """Seconds each of ``runs`` synchronous POST /agent/run calls (one after another, on a
    quiet gateway, each its own conversation, with the gateway's local token) took beyond
    the model time its task measured."""
    added = []
    headers = {"Authorization": f"Bearer {token}"}
    for i in range(runs):
        body = {"conversation_id": f"sync-{i}", "user_id": "bench", "text": f"sync {i}"}
        started = time.perf_counter()
        async with session.post(f"{base}/agent/run", json=body, headers=headers) as r:
            view = await r.json()
        elapsed = time.perf_counter() - started
        assert r.status == 200 and view["text"] == f"answer to: sync {i}", view
        added.append(elapsed - view["report"]["model_time"])
    return added


async def store_commands(data: Path, cluster: Any) -> int:
    """Commands the store's servers have processed (every primary's, on a cluster)."""
    if cluster is not None:
        counts = [int((await n.info("stats"))["total_commands_processed"])
                  for n in await cluster.primaries()]
        return sum(counts)
    from agent_core.store.embedded import EmbeddedValkey

    info = await EmbeddedValkey(data).start()  # the gateway's server, already running
    client = Redis.from_url(info.url)
    try:
        return int((await client.info("stats"))["total_commands_processed"])
    finally:
        await client.aclose()


async def main(conversations: int, messages: int, latency: float, port: int,
               replicas: int, workers: int, processes: int, sync: int,
               store: str = "embedded") -> int:
    answers: dict[str, asyncio.Future[float]] = {}
    received: dict[str, int] = defaultdict(int)

    wrong: list[str] = []
    by_task: dict[str, str] = {}

    async def callback(request: web.Request) -> web.Response:
        body = await request.json()
        key = by_task.get(body["task_id"], "?")
        received[key] += 1
        if body["text"] != f"answer to: {key}":
            wrong.append(body["text"][:200])
        future = answers.get(key)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())
        return web.json_response({"ok": True})

    model = subprocess.Popen(  # noqa: ASYNC220 - starts and returns
        [sys.executable, "-c", _MODEL_SERVER, str(latency)], cwd=ROOT, stdout=subprocess.PIPE)
    assert model.stdout is not None
    model_url = (await asyncio.to_thread(model.stdout.readline)).decode().strip()
    if not model_url:
        raise SystemExit("the model server did not start")
    app = web.Application()
    app.router.add_post("/cb", callback)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    callback_url = f"http://127.0.0.1:{runner.addresses[0][1]}/cb"

    data = Path(tempfile.mkdtemp(prefix="hermes-load-"))
    cluster: Any = None
    if store == "cluster":
        from tests.clusters import start_cluster

        cluster = await start_cluster(data / "cluster")
    env = {**os.environ, "HERMES_DATA_DIR": str(data),
           "LLM_PROVIDER": "openai", "LLM_MODEL_NAME": "bench",
           "LLM_BASE_URL": model_url, "LLM_API_KEY": "sk-bench-0123456789abcdef",
           "LLM_MAX_RETRIES": "0", "AGENT_REPLAN_EVERY": "0", "LOG_LEVEL": "WARNING",
           "HERMES_WORKERS": str(workers),
           "HERMES_WEBHOOK_SECRETS": json.dumps({"load": SECRET}),
           # The answers go back to this process's receiver, on loopback.
           "HERMES_WEBHOOK_CALLBACK_HOSTS": "127.0.0.1",
           "SLACK_BOT_TOKEN": "", "TELEGRAM_BOT_TOKEN": "", "REDIS_URL": ""}
    if cluster is not None:
        env.update(REDIS_CLUSTER_NODES=cluster.seeds, REDIS_URL=cluster.url)
    profile = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get(
        "BENCH_PROFILE") else []
    # Replicas share the data directory, so the first one's embedded Valkey serves them all.
    gateways = []
    for i in range(replicas):
        gateways.append(subprocess.Popen(  # noqa: ASYNC220 - starts and returns
            [sys.executable, *profile, "-m", "gateway.cli", "serve", "--port", str(port + i),
             *(["--processes", str(processes)] if processes > 1 else [])],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
            stderr=(data / f"gateway{i}.log").open("wb")))
        if i == 0:
            await asyncio.sleep(1.5)
    bases = [f"http://127.0.0.1:{port + i}" for i in range(replicas)]
    acks: list[float] = []
    first_acks: list[float] = []
    later_acks: list[float] = []
    connecting_acks: list[float] = []
    e2e: dict[str, float] = {}
    model_time: dict[str, float] = {}
    try:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=conversations + 10)) as session:
            for base in bases:
                await wait_ready(session, base)
            if any(g.poll() is not None for g in gateways):  # another process has the port
                raise SystemExit(f"a gateway exited at start; see {data}/gateway*.log")

            async def talk(n: int) -> None:
                http = RawHTTP("127.0.0.1", port + n % replicas)
                for i in range(messages):
                    text = f"c{n}-m{i}"
                    answers[text] = asyncio.get_running_loop().create_future()
                    body = json.dumps({"conversation_id": f"c{n}", "user_id": f"u{n}",
                                       "text": text, "callback_url": callback_url}).encode()
                    headers = {**signed_headers(SECRET, body), "Connection": "keep-alive"}
                    sent = time.perf_counter()
                    status, answer = await http.post("/webhook/load", body, headers)
                    done = time.perf_counter()
                    acks.append(done - http.written)
                    assert status == 202, answer
                    by_task[json.loads(answer)["task_id"]] = text
                    (first_acks if i == 0 else later_acks).append(acks[-1])
                    if i == 0:
                        connecting_acks.append(done - sent)
                    arrived = await asyncio.wait_for(answers[text], 120)
                    e2e[text] = arrived - http.written
                await http.close()

            commands_before = await store_commands(data, cluster)
            cpu_before = sum(gateway_cpu(g.pid) for g in gateways)
            started = time.perf_counter()
            await asyncio.gather(*(talk(n) for n in range(conversations)))
            elapsed = time.perf_counter() - started
            cpu_used = sum(gateway_cpu(g.pid) for g in gateways) - cpu_before
            commands = await store_commands(data, cluster) - commands_before
            await asyncio.sleep(1.0)  # let any duplicate arrive before counting

            # The API takes the gateway's local token (made at its first start).
            token = (data / "local-token").read_text().strip()

            async def report(task_id: str, text: str) -> None:
                async with session.get(f"{bases[0]}/agent/tasks/{task_id}",
                                       headers={"Authorization": f"Bearer {token}"}) as r:
                    view = await r.json()
                model_time[text] = view["report"]["model_time"]

            await asyncio.gather(*(report(t, text) for t, text in by_task.items()))
            sync_added = await sync_runs(session, bases[0], sync, token) if sync else []
    finally:
        for gateway in reversed(gateways):
            gateway.terminate()
            try:
                gateway.wait(20)
            except subprocess.TimeoutExpired:
                gateway.kill()
        await runner.cleanup()
        model.terminate()
        model.wait(10)
        if cluster is not None:
            cluster.close()

    total = conversations * messages
    lost = sum(1 for k in answers if received[k] == 0)
    duplicated = sum(1 for k in answers if received[k] > 1)
    added = [e2e[k] - model_time[k] for k in e2e]
    e2e_times = list(e2e.values())
    print(f"{conversations} conversations x {messages} messages, model latency "
          f"{latency * 1000:.0f} ms, {replicas} gateway(s) of {processes} serving "
          f"process(es) with {workers} workers each, sharing "
          f"{'a 3+3 Redis Cluster' if cluster is not None else 'one embedded Valkey'}:")
    print(f"  ack latency      p50 {percentile(acks, .5) * 1000:7.2f} ms   "
          f"p99 {percentile(acks, .99) * 1000:7.2f} ms   (target p99 < 50 ms)")
    for label, values in (("first messages", first_acks),
                          ("  from before connecting", connecting_acks),
                          ("later messages", later_acks)):
        if values:
            print(f"    {label:14} p50 {percentile(values, .5) * 1000:7.2f} ms   "
                  f"p99 {percentile(values, .99) * 1000:7.2f} ms")
    print(f"  end to end       p50 {percentile(e2e_times, .5) * 1000:7.2f} ms   "
          f"p99 {percentile(e2e_times, .99) * 1000:7.2f} ms")
    print(f"  gateway-added    p50 {percentile(added, .5) * 1000:7.2f} ms   "
          f"p99 {percentile(added, .99) * 1000:7.2f} ms   (target p50 < 5 ms)")
    print(f"  throughput       {total / elapsed:7.1f} answers/s ({total} in {elapsed:.1f} s)")
    print(f"  gateway CPU      {cpu_used / total * 1000:7.2f} ms per answer "
          f"({cpu_used / elapsed * 100:.0f}% of one core, all replicas)")
    print(f"  store commands   {commands / total:7.1f} per answer (the servers' count, "
          "every primary's)")
    print(f"  lost {lost}, duplicated {duplicated}, wrong {len(wrong)} (target 0, 0, 0); "
          f"mean ack {statistics.fmean(acks) * 1000:.2f} ms")
    if sync_added:
        print(f"  sync /agent/run  {len(sync_added)} calls one after another, beyond the model's"
              f" own time: p50 {percentile(sync_added, .5) * 1000:.2f} ms, "
              f"p90 {percentile(sync_added, .9) * 1000:.2f} ms   (target p50 <= 3 ms)")
    for text in wrong[:5]:
        print(f"  wrong answer: {text!r}")
    return 0 if lost == 0 and duplicated == 0 and not wrong else 1


def default_workers() -> int:
    """The gateway's own HERMES_WORKERS default (read in a process of its own: importing the
    gateway here would find bench/hub.py for the ``hub`` package)."""
    code = ("from gateway.settings import GatewaySettings; "
            "print(GatewaySettings.model_fields['hermes_workers'].default)")
    return int(subprocess.check_output([sys.executable, "-c", code], cwd=ROOT))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--model-latency", type=float, default=0.05)
    parser.add_argument("--port", type=int, default=18931)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--workers", type=int, default=None,
                        help="HERMES_WORKERS: concurrent tasks per gateway process "
                             "(default: the gateway's)")
    parser.add_argument("--processes", type=int, default=1,
                        help="serve --processes: serving processes per gateway, one port")
    parser.add_argument("--floor", action="store_true",
                        help="first measure the same burst against a do-nothing aiohttp app")
    parser.add_argument("--sync", type=int, default=50,
                        help="then this many synchronous /agent/run calls, one at a time")
    parser.add_argument("--store", choices=("embedded", "cluster"), default="embedded",
                        help="the embedded Valkey, or a local 3+3 Redis Cluster")
    args = parser.parse_args()
    if args.floor:
        asyncio.run(floor(args.conversations, args.port + 50))
    sys.exit(asyncio.run(main(args.conversations, args.messages, args.model_latency,
                              args.port, args.replicas, args.workers or default_workers(),
                              args.processes, args.sync, args.store)))

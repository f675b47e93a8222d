"""Conversation memory against the embedded Valkey server.

Prints, at archive sizes of 100, 10 000 and 100 000 messages:
- Redis round trips and time to assemble the context for one model call (must not grow
  with the archive);
- recall latency (p50 / p95) over varied keyword queries;
- bytes stored per archived message (server memory growth / messages);
and, first, the CPU to open 200 pooled connections at once with redis-py's default
handshake and with the lean one ``connect`` uses, and a script called by 200 coroutines at
once (CPU per call) and by one in a row (time per call), sent one per pooled connection
(redis-py's way) and on one multiplexed connection (``MultiplexedRedis``, what ``connect``
returns).

    .venv/bin/python bench/memory.py [--sizes 100,10000,100000]

Target: recall p50 < 20 ms at 100 000 archived messages.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_core import EventBus, LoopConfig, TaskLoop, TaskRequest, ToolExecutor, ToolRegistry
from agent_core.context import EstimateCounter, message_tokens
from agent_core.messages import Message
from agent_core.models import ModelAdapter, ModelRequest, ModelResponse
from agent_core.report import TaskReport
from agent_core.run import Run
from agent_core.store import RedisConversationStore, connect, warm
from agent_core.store.client import _lean_handshake
from agent_core.store.embedded import EmbeddedValkey
from agent_core.task import TaskState
from tools.recall import recall

COUNTER = EstimateCounter()
WORDS = [f"w{i}" for i in range(6000)]
TOPICS = ["invoice", "refund", "deploy", "database", "latency", "budget", "region",
          "customer", "report", "outage", "销售额", "库存", "订单"]


class RoundTrips:
    """Counts what is really sent to the store: the writes of the multiplexed connection
    (one per event-loop turn, however many commands it carries) and the transactions and
    pipelines that go over pooled connections (one round trip each). The store's calls
    are awaited one after another here, so each is one round trip."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.count = 0
        self._pipeline = type(redis.pipeline())
        self._orig_pipe = self._pipeline.execute
        self._writes = 0

    def __enter__(self) -> RoundTrips:
        counter, orig_pipe = self, self._orig_pipe

        async def pipe(self: Any, *args: Any, **kw: Any) -> Any:
            counter.count += 1
            return await orig_pipe(self, *args, **kw)

        self._pipeline.execute = pipe
        self._writes = getattr(self.redis, "writes", 0)
        return self

    def __exit__(self, *exc: object) -> None:
        self._pipeline.execute = self._orig_pipe
        self.count += getattr(self.redis, "writes", 0) - self._writes


def sentence(rng: random.Random) -> str:
    words = [WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)]
             for _ in range(rng.randint(15, 45))]
    words.insert(rng.randrange(len(words)), rng.choice(TOPICS))
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), f"{rng.randint(1, 99999)}")
    return " ".join(words)


async def populate(store: RedisConversationStore, cid: str, n: int, rng: random.Random) -> None:
    batch = 500
    for start in range(0, n, batch):
        msgs = [Message(role="user" if i % 2 else "assistant", content=sentence(rng), round=i)
                for i in range(start, min(n, start + batch))]
        for m in msgs:
            m.tokens = message_tokens(COUNTER, m)
        await store.append(cid, msgs)
        await store.rewrite_window(cid, [], msgs, base=[m.id for m in msgs])
    window = [Message(role="user", content=sentence(rng)) for _ in range(20)]
    for m in window:
        m.tokens = message_tokens(COUNTER, m)
    await store.append(cid, window)


class Idle(ModelAdapter):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="ok")


async def measure(store: RedisConversationStore, cid: str, rng: random.Random
                  ) -> dict[str, float]:
    loop = TaskLoop(model=Idle(), executor=ToolExecutor(ToolRegistry([recall])), store=store,
                    bus=EventBus(), config=LoopConfig(replan_every=0), counter=COUNTER)
    state = TaskState.start(TaskRequest(text="x", conversation_id=cid), deadline_at=None)
    run = Run(state, TaskReport(), loop.bus)
    timings = []
    for _ in range(30):
        started = time.perf_counter()
        with RoundTrips(store.redis) as trips:
            messages = await loop.model_turn.context(run, shrink=False)
        timings.append(time.perf_counter() - started)
    assert len(messages) == 21
    recall_times = []
    for _ in range(60):
        query = f"{rng.choice(TOPICS)} {rng.choice(WORDS[:300])} {rng.choice(WORDS)}"
        started = time.perf_counter()
        hits = await store.recall(cid, query, 5)
        recall_times.append(time.perf_counter() - started)
        assert len(hits) <= 5
    recall_times.sort()
    return {"context_ms": statistics.median(timings) * 1000, "round_trips": trips.count,
            "recall_p50_ms": statistics.median(recall_times) * 1000,
            "recall_p95_ms": recall_times[int(len(recall_times) * 0.95)] * 1000}


def _redis_py_handshake() -> dict[str, Any]:
    """redis-py's own defaults for the options ``connect`` overrides."""
    lean = _lean_handshake()
    defaults: dict[str, Any] = {}
    if "driver_info" in lean:
        from redis.driver_info import DriverInfo

        defaults["driver_info"] = DriverInfo()
    else:
        from redis.utils import get_lib_version

        defaults.update(lib_name="redis-py", lib_version=get_lib_version())
    if "maint_notifications_config" in lean:
        from redis.maint_notifications import MaintNotificationsConfig

        defaults["maint_notifications_config"] = MaintNotificationsConfig()
    return defaults


async def connection_setup(url: str, connections: int = 200) -> None:
    """Process CPU to open a pool of ``connections`` at once (median of 5)."""

    figures = {}
    for name, options in (("redis-py default handshake", _redis_py_handshake()),
                          ("lean handshake", {})):
        runs = []
        for _ in range(5):
            client = connect(url, multiplex=False, **options)
            before = _cpu()
            await asyncio.gather(*(client.ping() for _ in range(connections)))
            runs.append(_cpu() - before)
            await client.aclose()
        figures[name] = statistics.median(runs)
    print(f"opening {connections} connections at once: " + ", ".join(
        f"{name} {value * 1000:.0f} ms CPU" for name, value in figures.items()))


async def multiplexing(url: str, commands: int = 200, sequential: int = 2000) -> None:
    """The same small script called by ``commands`` coroutines at once (process CPU per
    call, median of 5, pools opened beforehand) and by one coroutine ``sequential`` times
    in a row (median wall time per call), one pooled connection per command (redis-py's
    way) and on the multiplexed connection."""
    burst, alone = {}, {}
    for name, multiplex in (("pooled", False), ("multiplexed", True)):
        client = connect(url, multiplex=multiplex)
        await warm(client, commands)
        script = client.register_script("return redis.call('RPUSH', KEYS[1], ARGV[1])")
        await script(keys=["bench:multiplex"], args=["x"])
        runs = []
        for _ in range(5):
            before = _cpu()
            await asyncio.gather(*(script(keys=["bench:multiplex"], args=["x" * 300])
                                   for _ in range(commands)))
            runs.append(_cpu() - before)
        burst[name] = statistics.median(runs)
        times = []
        for _ in range(sequential):
            started = time.perf_counter()
            await script(keys=["bench:multiplex"], args=["x"])
            times.append(time.perf_counter() - started)
        alone[name] = statistics.median(times)
        await client.delete("bench:multiplex")
        await client.aclose()
    print(f"{commands} concurrent script calls: " + ", ".join(
        f"{name} {value * 1e6 / commands:.0f} µs CPU each" for name, value in burst.items())
        + f" ({burst['pooled'] / burst['multiplexed']:.1f}x); one at a time: " + ", ".join(
        f"{name} {value * 1e6:.0f} µs" for name, value in alone.items())
        + f" ({alone['pooled'] / alone['multiplexed']:.1f}x)")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main(sizes: list[int]) -> None:
    server = EmbeddedValkey(Path(tempfile.mkdtemp(prefix="hermes-bench-")))
    info = await server.start()
    await connection_setup(info.url)
    await multiplexing(info.url)
    store = RedisConversationStore(connect(info.url), prefix="bench",
                                   max_archive=max(sizes) + 1000)
    rng = random.Random(42)
    print(f"{'archived':>9} | {'context ms':>10} | {'round trips':>11} | {'recall p50':>10} | "
          f"{'recall p95':>10} | {'bytes/msg':>9}")
    try:
        for size in sizes:
            cid = f"bench:{size}"
            before = int((await store.redis.info("memory"))["used_memory"])
            started = time.perf_counter()
            await populate(store, cid, size, rng)
            load_s = time.perf_counter() - started
            after = int((await store.redis.info("memory"))["used_memory"])
            figures = await measure(store, cid, rng)
            per_msg = (after - before) / size
            print(f"{size:>9} | {figures['context_ms']:>10.2f} | {figures['round_trips']:>11} | "
                  f"{figures['recall_p50_ms']:>8.2f}ms | {figures['recall_p95_ms']:>8.2f}ms | "
                  f"{per_msg:>9.0f}   (archived in {load_s:.1f}s)")
            await store.forget(cid)
    finally:
        await store.aclose()
        await server.stop()
    print("target: recall p50 < 20 ms at 100000; context time and round trips flat")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000,100000")
    args = parser.parse_args()
    asyncio.run(main([int(s) for s in args.sizes.split(",")]))

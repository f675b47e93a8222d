"""What the budget check costs a model call: store round trips and this process's CPU.

One model call's budget work is a ``reserve`` before it and a ``settle`` after it, against
the budgets a gateway typically has (a person's daily tokens and the deployment's monthly
dollars: two counters in one script). The loop runs them back to back, as one task's
calls would, against the embedded Valkey; the floor is a plain EVALSHA of an empty script
on the same client, measured in the same run. Round trips are the server's own count of
EVALSHA calls (INFO commandstats) divided by the calls made.

    .venv/bin/python bench/budget.py [--calls 5000] [--budgets 2]

Targets: at most one store round trip and 50 us of CPU per model call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent_core.budget import BudgetRule, Charge, ModelPrice, Prices, StoreBudget
from agent_core.models import Usage
from agent_core.store import Keys, connect
from agent_core.store.embedded import EmbeddedValkey

RULES = [BudgetRule(scope="user", window="day", tokens=10**12),
         BudgetRule(scope="global", window="month", usd=10**9),
         BudgetRule(scope="conversation", window="hour", tokens=10**12),
         BudgetRule(scope="channel", window="day", usd=10**9)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(step: Callable[[], Awaitable[None]], n: int) -> tuple[list[float], list[float]]:
    """Wall and CPU microseconds of each of ``n`` runs of ``step``."""
    wall, cpu = [], []
    for _ in range(n):
        w, c = time.perf_counter(), time.process_time()
        await step()
        cpu.append((time.process_time() - c) * 1e6)
        wall.append((time.perf_counter() - w) * 1e6)
    return wall, cpu


async def main(calls: int, budgets: int) -> None:
    server = EmbeddedValkey(Path(tempfile.mkdtemp(prefix="hg-bench-")))
    info = await server.start()
    redis = connect(info.url)
    try:
        prices = Prices({"gpt-4o-mini": ModelPrice(input_per_mtok=0.15, output_per_mtok=0.6)})
        budget = StoreBudget(redis, Keys("bench").budgets, RULES[:budgets], prices=prices,
                             linger=60)
        charge = Charge(task_id="t1", user_id="slack:U123", conversation_id="slack:T1:C9:1.2",
                        role="user", model="openai:gpt-4o-mini", prompt_tokens=3000,
                        max_tokens=2048, channel="slack")
        usage = Usage(3100, 420)

        async def check() -> None:
            hold = await budget.reserve(charge)
            await budget.settle(hold, usage)

        empty = redis.register_script("return 1")

        async def floor() -> None:
            await empty(keys=["bench:floor"], args=[])

        for step in (check, floor):  # warm: scripts loaded, windows worked out, caches
            await timed(step, 200)
        await redis.config_resetstat()
        check_wall, check_cpu = await timed(check, calls)
        stats = (await redis.info("commandstats")).get(
            "cmdstat_evalsha", {"calls": 0, "usec_per_call": 0.0})  # none with no budgets
        evalsha, server_us = stats["calls"], stats["usec_per_call"]
        floor_wall, floor_cpu = await timed(floor, calls)
        await budget.aclose()
        print(f"budget check per model call ({budgets} budgets, {calls} calls, reserve + "
              "settle), embedded Valkey over a Unix socket")
        print(f"  store round trips per call: {evalsha / calls:.3f} "
              f"({evalsha} EVALSHA for {calls} calls; target <= 1); the script's own time "
              f"in the server: {server_us:.1f} us a call")
        for name, wall, cpu in (("budget check", check_wall, check_cpu),
                                ("floor: EVALSHA of an empty script", floor_wall, floor_cpu)):
            print(f"  {name}:")
            print(f"    wall us  median {statistics.median(wall):7.1f}  p99 {pct(wall, .99):7.1f}")
            print(f"    CPU us   median {statistics.median(cpu):7.1f}  p99 {pct(cpu, .99):7.1f}")
        ratio = statistics.median(check_cpu) / statistics.median(floor_cpu)
        extra = statistics.median(check_cpu) - statistics.median(floor_cpu)
        walls = statistics.median(check_wall) / statistics.median(floor_wall)
        print(f"  CPU over the floor: x{ratio:.2f} (median), +{extra:.1f} us of budget work "
              f"per call; wall x{walls:.2f}")
        print(f"  target CPU <= 50 us per call: "
              f"{'met' if statistics.median(check_cpu) <= 50 else 'NOT met'} (median)")
    finally:
        await redis.aclose()
        await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--budgets", type=int, default=2, choices=range(len(RULES) + 1))
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.budgets))

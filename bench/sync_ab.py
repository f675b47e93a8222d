"""Synchronous /agent/run of two (or more) source trees, call by call in turn.

What a synchronous call adds beyond the model's own time moves by ±0.2 ms between runs of
the same code on this machine (`bench/gateway_load.py --sync`, one run after another),
as much as a change worth making saves. Here each tree's gateway runs at once (its own
port, data directory and embedded Valkey, the same scripted model server), and the calls
alternate A, B, A, B... (the order flipped every other call), so whatever the machine does
meanwhile falls on each alike; a tree against a copy of itself differs by ~0.02 ms.

    .venv/bin/python bench/sync_ab.py TREE [TREE ...] [--calls 400] [--model-latency 0.05]

A tree is a checkout of the project (``git worktree add /tmp/base <rev>``) run with this
venv; compile its bytecode first (``python -m compileall``), as this environment sets
PYTHONDONTWRITEBYTECODE. With both gateways beside each other the figures sit above the
single-gateway bench's; compare trees within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from gateway_load import _MODEL_SERVER, percentile, wait_ready

ROOT = Path(__file__).resolve().parents[1]


async def main(trees: list[Path], calls: int, latency: float, port: int) -> None:
    model = subprocess.Popen(  # noqa: ASYNC220 - starts and returns
        [sys.executable, "-c", _MODEL_SERVER, str(latency)], cwd=ROOT, stdout=subprocess.PIPE)
    assert model.stdout is not None
    model_url = (await asyncio.to_thread(model.stdout.readline)).decode().strip()
    gateways: list[tuple[Path, int, subprocess.Popen[bytes]]] = []
    added: dict[Path, list[float]] = {tree: [] for tree in trees}
    try:
        for i, tree in enumerate(trees):
            data = Path(tempfile.mkdtemp(prefix=f"hermes-ab{i}-"))
            env = {**os.environ, "HERMES_DATA_DIR": str(data), "LLM_PROVIDER": "openai",
                   "LLM_MODEL_NAME": "bench", "LLM_BASE_URL": model_url,
                   "LLM_API_KEY": "sk-bench-0123456789abcdef", "LLM_MAX_RETRIES": "0",
                   "AGENT_REPLAN_EVERY": "0", "LOG_LEVEL": "WARNING",
                   "SLACK_BOT_TOKEN": "", "TELEGRAM_BOT_TOKEN": "", "REDIS_URL": ""}
            gateways.append((tree, port + i, subprocess.Popen(  # noqa: ASYNC220
                [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port + i)],
                cwd=tree, env=env, stdout=subprocess.DEVNULL,
                stderr=(data / "gateway.log").open("wb"))))
        async with aiohttp.ClientSession() as session:
            for _, at, gateway in gateways:
                await wait_ready(session, f"http://127.0.0.1:{at}",
                                 exited=lambda g=gateway: g.poll() is not None)
            for n in range(calls + 20):  # the first 20 rounds warm up
                for tree, at, _ in (gateways if n % 2 == 0 else gateways[::-1]):
                    body = {"conversation_id": f"ab-{n}", "user_id": "bench",
                            "text": f"sync {n}"}
                    started = time.perf_counter()
                    async with session.post(f"http://127.0.0.1:{at}/agent/run",
                                            json=body) as r:
                        view = await r.json()
                    elapsed = time.perf_counter() - started
                    assert r.status == 200 and view["text"] == f"answer to: sync {n}", view
                    if n >= 20:
                        added[tree].append(elapsed - view["report"]["model_time"])
    finally:
        for _, _, gateway in gateways:
            gateway.terminate()
            gateway.wait(20)
        model.terminate()
        model.wait(10)
    print(f"synchronous /agent/run beyond the model's own time, {calls} calls each, "
          f"alternating (model latency {latency * 1000:.0f} ms):")
    for tree, values in added.items():
        print(f"  {tree!s:40} p25 {percentile(values, .25) * 1000:6.2f} ms   "
              f"p50 {percentile(values, .5) * 1000:6.2f} ms   "
              f"p90 {percentile(values, .9) * 1000:6.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--model-latency", type=float, default=0.05)
    parser.add_argument("--port", type=int, default=19100)
    args = parser.parse_args()
    asyncio.run(main([t.resolve() for t in args.trees], args.calls, args.model_latency,
                     args.port))

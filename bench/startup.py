"""Start-up cost: what a process pays before it does anything useful.

Each figure is the median of ``--runs`` fresh processes (nothing cached in the process):

- ``import agent_core``: wall time and modules loaded, and beside it, in the same
  interpreter set-up (the same Python, environment and working directory, fresh processes
  taking turns with it), ``import aiohttp``: the ratio of the two medians is the figure to
  compare (target: <= 0.8), the absolute times follow the machine;
- ``hermes-gateway run --task``: wall time to its answer, against a scripted local model
  server (one model call, no tools), and the CPU time it and its embedded Valkey used (the
  steadier figure on a shared machine);
- ``hermes-gateway serve``: wall time until /healthz answers 200 (embedded Valkey on a
  fresh data directory each time, Slack and Telegram not configured);
- runtime resident memory: peak RSS of a process that builds an agent (``build_runtime``
  with the default tools) and runs one task on it.

    .venv/bin/python bench/startup.py [--runs 7] [--imports-only]

Targets: ``import agent_core`` <= 0.8x ``import aiohttp`` measured beside it; on the
reference machine (2 cores), run <= 0.5 s, serve <= 1 s, runtime peak RSS <= 50 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from agent_core.models.replay import ReplayModelServer, Reply

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith(("LLM_", "HERMES_", "SLACK_", "TELEGRAM_", "OTEL_"))}

IMPORT = ("import sys, time; t = time.perf_counter(); import {module}; "
           "print((time.perf_counter() - t) * 1000, len(sys.modules))")
#: The import measured beside ``agent_core``'s, in the same interpreter set-up.
IMPORT_FLOOR = "aiohttp"
#: ``import agent_core`` may take at most this share of ``import aiohttp``.
IMPORT_TARGET = 0.8
RUNTIME_RSS = """
import asyncio, resource, sys
from agent_core import TaskRequest, load_settings
from agent_core.runtime import build_runtime
from agent_core.store import MemoryConversationStore

async def main():
    runtime = build_runtime(load_settings(), store=MemoryConversationStore())
    result = await runtime.loop.run(TaskRequest(text="hi", conversation_id="bench",
                                                role="user", permissions=frozenset()))
    assert result.outcome == "answered", result
    await runtime.aclose()

asyncio.run(main())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def median(values: list[float]) -> float:
    return statistics.median(values)


def children_cpu() -> float:
    """CPU seconds (user + system) of the processes this one has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def import_once(module: str) -> tuple[float, int]:
    """Milliseconds and modules loaded of ``import module`` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", IMPORT.format(module=module)],
                         capture_output=True, text=True, env=ENV, check=True,
                         cwd=ROOT).stdout.split()
    return float(out[0]), int(out[1])


def measure_import(runs: int) -> dict[str, tuple[float, int]]:
    """Median milliseconds and modules of ``import agent_core`` and of ``import aiohttp``,
    fresh processes taking turns (which goes first alternates), so both see the same
    machine."""
    times: dict[str, list[float]] = {"agent_core": [], IMPORT_FLOOR: []}
    modules: dict[str, int] = {}
    for n in range(runs):
        for module in (sorted(times) if n % 2 else sorted(times, reverse=True)):
            ms, modules[module] = import_once(module)
            times[module].append(ms)
    return {module: (median(ms), modules[module]) for module, ms in times.items()}


def model_env(server: ReplayModelServer, data: str) -> dict[str, str]:
    return {**ENV, "LLM_PROVIDER": "openai", "LLM_MODEL_NAME": "scripted",
            "LLM_BASE_URL": server.openai_url, "LLM_API_KEY": "sk-bench-0123456789",
            "HERMES_DATA_DIR": data, "AGENT_REPLAN_EVERY": "0"}


async def measure_run(runs: int) -> tuple[float, float]:
    times, cpu = [], []
    async with ReplayModelServer() as server:
        for _ in range(runs):
            server.add(Reply("The answer."))
            with tempfile.TemporaryDirectory() as data:
                started, used = time.perf_counter(), children_cpu()
                proc = await asyncio.create_subprocess_exec(
                    str(BIN / "hermes-gateway"), "run", "--task", "hello", "--json",
                    env=model_env(server, data), cwd=ROOT, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
                out, err = await proc.communicate()
                times.append(time.perf_counter() - started)
                cpu.append(children_cpu() - used)  # the CLI and its embedded Valkey
                assert proc.returncode == 0 and b"The answer." in out, err.decode()[-400:]
    return median(times), median(cpu)


def measure_serve(runs: int) -> float:
    """Until /healthz answers (no model call happens on the way: any model URL will do)."""
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(dir="/tmp") as data:
            port = _free_port()
            env = {**ENV, "LLM_PROVIDER": "openai", "LLM_MODEL_NAME": "scripted",
                   "LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "sk-bench-012345",
                   "HERMES_DATA_DIR": data}
            started = time.perf_counter()
            proc = subprocess.Popen(
                [str(BIN / "hermes-gateway"), "serve", "--port", str(port)], env=env,
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                while True:
                    try:
                        with urllib.request.urlopen(
                                f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                            if r.status == 200:
                                break
                    except OSError:
                        if proc.poll() is not None:
                            raise RuntimeError("serve exited") from None
                        time.sleep(0.005)
                times.append(time.perf_counter() - started)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    return median(times)


async def measure_runtime_rss(runs: int) -> float:
    peaks = []
    async with ReplayModelServer() as server:
        for _ in range(runs):
            server.add(Reply("The answer."))
            with tempfile.TemporaryDirectory() as data:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", RUNTIME_RSS, env=model_env(server, data), cwd=ROOT,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                out, err = await proc.communicate()
                assert proc.returncode == 0, err.decode()[-400:]
                peaks.append(float(out.split()[-1]))
    return median(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--imports-only", action="store_true",
                        help="only the two imports and their ratio")
    args = parser.parse_args()
    imports = measure_import(args.runs)
    if not args.imports_only:
        run, run_cpu = asyncio.run(measure_run(args.runs))
        serve = measure_serve(args.runs)
        rss = asyncio.run(measure_runtime_rss(args.runs))
    print(f"medians of {args.runs} fresh processes")
    ms, modules = imports["agent_core"]
    floor, floor_modules = imports[IMPORT_FLOOR]
    print(f"import agent_core          {ms:7.0f} ms   {modules} modules")
    print(f"import {IMPORT_FLOOR} (beside it)  {floor:7.0f} ms   {floor_modules} modules")
    print(f"  ratio                    {ms / floor:7.2f}                 "
          f"(target <= {IMPORT_TARGET})")
    if args.imports_only:
        return
    print(f"hermes-gateway run --task  {run * 1000:7.0f} ms   {run_cpu * 1000:.0f} ms CPU"
          "      (target <= 500 ms)")
    print(f"serve to healthy           {serve * 1000:7.0f} ms                 (target <= 1000 ms)")
    print(f"runtime peak RSS           {rss:7.1f} MB                 (target <= 50 MB)")


if __name__ == "__main__":
    main()

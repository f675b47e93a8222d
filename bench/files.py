"""What a document sent with a message costs: the latency it adds before the task starts
(sniffing, the converter's child process, reading the text's head into the window), the
gateway process's own CPU for it, and peak memory (the converter's, in its child, and the
gateway's, which must not grow with the document).

    python bench/files.py [--runs 5]

Prints one line per document (a 1-page and a 50-page PDF built here, pages of ~2 KB text).
The download is not counted (it depends on the platform).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_core.attachments import ConvertLimits, convert, sniff
from agent_core.context.tokens import counter_for
from tests.integration.fixture_files import pdf

WORDS = ["revenue", "forecast", "contract", "clause", "payment", "schedule", "delivery",
         "term", "warranty", "liability", "notice"]


def page_text(number: int) -> str:
    return " ".join(WORDS[(number + i) % len(WORDS)] for i in range(300))


def rss_mb() -> float:
    """The gateway process's resident memory now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def one(path: Path, work: Path, counter_tokens: int) -> tuple[float, float, float]:
    """(seconds, gateway CPU seconds, child CPU seconds) of receiving one document."""
    counter = counter_for("openai")
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    sniffed = sniff(path, path.name)
    assert sniffed.converter == "pdf"
    text_out = work / f"{time.monotonic_ns()}.txt"
    done = await convert(path, "pdf", text_out=text_out, image_out=work / "x.img",
                         limits=ConvertLimits())
    assert not done.error, done.error
    head = text_out.read_text(encoding="utf-8")[:counter_tokens * 6]
    while counter.count(head) > counter_tokens:
        head = head[:int(len(head) * 0.8)]
    elapsed = time.perf_counter() - started
    own_after = resource.getrusage(resource.RUSAGE_SELF)
    kids_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (own_after.ru_utime + own_after.ru_stime) - (own.ru_utime + own.ru_stime)
    child = (kids_after.ru_utime + kids_after.ru_stime) - (kids.ru_utime + kids.ru_stime)
    return elapsed, cpu, child


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        docs = {"1-page PDF": pdf([page_text(0)]),
                "50-page PDF": pdf([page_text(n) for n in range(50)])}
        print(f"{'document':<12} {'bytes':>8} {'latency p50':>12} {'gateway CPU':>12} "
              f"{'converter CPU':>14}")
        rss_before = rss_mb()
        for name, data in docs.items():
            path = work / f"{name.split()[0]}.pdf"
            path.write_bytes(data)
            await one(path, work, 8000)  # warm the file cache
            runs = [await one(path, work, 8000) for _ in range(args.runs)]
            print(f"{name:<12} {len(data):>8} {statistics.median(r[0] for r in runs) * 1000:>9.0f}"
                  f" ms {statistics.median(r[1] for r in runs) * 1000:>9.1f} ms "
                  f"{statistics.median(r[2] for r in runs) * 1000:>11.0f} ms")
        converter_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"peak RSS of the converter (child process): {converter_peak:.1f} MB")
        print(f"gateway RSS: {rss_before:.1f} MB before, {rss_mb():.1f} MB after "
              f"(peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB)")


if __name__ == "__main__":
    asyncio.run(main())

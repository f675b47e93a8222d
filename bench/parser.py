"""How long the decision parser takes per model output, in one run.

Over the format corpora (tests/unit/test_toolcall_formats.py and
tests/unit/test_toolcall_upstream.py: every format read, reasoning, truncation, negatives)
and the messy-JSON corpus (tests/unit/test_parser_corpus.py), and over plain prose answers
(the common case, which must stay cheap): median and p99 of one parse, each output parsed
many times.

    .venv/bin/python bench/parser.py [--rounds 200]

Targets on this machine: median <= 50 us, p99 <= 500 us.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# This script is bench/parser.py: keep its folder off the path, or it would shadow modules.
ROOT = Path(__file__).resolve().parents[1]
sys.path = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from agent_core import DecisionParser  # noqa: E402
from agent_core.models.base import ModelResponse  # noqa: E402
from tests.unit import (  # noqa: E402
    test_parser_corpus,
    test_toolcall_formats,
    test_toolcall_upstream,
)

PROSE = [
    "Sales grew 12% week over week, driven by the north region.",
    "I could not find a report for that date. Do you want last week's instead?",
    "Here is the summary:\n\n- Revenue: 1.2M\n- Orders: 3,400\n- Returns: 2.1%\n\n"
    "The numbers are in line with the forecast (see the attached sheet).",
    "The capital of France is Paris. It has been since the 10th century, with short breaks.",
    ("A longer answer. " * 120).strip(),
]


def timings(parser: DecisionParser, outputs: list[ModelResponse], rounds: int) -> list[float]:
    """Seconds per parse: each output's median over ``rounds`` parses."""
    per_output = []
    for response in outputs:
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            parser.parse(response)
            samples.append(time.perf_counter() - started)
        per_output.append(statistics.median(samples))
    return per_output


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(rounds: int) -> None:
    formats = DecisionParser(test_toolcall_formats.SCHEMAS, test_toolcall_formats.SCHEMAS)
    upstream = DecisionParser(test_toolcall_upstream.SCHEMAS, test_toolcall_upstream.SCHEMAS)
    messy = DecisionParser(test_parser_corpus.TOOLS)
    format_corpus = [(formats, ModelResponse(text=c[1])) for c in test_toolcall_formats.CASES]
    format_corpus += [(upstream, ModelResponse(text=c[1])) for c in test_toolcall_upstream.CASES]
    corpus = format_corpus + [(messy, c[1]) for c in test_parser_corpus.CORPUS]

    def each(pairs: list[tuple[DecisionParser, ModelResponse]]) -> list[float]:
        return [t for parser, response in pairs for t in timings(parser, [response], rounds)]

    rows = {
        f"corpus ({len(corpus)} outputs)": each(corpus),
        f"format corpus ({len(format_corpus)})": each(format_corpus),
        f"plain prose ({len(PROSE)})": timings(formats, [ModelResponse(text=p) for p in PROSE],
                                               rounds),
    }
    us = 1e6
    print(f"decision parser, each output's median over {rounds} parses:")
    for name, values in rows.items():
        print(f"  {name:24} median {statistics.median(values) * us:7.1f} us   "
              f"p99 {pct(values, 0.99) * us:7.1f} us   max {max(values) * us:7.1f} us")
    print("targets: median <= 50 us, p99 <= 500 us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    main(parser.parse_args().rounds)

"""ContextCompressor: each shape keeps what matters; numbers and errors are never lost."""

from __future__ import annotations

import json
import random

import pytest

from agent_core.context import TiktokenCounter
from agent_core.context.compressor import ContextCompressor, ModelSummariser, detect_shape
from agent_core.models.replay import Failure, ReplayModelServer, Reply
from tests.conftest import ModelFactory

COUNTER = TiktokenCounter()
BUDGET = 600


def server_log(size: int = 100_000, seed: int = 3) -> tuple[str, int]:
    """A realistic server log of about ``size`` bytes and its exact ERROR line count."""
    rng = random.Random(seed)
    lines, errors = [], 0
    messages = {
        "INFO": ["GET /api/orders/{n} 200 {n}ms", "job {n} finished in {n}.{n}s",
                 "user {n} logged in from 10.0.{n}.{n}"],
        "WARN": ["slow query took {n}ms: SELECT * FROM orders WHERE id={n}",
                 "retrying upstream call attempt={n}"],
        "ERROR": ["connection refused host=10.0.0.{n} port=5432",
                  "payment gateway timeout after {n}ms order={n}",
                  "KeyError: 'region' in report.py line {n}"],
        "DEBUG": ["cache miss key=user:{n}"],
    }
    size_now = 0
    i = 0
    while size_now < size:
        level = rng.choices(["INFO", "WARN", "ERROR", "DEBUG"], weights=(70, 12, 6, 12))[0]
        text = rng.choice(messages[level]).replace("{n}", str(rng.randint(1, 9999)))
        stamp = f"2026-11-29T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        line = f"{stamp}.{rng.randint(0, 999):03d}Z {level} [svc-{rng.randint(1, 4)}] {text}"
        lines.append(line)
        errors += level == "ERROR"
        size_now += len(line) + 1
        i += 1
    return "\n".join(lines), errors


def test_a_100kb_server_log_keeps_the_exact_error_count() -> None:
    text, errors = server_log()
    assert len(text) >= 100_000
    out = ContextCompressor(COUNTER).reduce(text, BUDGET)
    assert COUNTER.count(out) <= BUDGET
    assert f"ERROR lines: {errors} exactly." in out
    assert f"ERROR: {errors}" in out
    # Each distinct error appears once with its count and a first example.
    assert "connection refused host=10.0.0." in out
    assert "payment gateway timeout" in out and "KeyError: 'region'" in out
    assert "time range: 2026-11-29T00:00:00" in out


def test_table_keeps_header_row_count_totals_and_anomalies() -> None:
    rng = random.Random(1)
    rows = ["date,category,orders,amount"]
    amounts = []
    for d in range(1, 201):
        amount = round(rng.uniform(100, 200), 2)
        if d == 77:
            amount = 98_765.43  # an anomaly
        amounts.append(amount)
        rows.append(f"2026-05-{d % 28 + 1:02d},{'ABC'[d % 3]},{rng.randint(1, 9)},{amount}")
    rows.append("2026-06-01,B,,150.00")  # an empty cell
    amounts.append(150.0)
    text = "\n".join(rows)
    out = ContextCompressor(COUNTER).reduce(text, 400)
    assert detect_shape(text) == "table"
    assert "table with 201 data rows and 4 columns: date | category | orders | amount" in out
    total = round(sum(amounts), 2)
    assert f"amount: sum {total:g}" in out or f"amount: sum {total}" in out
    assert "98765.43" in out and "orders: 1 empty cells" in out


def test_json_keeps_top_level_numbers_paths_and_aggregates() -> None:
    data = {"currency": "CNY", "total": 48311.74, "orders": 125,
            "rows": [{"date": f"2026-11-{d:02d}", "amount": 100 + d} for d in range(1, 300)]}
    text = json.dumps(data)
    out = ContextCompressor(COUNTER).reduce(text, 300)
    assert "total = 48311.74" in out and "orders = 125" in out
    assert "rows: array (length 299)" in out and "rows[]: object" in out
    assert f"rows[].amount: number, sum {sum(100 + d for d in range(1, 300))}" in out


def test_code_keeps_files_functions_and_the_first_line_of_each_error() -> None:
    body = []
    for i in range(120):
        body.append(f"def handler_{i}(request):\n    return process(request, {i})\n")
    body.append('Traceback (most recent call last):\n  File "app/views.py", line 42, in '
                'handler_3\n    return process(request)\nValueError: amount must be positive')
    body.append("FAILED tests/test_api.py::test_refund - AssertionError: 402 != 200")
    text = "\n".join(body)
    out = ContextCompressor(COUNTER).reduce(text, 300)
    assert detect_shape(text) == "code"
    assert "ValueError: amount must be positive" in out
    assert "FAILED tests/test_api.py::test_refund - AssertionError: 402 != 200" in out
    assert "app/views.py" in out and "handler_0" in out


def test_prose_keeps_key_sentences_errors_and_every_number() -> None:
    filler = ("The team discussed the roadmap and agreed to revisit the topic later. " * 40)
    text = (f"Quarterly revenue reached 4.2 million. {filler} The outage cost 37 orders. "
            f"{filler} An error occurred in the billing export. {filler} We close at 18:00.")
    out = ContextCompressor(COUNTER).reduce(text, 200)
    for fact in ("4.2", "37", "18:00", "error occurred in the billing export"):
        assert fact in out


def test_short_text_is_returned_unchanged() -> None:
    assert ContextCompressor(COUNTER).reduce("short", 100) == "short"


async def test_model_summary_keeps_the_shape_facts_and_falls_back_on_failure(
        make_model: ModelFactory, model_server: ReplayModelServer) -> None:
    text, errors = server_log(30_000)
    summariser = ModelSummariser(make_model("openai", max_retries=0),
                                 fallback=ContextCompressor(COUNTER))
    model_server.add(Reply("Mostly healthy; the database refused connections repeatedly."))
    out = await summariser.compress(text, BUDGET)
    assert out.endswith("refused connections repeatedly.")
    assert f"ERROR: {errors}" in out
    model_server.add(Failure(500))
    out = await summariser.compress(text, BUDGET)
    assert f"ERROR lines: {errors} exactly." in out


@pytest.mark.parametrize(("text", "shape"), [
    ('{"a": 1}', "json"), ("a,b\n1,2\n3,4\n5,6", "table"),
    ("2024-01-01 10:00:00 INFO x\n2024-01-01 10:00:01 ERROR y\n2024-01-01 10:00:02 INFO z",
     "log"), ("def f():\n    return 1\n\nclass A:\n    pass", "code"),
    ("Just some words. And more words.", "prose"),
])
def test_shape_detection(text: str, shape: str) -> None:
    assert detect_shape(text) == shape

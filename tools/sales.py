"""Sales-report tools: query orders, compute growth, append to the daily report.

The data is a SQLite database of generated orders (categories A, B and C), created on first
use under the data directory. Generation is deterministic per calendar day, so a given
week always has the same figures (the recorded demo depends on that).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent_core import FileLock, ToolContext, ToolError, tool

if TYPE_CHECKING:
    import sqlite3

CURRENCY = "CNY"
_FIRST_DAY = dt.date(2025, 1, 1)
_LAST_DAY = dt.date(2027, 12, 31)
_MAX_RANGE_DAYS = 366
_init_lock = threading.Lock()


def data_dir(ctx: ToolContext | None) -> Path:
    """The deployment's data directory (``ctx.data_dir``)."""
    if ctx is None or ctx.data_dir is None:
        raise ToolError("this deployment has no data directory for the sales data")
    return ctx.data_dir


def database(ctx: ToolContext | None) -> Path:
    """The sample database, generated on first use."""
    path = data_dir(ctx) / "sales.db"
    with _init_lock:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            _generate(tmp)
            tmp.replace(path)  # atomic: a reader never sees a half-built database
    return path


def _connect(target: str | Path, *, uri: bool = False) -> sqlite3.Connection:
    import sqlite3  # when a sales tool runs, not whenever the default tools are loaded

    return sqlite3.connect(target, uri=uri)


def _generate(path: Path) -> None:
    conn = _connect(path)
    try:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, day TEXT NOT NULL, "
                     "category TEXT NOT NULL, amount_cents INTEGER NOT NULL)")
        rows = []
        day = _FIRST_DAY
        while day <= _LAST_DAY:
            rng = random.Random(day.toordinal())
            weekend = day.weekday() >= 5
            for _ in range(rng.randint(8, 14) if weekend else rng.randint(14, 24)):
                category = rng.choices("ABC", weights=(5, 3, 2))[0]
                base = {"A": 180.0, "B": 420.0, "C": 950.0}[category]
                rows.append((day.isoformat(), category,
                             round(rng.uniform(0.4, 1.6) * base * 100)))
            day += dt.timedelta(days=1)
        conn.executemany("INSERT INTO orders (day, category, amount_cents) VALUES (?, ?, ?)",
                         rows)
        conn.execute("CREATE INDEX orders_day ON orders (day, category)")
        conn.commit()
    finally:
        conn.close()


@tool(timeout=20)
def query_sales_data(
    start_date: dt.date,
    end_date: dt.date,
    category: Literal["A", "B", "C"] | None = None,
    ctx: ToolContext | None = None,
) -> dict[str, Any]:
    """Total sales per day between two dates (inclusive), optionally for one category.

    Args:
        start_date: First day, YYYY-MM-DD.
        end_date: Last day, YYYY-MM-DD (inclusive).
        category: Product category A, B or C; all categories when omitted.
    """
    if end_date < start_date:
        raise ToolError(f"end_date {end_date} is before start_date {start_date}")
    if (end_date - start_date).days >= _MAX_RANGE_DAYS:
        raise ToolError(f"the range is longer than {_MAX_RANGE_DAYS} days; query in parts")
    sql = ("SELECT day, COUNT(*), SUM(amount_cents) FROM orders WHERE day BETWEEN ? AND ?"
           + (" AND category = ?" if category else "") + " GROUP BY day ORDER BY day")
    params: list[Any] = [start_date.isoformat(), end_date.isoformat()]
    if category:
        params.append(category)
    conn = _connect(f"file:{database(ctx)}?mode=ro", uri=True)
    try:
        found = conn.execute(sql, params).fetchall()
    finally:
        conn.close()
    rows = [{"date": d, "orders": n, "amount": round(cents / 100, 2)} for d, n, cents in found]
    return {
        "start_date": start_date.isoformat(), "end_date": end_date.isoformat(),
        "category": category or "all", "currency": CURRENCY, "days": len(rows),
        "orders": sum(r["orders"] for r in rows),
        "total": round(sum(cents for _, _, cents in found) / 100, 2),
        "rows": rows,
    }


@tool
def calc_growth_rate(current: float, previous: float) -> dict[str, Any]:
    """Growth from a previous value to a current one, in percent.

    Args:
        current: The value of the current period.
        previous: The value of the previous period; must not be 0.
    """
    if previous == 0:
        raise ToolError("previous is 0, so a growth rate is undefined; report the absolute "
                        "change instead")
    rate = (current - previous) / abs(previous) * 100
    return {"current": current, "previous": previous, "change": round(current - previous, 2),
            "growth_rate_percent": round(rate, 2)}


@tool(side_effect="write", retries=0)
def save_daily_report(content: str, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Append a section to today's shared daily report (reports/YYYY-MM-DD.md).

    Args:
        content: Markdown text to append.
    """
    if not content.strip():
        raise ToolError("content is empty")
    if len(content) > 20_000:
        raise ToolError("content is longer than 20000 characters")
    reports = data_dir(ctx) / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    path = reports / f"{dt.date.today().isoformat()}.md"
    who = f"{ctx.user_id} in {ctx.conversation_id}" if ctx else "unknown"
    stamp = dt.datetime.now(dt.UTC).strftime("%H:%M:%S UTC")
    section = f"\n## {stamp} - {who}\n\n{content.strip()}\n"

    # One lock per report file: concurrent chats append whole sections, never interleaved.
    with FileLock(str(path) + ".lock", timeout=10):
        with path.open("a", encoding="utf-8") as handle:
            handle.write(section)
            handle.flush()
            os.fsync(handle.fileno())
        size = path.stat().st_size
    return {"saved": True, "path": f"reports/{path.name}", "bytes_appended":
            len(section.encode()), "report_bytes": size}

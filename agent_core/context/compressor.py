"""ContextCompressor: a long tool output reduced by shape before it enters the window.

- JSON: key paths with value types, every top-level number, sums/min/max of numeric fields
  in lists, a few samples
- tables (CSV, TSV, Markdown, pipes): header, row count, column totals, total rows
  verbatim, anomalies (empty cells, outliers), first and last rows
- logs: line count, time range, counts per level, each distinct error with its count and
  first example
- code: file names, function and class names, the first line of each error
- prose: key sentences, every error line, and any numbers the kept sentences left out

Counts, totals and error lines come first, so they survive the final cut to the budget.
``ModelSummariser`` puts a (smaller) model's summary in front of the same facts.
"""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Literal

from ..messages import Message
from ..models.base import ModelAdapter, ModelRequest
from .tokens import TokenCounter, counter_for

log = logging.getLogger(__name__)

Shape = Literal["json", "table", "log", "code", "prose"]

_LEVEL = re.compile(r"\b(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|FATAL|CRITICAL|"
                    r"SEVERE|PANIC)\b")
_TIMESTAMP = re.compile(
    r"^\s*\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}|\d{10}(?:\.\d+)?)\]?")
_ERRORISH = re.compile(r"\b(error|exception|traceback|failed|failure|fatal|panic|critical)\b|"
                       r"错误|异常|失败", re.IGNORECASE)
_CODE_HINT = re.compile(r"^\s*(def |class |import |from \S+ import|function |const |let |"
                        r"var |return\b|public |private |func |fn |#include|package |"
                        r"if \(|for \(|\}|\{$|.*;\s*$|@\w+)")
_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class|function|func|fn)\s+([A-Za-z_][\w]*)|"
                  r"^\s*(?:const|let|var)\s+([A-Za-z_]\w*)\s*=\s*(?:async\s*)?\(")
_FILE = re.compile(r"[\w./-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|kt|rb|php|c|cc|cpp|h|hpp|cs|"
                   r"swift|sql|sh|yaml|yml|json|toml)\b")
_NUMBER = re.compile(r"\d{1,2}:\d{2}(?::\d{2})?|-?\d[\d,]*(?:\.\d+)?%?")
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{8}-[0-9a-f-]{27,}\b|\d+(?:\.\d+)?|"
                       r"'[^']*'|\"[^\"]*\"")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")


class ContextCompressor:
    """Reduces text by its shape to within a token budget."""

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter = counter or counter_for(None)

    async def compress(self, text: str, max_tokens: int) -> str:
        """Compress ``text`` to about ``max_tokens`` (unchanged when it already fits)."""
        return self.reduce(text, max_tokens)

    def reduce(self, text: str, max_tokens: int) -> str:
        """The synchronous reduction behind ``compress``."""
        if self.counter.count(text) <= max_tokens:
            return text
        shape = detect_shape(text)
        sections = _REDUCERS[shape](text)
        lines = text.count("\n") + 1
        header = f"[{shape} output compressed from {len(text)} characters, {lines} lines]"
        return self._fit([header, *[s for s in sections if s]], max_tokens)

    def facts(self, text: str) -> str:
        """The leading facts (counts, totals, errors) of the shape reduction."""
        sections = _REDUCERS[detect_shape(text)](text)
        return sections[0] if sections else ""

    def _fit(self, sections: list[str], max_tokens: int) -> str:
        out: list[str] = []
        used = 0
        for section in sections:
            cost = self.counter.count(section) + 1
            if used + cost <= max_tokens:
                out.append(section)
                used += cost
                continue
            # Keep as many lines of this section as fit (the last one cut short), then stop.
            for line in section.splitlines():
                line_cost = self.counter.count(line) + 1
                if used + line_cost > max_tokens:
                    room = max_tokens - used - 2
                    cut = int(len(line) * room / line_cost * 0.9)
                    if cut >= 40:
                        out.append(line[:cut] + "…")
                    break
                out.append(line)
                used += line_cost
            break
        return "\n".join(out)


class ModelSummariser:
    """Summarises with a model; the shape facts are always kept in front of its summary."""

    def __init__(self, model: ModelAdapter, *, fallback: ContextCompressor | None = None
                 ) -> None:
        self.model = model
        self.fallback = fallback or ContextCompressor()

    async def compress(self, text: str, max_tokens: int) -> str:
        counter = self.fallback.counter
        if counter.count(text) <= max_tokens:
            return text
        facts = self.fallback.facts(text)
        try:
            response = await self.model.complete(ModelRequest(messages=[
                Message(role="system", content=(
                    "Summarise this tool output for an agent in at most "
                    f"{max(50, max_tokens // 2)} tokens. Keep every number, total, name and "
                    "error message exactly.")),
                Message(role="user", content=text[:60_000])], temperature=0.0,
                max_tokens=max(64, max_tokens // 2)))
            summary = response.text.strip()
        except Exception as exc:
            log.warning("model summary failed (%s); using the shape compressor", exc)
            return self.fallback.reduce(text, max_tokens)
        combined = f"{facts}\n{summary}" if facts else summary
        if not summary or counter.count(combined) > max_tokens:
            return self.fallback.reduce(text, max_tokens)
        return combined


def detect_shape(text: str) -> Shape:
    """The most likely shape of a tool output."""
    stripped = text.strip()
    if stripped[:1] in "{[":
        try:
            json.loads(stripped)
            return "json"
        except ValueError:
            pass
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "prose"
    sample = lines[:400]
    logish = sum(1 for ln in sample if _TIMESTAMP.match(ln) or _LEVEL.search(ln[:40]))
    if logish >= 0.5 * len(sample) and len(sample) >= 3:
        return "log"
    if _table_delimiter(sample) is not None:
        return "table"
    codeish = sum(1 for ln in sample if _CODE_HINT.match(ln) or 'File "' in ln)
    if codeish >= 0.25 * len(sample) and len(sample) >= 3:
        return "code"
    return "prose"


def _table_delimiter(lines: list[str]) -> str | None:
    if len(lines) < 3:
        return None
    for delim in ("\t", "|", ",", ";"):
        counts = [ln.count(delim) for ln in lines[:200]]
        common, freq = Counter(counts).most_common(1)[0]
        if common >= 1 and freq >= 0.8 * len(counts):
            return delim
    return None


# --- reducers: each returns sections, most important first -------------------------------


def _reduce_log(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    levels: Counter[str] = Counter()
    templates: dict[str, list[Any]] = {}
    stamps: list[str] = []
    for ln in lines:
        stamp = _TIMESTAMP.match(ln)
        if stamp:
            stamps.append(stamp.group(1))
        found = _LEVEL.search(ln)
        level = _normal_level(found.group(1)) if found else "OTHER"
        levels[level] += 1
        if level in ("ERROR", "FATAL", "CRITICAL", "WARN") or (
                level == "OTHER" and _ERRORISH.search(ln)):
            body = ln[stamp.end():] if stamp else ln
            key = f"{level} {_VOLATILE.sub('#', body).strip()}"
            entry = templates.setdefault(key, [0, ln.strip(), level])
            entry[0] += 1
    counts = ", ".join(f"{lvl}: {n}" for lvl, n in sorted(levels.items(),
                                                          key=lambda kv: -kv[1]))
    facts = [f"{len(lines)} log lines; by level: {counts}."]
    if levels.get("ERROR"):
        facts.append(f"ERROR lines: {levels['ERROR']} exactly.")
    if stamps:
        facts.append(f"time range: {stamps[0]} to {stamps[-1]}.")
    ranked = sorted(templates.values(), key=lambda e: (_severity(e[2]), -e[0]))
    errors = [f"- {n}x {lvl}: {example[:300]}" for n, example, lvl in ranked[:25]]
    distinct = f"distinct errors and warnings ({len(templates)}), first example of each:"
    return [" ".join(facts), "\n".join([distinct, *errors]) if errors else "",
            "first lines:\n" + "\n".join(ln[:300] for ln in lines[:3])]


def _normal_level(level: str) -> str:
    level = level.upper()
    return {"WARNING": "WARN", "ERR": "ERROR", "SEVERE": "ERROR", "PANIC": "FATAL"}.get(
        level, level)


def _severity(level: str) -> int:
    return {"FATAL": 0, "CRITICAL": 0, "ERROR": 1, "OTHER": 2, "WARN": 3}.get(level, 4)


def _reduce_table(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    delim = _table_delimiter(lines) or ","
    rows = [_cells(ln, delim) for ln in lines]
    rows = [r for r in rows if not all(set(c) <= set("-: ") for c in r)]  # markdown rule
    header, body = rows[0], rows[1:]
    totals_rows = [r for r in body if r and re.search(r"(?i)total|sum|合计|总计", r[0])]
    data = [r for r in body if r not in totals_rows]
    facts = [f"table with {len(data)} data rows and {len(header)} columns: "
             f"{' | '.join(header)}"]
    stats_lines: list[str] = []
    anomalies: list[str] = []
    for col, name in enumerate(header):
        values = [_num(r[col]) for r in data if col < len(r)]
        numbers = [v for v in values if v is not None]
        empty = sum(1 for r in data if col >= len(r) or not r[col].strip())
        if empty:
            anomalies.append(f"{name}: {empty} empty cells")
        if len(numbers) < max(1, len(data) // 2):
            continue
        stats_lines.append(
            f"{name}: sum {_fmt(sum(numbers))}, min {_fmt(min(numbers))}, "
            f"max {_fmt(max(numbers))}, mean {_fmt(statistics.fmean(numbers))}")
        if len(numbers) >= 5:
            mean, sd = statistics.fmean(numbers), statistics.pstdev(numbers)
            outliers = [r for r in data if col < len(r) and (v := _num(r[col])) is not None
                        and sd > 0 and abs(v - mean) > 3 * sd]
            for r in outliers[:5]:
                anomalies.append(f"{name} outlier: {delim.join(r)}")
    kept_totals = [f"total row: {delim.join(r)}" for r in totals_rows]
    samples = ["first rows:", *(delim.join(r) for r in data[:3]), "last rows:",
               *(delim.join(r) for r in data[-2:])]
    return ["\n".join([*facts, *stats_lines, *kept_totals]),
            "anomalies:\n" + "\n".join(anomalies) if anomalies else "",
            "\n".join(samples)]


def _cells(line: str, delim: str) -> list[str]:
    cells = [c.strip() for c in line.strip().split(delim)]
    if delim == "|":
        cells = [c for i, c in enumerate(cells) if not (c == "" and i in (0, len(cells) - 1))]
    return cells


def _num(cell: str) -> float | None:
    cleaned = cell.replace(",", "").replace("%", "").replace("¥", "").replace("$", "").strip()
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def _reduce_json(text: str) -> list[str]:
    value = json.loads(text)
    paths: dict[str, dict[str, Any]] = {}
    scalars: list[str] = []

    def walk(node: Any, path: str, depth: int, top: bool) -> None:
        info = paths.setdefault(path or "$", {"types": Counter(), "numbers": [],
                                              "samples": [], "count": 0})
        info["count"] += 1
        info["types"][_json_type(node)] += 1
        if isinstance(node, dict):
            for k, v in node.items():
                child = f"{path}.{k}" if path else str(k)
                if top and not isinstance(v, dict | list):
                    scalars.append(f"{child} = {json.dumps(v, ensure_ascii=False)[:200]}")
                walk(v, child, depth + 1, top and depth < 1)
        elif isinstance(node, list):
            for item in node:
                walk(item, f"{path}[]", depth + 1, False)
            info.setdefault("lengths", []).append(len(node))
        else:
            if isinstance(node, int | float) and not isinstance(node, bool):
                info["numbers"].append(float(node))
            if len(info["samples"]) < 2:
                info["samples"].append(json.dumps(node, ensure_ascii=False)[:80])

    walk(value, "", 0, True)
    described = []
    for path, info in paths.items():
        types = "/".join(sorted(info["types"]))
        line = f"{path}: {types}"
        if info.get("lengths"):
            line += f" (length {sum(info['lengths'])})"
        nums = info["numbers"]
        if len(nums) > 1:
            line += f", sum {_fmt(sum(nums))}, min {_fmt(min(nums))}, max {_fmt(max(nums))}"
        elif info["samples"]:
            line += f", e.g. {', '.join(info['samples'])}"
        described.append(line)
    errors = [s for s in scalars if _ERRORISH.search(s)]
    return ["top-level values:\n" + "\n".join(scalars[:60]) if scalars else "",
            "\n".join(errors),
            "structure (path: type, aggregates):\n" + "\n".join(described[:80])]


def _json_type(node: Any) -> str:
    if node is None:
        return "null"
    if isinstance(node, bool):
        return "boolean"
    if isinstance(node, int | float):
        return "number"
    if isinstance(node, str):
        return "string"
    return "array" if isinstance(node, list) else "object"


def _reduce_code(text: str) -> list[str]:
    lines = text.splitlines()
    files = list(dict.fromkeys(_FILE.findall(text)))
    names = list(dict.fromkeys(next(g for g in m.groups() if g) for ln in lines
                               if (m := _DEF.match(ln))))
    errors = _first_lines_of_errors(lines)
    return ["\n".join(filter(None, [
        f"{len(lines)} lines of code or program output.",
        f"errors ({len(errors)}):\n" + "\n".join(errors[:30]) if errors else "no errors",
    ])),
        f"files: {', '.join(files[:60])}" if files else "",
        f"functions and classes: {', '.join(names[:120])}" if names else ""]


def _first_lines_of_errors(lines: Iterable[str]) -> list[str]:
    seen: dict[str, int] = {}
    out: list[str] = []
    for ln in lines:
        stripped = ln.strip()
        if not stripped or stripped.startswith(("File ", "at ", "^")):
            continue
        if re.match(r"^[\w.]*(Error|Exception|Warning)\b", stripped) or (
                _ERRORISH.search(stripped) and not stripped.startswith("Traceback")):
            key = _VOLATILE.sub("#", stripped)
            if key not in seen:
                seen[key] = len(out)
                out.append(stripped[:300])
    return out


def _reduce_prose(text: str) -> list[str]:
    sentences = list(dict.fromkeys(s.strip() for s in _SENTENCE.split(text) if s.strip()))
    words = Counter(w for s in sentences for w in re.findall(r"\w{4,}", s.lower()))
    common = {w for w, _ in words.most_common(15)}
    errors = [s for s in sentences if _ERRORISH.search(s)]
    numeric = [s for s in sentences if _NUMBER.search(s) and s not in errors]

    def score(index_sentence: tuple[int, str]) -> float:
        i, s = index_sentence
        value = sum(1 for w in re.findall(r"\w{4,}", s.lower()) if w in common) / 4
        return value + (1.5 if i in (0, len(sentences) - 1) else 0.0)

    rest = [(i, s) for i, s in enumerate(sentences) if s not in errors and s not in numeric]
    ranked = sorted(rest, key=score, reverse=True)[: max(3, len(sentences) // 5)]
    key = [s for _, s in sorted(ranked)]
    numbers = list(dict.fromkeys(_NUMBER.findall(text)))
    return [
        f"numbers in the text: {', '.join(numbers[:80])}" if numbers else "",
        "\n".join(errors[:20]),
        " ".join(numeric),
        " ".join(key),
    ]


_REDUCERS: dict[Shape, Callable[[str], list[str]]] = {
    "log": _reduce_log, "table": _reduce_table, "json": _reduce_json, "code": _reduce_code,
    "prose": _reduce_prose,
}

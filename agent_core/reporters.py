"""Event reporters: a colour console stream of the decision chain (rich), and JSON lines."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from .events import Event, EventType
from .report import TaskReport

if TYPE_CHECKING:
    from rich.console import Console

_MAX_ARGS = 160


class ConsoleReporter:
    """Prints each step in colour, like a live trace of the agent's reasoning."""

    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        if console is None:
            from rich.console import Console

            console = Console(stderr=False, highlight=False)
        self.console = console
        self.verbose = verbose
        self._streaming = False

    def __call__(self, event: Event) -> None:
        p = event.payload
        out = self.console.print
        match event.type:
            case EventType.AGENT_STARTED:
                what = "resumed" if p.get("resumed") else "started"
                text = f": {escape(_short(p.get('text', ''), 120))}" if p.get("text") else ""
                out(f"[bold cyan]▶ task {event.task_id} {what}[/]{text}")
            case EventType.PLANNER_DECISION:
                self._end_stream()
                kind = p.get("type")
                colour = {"tool_call": "yellow", "final_answer": "green", "ask_user": "magenta",
                          "invalid": "red"}.get(str(kind), "white")
                detail = ""
                if kind == "tool_call":
                    detail = f"{p.get('tool_name')} {_short(_json(p.get('arguments')), _MAX_ARGS)}"
                elif kind == "invalid":
                    detail = p.get("reason", "")
                elif self.verbose:
                    detail = _short(p.get("content", ""), 200)
                out(f"  [dim]round {event.round}[/] [bold {colour}]{kind}[/] {escape(detail)}"
                    f"[dim]  ({p.get('rule')})[/]")
            case EventType.TOOL_STARTED if self.verbose:
                out(f"    [dim]⚙ {p.get('tool')} …[/]")
            case EventType.TOOL_FINISHED:
                ms = float(p.get("seconds", 0)) * 1000
                out(f"    [green]✓ {p.get('tool')}[/] [dim]{ms:.0f} ms[/] "
                    f"{escape(_short(str(p.get('output', '')), 160))}")
            case EventType.TOOL_ERROR:
                hint = f" [dim]hint: {escape(str(p['hint']))}[/]" if p.get("hint") else ""
                out(f"    [red]✗ {p.get('tool')} {p.get('error')}:[/] "
                    f"{escape(_short(str(p.get('message', '')), 200))}{hint}")
            case EventType.HUMAN_CONFIRM_REQUIRED:
                out(f"    [bold magenta]⏸ approval needed[/] for {p.get('tool_name')} "
                    f"{escape(_short(_json(p.get('arguments')), _MAX_ARGS))}")
            case EventType.HUMAN_CONFIRM_RESOLVED:
                verdict = "approved" if p.get("approved") else "rejected"
                out(f"    [magenta]{verdict} by {escape(str(p.get('by')))}[/]")
            case EventType.PLAN_UPDATED:
                out(f"  [blue]plan[/] [dim]{escape(_short(p.get('plan', ''), 200))}[/]")
            case EventType.MODEL_FALLBACK:
                out(f"  [yellow]model fallback[/] {p.get('from')} → {p.get('to')} "
                    f"[dim]({p.get('reason')})[/]")
            case EventType.MODEL_RETRY if self.verbose:
                out(f"  [dim]model retry {p.get('attempt')}: {p.get('reason')}[/]")
            case EventType.CONTEXT_WARNING:
                out(f"  [yellow]context {p.get('tokens')}/{p.get('budget')} tokens[/]")
            case EventType.MODEL_DELTA if self.verbose:
                self._streaming = True
                self.console.print(escape(str(p.get("text", ""))), end="")
            case EventType.AGENT_FINISHED:
                self._end_stream()
                outcome = p.get("outcome")
                colour = "green" if outcome == "answered" else "yellow"
                out(f"[bold {colour}]■ {outcome}[/]: {escape(str(p.get('text', '')))}")
                if p.get("report"):
                    out(f"[dim]{escape(summary_line(TaskReport.from_dict(p['report'])))}[/]")
            case _:
                pass

    def _end_stream(self) -> None:
        if self._streaming:
            self.console.print()
            self._streaming = False


class JsonLinesReporter:
    """Writes every event as one JSON object per line."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def __call__(self, event: Event) -> None:
        self.stream.write(json.dumps(event.to_dict(), ensure_ascii=False, default=str) + "\n")
        self.stream.flush()


def summary_line(report: TaskReport) -> str:
    """One line: rounds, time, tokens, tools."""
    tools = ", ".join(f"{name}×{s.calls} {s.seconds * 1000:.0f}ms"
                      for name, s in report.tools.items()) or "none"
    return (f"{report.rounds} rounds · {report.wall_time:.2f}s wall · model "
            f"{report.model_time:.2f}s in {report.model_calls} calls · tokens "
            f"{report.prompt_tokens} prompt + {report.completion_tokens} completion · "
            f"tools: {tools}")


def escape(text: str) -> str:
    """Text shown as itself, not as rich markup (rich is imported by the console reporter
    only: a JSON-lines run does not load it)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _short(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""Running a tool in a child process with time and memory limits.

A tool declared ``@tool(isolation="subprocess", memory_mb=...)`` runs in a fresh Python
process (``python -m agent_core.tools._child``): it gets its validated arguments and the
caller's context as JSON on stdin and answers JSON on stdout. The child's address space is
capped with RLIMIT_AS; when the call's time runs out the whole process group is killed. A
crash, an out-of-memory kill or a signal becomes a ToolError; the gateway carries on.
``run_child`` is the same runner for other work (the converter of files people send).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import sys
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_jsonable_python

from ..errors import ToolError
from .context import ToolContext
from .registry import Tool


def _limit(memory_mb: int | None) -> Any:
    def apply() -> None:
        if memory_mb:
            size = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (size, size))

    return apply


def context_payload(ctx: ToolContext | None) -> dict[str, Any] | None:
    """The parts of a ToolContext that cross into the child (no live objects)."""
    if ctx is None:
        return None
    return {"user_id": ctx.user_id, "conversation_id": ctx.conversation_id,
            "trace_id": ctx.trace_id, "created_at": ctx.created_at, "role": ctx.role,
            "permissions": sorted(ctx.permissions),
            "workdir": str(ctx.workdir) if ctx.workdir else None, "task_id": ctx.task_id,
            "data_dir": str(ctx.data_dir) if ctx.data_dir else None,
            "extra": to_jsonable_python(dict(ctx.extra), fallback=str)}


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How a child process ended: its exit status (negative: the signal that killed it)
    and what it wrote."""

    returncode: int | None
    stdout: bytes
    stderr: bytes

    @property
    def signal_name(self) -> str | None:
        """The signal that killed it (SIGKILL when its memory ran out), or None."""
        code = self.returncode
        return signal.Signals(-code).name if code is not None and code < 0 else None


async def run_child(module: str, payload: bytes, *, memory_mb: int | None) -> ChildExit:
    """``python -m module`` with ``payload`` on stdin, in its own process group with its
    address space capped at ``memory_mb``; cancelled (a timeout), the whole group is
    killed before this returns."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
        preexec_fn=_limit(memory_mb))
    try:
        out, err = await process.communicate(payload)
    except BaseException:
        # Cancelled (the call's timeout or the task's): take the whole group down.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.shield(process.wait())
        raise
    return ChildExit(process.returncode, out, err)


async def run_isolated(tool: Tool, arguments: dict[str, Any], ctx: ToolContext | None) -> Any:
    """Call ``tool`` in a child process; its return value, or ToolError."""
    module = tool.fn.__module__
    payload = json.dumps({
        "module": module, "name": tool.fn.__name__,
        "arguments": to_jsonable_python(arguments, fallback=str),
        "ctx": context_payload(ctx)}).encode()
    done = await run_child("agent_core.tools._child", payload, memory_mb=tool.memory_mb)
    code = done.returncode
    if done.signal_name is not None:
        raise ToolError(f"{tool.name} was killed by {done.signal_name} (its memory or time "
                        "limit, or an operator); it did not finish")
    try:
        answer = json.loads(done.stdout.decode("utf-8", errors="replace") or "{}")
    except ValueError:
        answer = {}
    if code == 0 and answer.get("ok"):
        return answer.get("output")
    message = answer.get("error") or _last_line(done.stderr) or f"exit status {code}"
    raise ToolError(f"{tool.name} failed in its process: {message}",
                    retryable=bool(answer.get("retryable")))


def _last_line(stderr: bytes) -> str:
    lines = [ln for ln in stderr.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""

"""Sandboxed file tools: read, write, append and list files in the task's own directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from agent_core import Sandbox, ToolContext, ToolError, tool

_READ_LIMIT = 100_000


def _sandbox(ctx: ToolContext | None) -> Sandbox:
    sandbox = ctx.sandbox if ctx is not None else None
    if sandbox is None:
        raise ToolError("this task has no sandbox directory")
    sandbox.root()
    return sandbox


def _write(ctx: ToolContext | None, path: str, content: str, *, append: bool) -> dict[str, Any]:
    sandbox = _sandbox(ctx)
    target = sandbox.resolve(path, write=True)
    limits = sandbox.limits
    data = content.encode("utf-8")
    existing = target.lstat().st_size if target.exists() and not target.is_symlink() else 0
    new_size = existing + len(data) if append else len(data)
    if new_size > limits.max_file_bytes:
        raise ToolError(f"the file would be {new_size} bytes; the limit is "
                        f"{limits.max_file_bytes}")
    growth = new_size - existing
    if sandbox.usage() + growth > limits.max_total_bytes:
        raise ToolError(f"the sandbox would exceed its {limits.max_total_bytes}-byte quota")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Re-check after creating directories: a symlinked parent must not lead outside.
    target = sandbox.resolve(path, write=True)
    with sandbox.open_write(target, append=append) as handle:
        handle.write(data)
    return {"path": sandbox.relative(target), "bytes": new_size}


@tool(tags={"private"})
def read_file(path: str, offset: Annotated[int, Field(ge=0)] = 0,
              ctx: ToolContext | None = None) -> dict[str, Any]:
    """Read a text file from this task's sandbox (the files people sent are in inbox/).

    Args:
        path: Path relative to the sandbox, e.g. notes/today.md or inbox/report.pdf.txt.
        offset: Byte to start at, to go on reading a long file (next_offset).
    """
    sandbox = _sandbox(ctx)
    target = sandbox.resolve(path)
    if not target.exists():
        raise ToolError(f"no file {path!r} in the sandbox")
    if not target.is_file() or target.is_symlink():
        raise ToolError(f"{path!r} is not a regular file")
    with sandbox.open_read(target) as handle:
        handle.seek(offset)
        data = handle.read(_READ_LIMIT + 1)
    text = data[:_READ_LIMIT].decode("utf-8", errors="replace")
    more = len(data) > _READ_LIMIT
    answer: dict[str, Any] = {"path": path, "content": text, "truncated": more}
    if more:
        answer["next_offset"] = offset + _READ_LIMIT
    return answer


@tool(side_effect="write")
def write_file(path: str, content: str, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Create or replace a text file in this task's sandbox.

    Args:
        path: Path relative to the sandbox; missing folders are created.
        content: The whole new content.
    """
    return _write(ctx, path, content, append=False)


@tool(side_effect="write")
def append_file(path: str, content: str, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Append text to a file in this task's sandbox (created if missing).

    Args:
        path: Path relative to the sandbox.
        content: Text to add at the end.
    """
    return _write(ctx, path, content, append=True)


@tool(tags={"private"})
def list_files(path: str = ".",
               limit: Annotated[int, Field(ge=1, le=500)] = 200,
               ctx: ToolContext | None = None) -> dict[str, Any]:
    """List files under a folder of this task's sandbox.

    Args:
        path: Folder relative to the sandbox.
        limit: Most entries to return.
    """
    sandbox = _sandbox(ctx)
    root = sandbox.workdir
    whole = path in (".", "")
    base = root.resolve() if whole else sandbox.resolve(path)
    if not base.is_dir() and not (whole and sandbox.inbox is not None):
        raise ToolError(f"{path!r} is not a folder in the sandbox")
    bases = [base] if base.is_dir() else []
    if whole and sandbox.inbox is not None and sandbox.inbox.is_dir():
        bases.append(sandbox.inbox.resolve())  # what people sent, seen as inbox/
    entries: list[dict[str, Any]] = []
    for folder in bases:
        if _walk(sandbox, folder, entries, limit):
            return {"entries": entries, "truncated": True}
    return {"entries": entries, "truncated": False}


def _walk(sandbox: Sandbox, base: Path, entries: list[dict[str, Any]], limit: int) -> bool:
    """Add the files under ``base`` to ``entries``; True when ``limit`` was reached."""
    for dirpath, dirs, files in os.walk(base, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            full = Path(dirpath) / name
            info = full.lstat()
            kind = "link" if stat.S_ISLNK(info.st_mode) else "file"
            entries.append({"path": sandbox.relative(full), "bytes": info.st_size,
                            "kind": kind})
            if len(entries) >= limit:
                return True
    return False

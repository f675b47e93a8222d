"""The files people sent in a conversation (its inbox): list them, download one. Only a
caller who may see the conversation sees them (404 for anyone else); each file is reached
without following a symbolic link (``Sandbox.read``), its type decided from its content,
and served as a download the browser will not render."""

from __future__ import annotations

import asyncio
import io
import os
import re
import stat
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from agent_core import Sandbox, ToolError
from agent_core.attachments import sniff_file
from agent_core.tools.sandbox import inbox_dir, open_inside

from ._http import GATEWAY, bad
from .conversations import conversation_in_path

#: Served with their own type (a download still: the browser keeps it as a file); anything
#: else is application/octet-stream.
_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_ASCII = re.compile(r"[^A-Za-z0-9._()+-]+")


async def list_files(request: web.Request) -> web.Response:
    """The files kept in the conversation's inbox, by name: size, type, kind, when."""
    gateway = request.app[GATEWAY]
    cid = conversation_in_path(request)
    folder = inbox_dir(gateway.settings.hermes_data_dir, cid)
    found = await asyncio.to_thread(_listing, folder)
    base = request.path.rstrip("/")
    return web.json_response({"conversation_id": cid, "files": [
        {**entry, "url": f"{base}/{quote(entry['name'], safe='')}"} for entry in found]})


def _listing(folder: Path) -> list[dict[str, Any]]:
    try:
        names = sorted(entry.name for entry in folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        if name.startswith("."):
            continue
        try:  # a symbolic link, a folder, a FIFO: not a file anyone sent, not listed
            fd = open_inside(folder, name)
        except (ToolError, OSError):
            continue
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                continue
            sniffed = sniff_file(handle, name)
        found.append({"name": name, "size": info.st_size, "mime_type": sniffed.mime_type,
                      "kind": sniffed.kind, "modified": info.st_mtime})
    return found


async def get_file(request: web.Request) -> web.Response:
    """One file of the conversation's inbox, as a download."""
    gateway = request.app[GATEWAY]
    cid = conversation_in_path(request)
    name = request.match_info["name"]
    missing = bad(404, f"conversation {cid!r} has no file {name[:200]!r}")
    if name.startswith(".") or "/" in name:
        raise missing
    sandbox = Sandbox(inbox_dir(gateway.settings.hermes_data_dir, cid))
    try:
        # Never through a symlink: whatever one in the inbox points at is not served.
        data = await asyncio.to_thread(sandbox.read, name)
    except (ToolError, OSError):
        raise missing from None
    sniffed = sniff_file(io.BytesIO(data), name).mime_type
    kind = sniffed if sniffed in _IMAGES else "application/octet-stream"
    fallback = _ASCII.sub("_", name).strip("_") or "file"
    return web.Response(body=data, headers={
        "Content-Type": kind,
        "Content-Disposition": f"attachment; filename=\"{fallback}\"; "
                               f"filename*=UTF-8''{quote(name, safe='')}",
        "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox",
        "Cache-Control": "private, max-age=3600"})


def setup(app: web.Application) -> None:
    """Register the routes of a conversation's files."""
    app.router.add_get("/agent/conversations/{conversation_id}/files", list_files)
    app.router.add_get("/agent/conversations/{conversation_id}/files/{name}", get_file)

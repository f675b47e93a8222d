"""AuditLog: every write-tool execution and every approval decision, append-only.

Entries go to a Redis stream (``Keys.audit``, capped at about a million entries) and,
when HERMES_AUDIT_FILE is set, to a JSON-lines file as well (appended under a file lock, so
several processes on one host never interleave lines; the file is 0600, its folder 0700 when
made here).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_core.datadir import private_dir, tighten_file
from agent_core.filelock import FileLock
from agent_core.store import Keys, store_boundary

_MAXLEN = 1_000_000
_SCAN = 20_000


@store_boundary
class AuditLog:
    """An AuditSink writing to Redis (and a file), and the query behind GET /agent/audit."""

    def __init__(self, redis: Redis, prefix: str, *, file: Path | None = None) -> None:
        self.redis = redis
        self.key = Keys(prefix).audit()
        self.file = file
        self._lock = FileLock(str(file) + ".lock") if file else None
        self._private = False  # the file's mode checked (tighten_file) since this started

    async def record(self, entry: dict[str, Any]) -> None:
        """Append one entry (a ``ts`` is added when missing)."""
        entry = {"ts": time.time(), **entry}
        line = json.dumps(entry, ensure_ascii=False, default=str)
        await self.redis.xadd(self.key, {"entry": line}, maxlen=_MAXLEN, approximate=True)
        if self.file is not None:
            await asyncio.to_thread(self._append_line, line)

    def _append_line(self, line: str) -> None:
        assert self.file is not None and self._lock is not None
        private_dir(self.file.parent)
        with self._lock:
            # 0600 when created; one left readable by others is made private, once.
            fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                if not self._private:
                    self._private = True
                    tighten_file(self.file)
                handle.write(line + "\n")

    async def query(self, *, conversation_id: str | None = None, user: str | None = None,
                    tool: str | None = None, since: float | None = None,
                    until: float | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Newest first, filtered; scans at most the newest 20 000 entries."""
        high = f"{int(until * 1000)}" if until else "+"
        low = f"{int(since * 1000)}" if since else "-"
        rows: Any = await self.redis.xrevrange(self.key, max=high, min=low, count=_SCAN)
        out = []
        for stream_id, fields in rows:
            entry = json.loads(fields.get(b"entry") or fields.get("entry"))
            if conversation_id and entry.get("conversation_id") != conversation_id:
                continue
            if user and user not in (entry.get("requester"), entry.get("decided_by"),
                                     entry.get("approved_by")):
                continue
            if tool and entry.get("tool") != tool:
                continue
            entry["id"] = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
            out.append(entry)
            if len(out) >= limit:
                break
        return out

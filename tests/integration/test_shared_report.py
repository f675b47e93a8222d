"""20 tasks append to one shared report at once: every section intact, none lost."""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path
from typing import Any

from agent_core import TaskRequest
from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.tools import ApprovalRules
from tools.sales import save_daily_report


async def test_twenty_concurrent_tasks_append_to_one_report(
        make_loop: Any, model_server: ReplayModelServer, data_dir: Path) -> None:
    def respond(path: str, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if any(m["role"] == "tool" for m in messages):
            return Reply("Saved.")
        task = next(m["content"] for m in messages if m["role"] == "user")
        lines = "\n".join(f"{task} line {i} " + "x" * 200 for i in range(20))
        return Reply.call("save_daily_report", {"content": lines})

    model_server.responder = respond
    # Admins' writes run at once here (an explicit setting): the lock is under test.
    loop, _ = make_loop([save_daily_report], rules=ApprovalRules(skip_roles=frozenset({"admin"})))
    results = await asyncio.gather(*(
        loop.run(TaskRequest(text=f"task-{n}", conversation_id=f"r:{n}",
                             role="admin", permissions=frozenset({"*"}), data_dir=data_dir))
        for n in range(20)))
    assert all(r.outcome == "answered" for r in results)
    [report] = list((data_dir / "reports").glob("*.md"))
    text = report.read_text()
    for n in range(20):
        section = re.findall(rf"^task-{n} line (\d+) x{{200}}$", text, flags=re.MULTILINE)
        assert section == [str(i) for i in range(20)], f"task-{n} lines intact and in order"
    # Sections never interleave: each task's 20 lines are contiguous.
    owners = re.findall(r"^(task-\d+) line", text, flags=re.MULTILINE)
    runs = [owners[0]] + [b for a, b in itertools.pairwise(owners) if a != b]
    assert len(runs) == 20

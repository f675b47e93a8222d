"""A process holding a budget reservation, for the test that kills it: reserves one call's
worst case, prints the hold's id, then renews it until killed."""

from __future__ import annotations

import asyncio
import sys

from agent_core.budget import BudgetRule, Charge, StoreBudget
from agent_core.store import Keys, connect


async def main(url: str, prefix: str, limit: int, lease: float) -> None:
    budget = StoreBudget(connect(url), Keys(prefix).budgets,
                         [BudgetRule(scope="user", window="day", tokens=limit)], lease=lease)
    hold = await budget.reserve(Charge(task_id="doomed", user_id="u1", conversation_id="c1",
                                       role="user", model="m", prompt_tokens=100,
                                       max_tokens=900))
    print(hold.id, flush=True)
    await asyncio.Event().wait()  # renewing, as a live worker does, until killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))

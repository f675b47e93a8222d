"""Starting a run from outside the hub's agents (the gateway's API): the ``run_workflow``
request sent to a live executor, without waiting for its answer (it comes on
``reply.<executor>.<sender_id>``, and the run's state is readable in the store meanwhile).
A run started here acts for no conversation: its steps read no chat's data."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..bus import Bus, Headers
from ..discovery import choose, discover
from ..messages import MAX_DEADLINE_MS, TaskRequest
from .executor import RUN_WORKFLOW
from .runs import run_id_of


class NoExecutor(LookupError):
    """No live agent offers run_workflow."""


@dataclass(frozen=True, slots=True)
class Started:
    """A run that was asked for: its id, and the request's task and correlation ids."""

    run_id: str
    task_id: str
    correlation_id: str
    executor: str


async def choose_executor(bus: Bus) -> str:
    """A live workflow executor (by load and the traffic split), or NoExecutor."""
    try:
        chosen = choose(await discover(bus, RUN_WORKFLOW),
                        bus.settings.hub_traffic.get(RUN_WORKFLOW))
    except Exception as exc:
        raise NoExecutor(f"the hub's discovery did not answer: {exc}") from exc
    if chosen is None:
        raise NoExecutor("no workflow executor is running on the hub (hermes-gateway hub "
                         "runs one, HUB_EXECUTOR)")
    return chosen.agent_id


async def start_run(bus: Bus, workflow_id: str, given: dict[str, Any], *, sender_id: str,
                    version: int | None = None, deadline_ms: int = MAX_DEADLINE_MS,
                    correlation_id: str | None = None) -> Started:
    """Ask a live executor to run ``workflow_id`` on ``given``."""
    executor = await choose_executor(bus)
    arguments: dict[str, Any] = {"workflow_id": workflow_id, "input": given}
    if version is not None:
        arguments["version"] = version
    request = TaskRequest(sender_id=sender_id, receiver_id=executor,
                          intent=RUN_WORKFLOW, arguments=arguments, deadline_ms=deadline_ms,
                          **({"correlation_id": correlation_id} if correlation_id else {}))
    started = Started(run_id_of(sender_id, request.task_id), request.task_id,
                      request.correlation_id, executor)
    pause = await bus.admit(executor)
    if pause:
        await asyncio.sleep(pause)
    await bus.publish(bus.request_subject(executor), request,
                      Headers(request.correlation_id, request.correlation_id))
    return started

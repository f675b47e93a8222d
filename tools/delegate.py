"""delegate: hand a task to another agent on the hub that has a capability.

Enabled when the gateway runs with the hub (HERMES_HUB=true). Discovery finds a live agent
with the capability (least loaded, by the traffic split), the task goes to it as a
``task_request`` on the bus, and its ``task_response`` is the result. The request acts for
this task's own conversation (the ToolContext's, which the model cannot change), so an
agent like the retriever searches this conversation's archive and no other, whatever the
model puts in the arguments. A partial answer shows its next steps; a timeout or a refusal
comes back as a structured tool error.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from agent_core import ToolContext, ToolError, tool


@tool(timeout=310, retries=0, tags={"private"})
async def delegate(capability: str, task: str, arguments: dict[str, Any] | None = None,
                   deadline_ms: Annotated[int, Field(ge=100, le=300_000)] = 60_000,
                   ctx: ToolContext | None = None) -> dict[str, Any]:
    """Hand a task to a specialised agent on the hub and return its answer.

    Args:
        capability: What the agent must be able to do, a noun like validate_claim
            (answer_from_documents answers from the knowledge bases, citing them).
        task: The task in words, for the agent.
        arguments: Structured inputs the agent needs, if any.
        deadline_ms: How long to wait for the answer, in milliseconds.
    """
    delegation = ctx.services.delegation if ctx is not None else None
    if ctx is None or delegation is None:
        raise ToolError("no agent hub is connected here; answer without delegating")
    outcome = await delegation.delegate(
        capability, task, arguments=dict(arguments or {}), deadline_ms=deadline_ms,
        correlation_id=ctx.trace_id, conversation_id=ctx.conversation_id,
        on_chosen=lambda agent: ctx.report(f"{agent} is working on {capability}"))
    if outcome.status == "failed":
        code = outcome.error_code or "FAILED"
        detail = outcome.result.get("error") or outcome.result.get("rule") or ""
        raise ToolError(f"the {capability!r} agent {outcome.agent_id!r} could not do it: "
                        f"{code}{f' ({detail})' if detail else ''}",
                        retryable=code == "TIMEOUT")
    answer: dict[str, Any] = {"agent": outcome.agent_id, "status": outcome.status,
                              "result": dict(outcome.result)}
    if outcome.status == "partial":
        answer["next_steps"] = outcome.next_steps
    return answer

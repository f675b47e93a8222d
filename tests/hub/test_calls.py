"""The calls the hub answers itself, on a real nats-server: tool_call against the hub's
allowlist, and context_update into the context store."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from hub import Bus, ContextUpdate, TaskResponse, ToolCall
from hub.calls import call_tool, share_context
from hub.contexts import Contexts
from hub.messages import MAX_CONTEXT_BYTES
from hub.replay import replay
from hub.services import hub_services

from . import hubtools
from .conftest import BusFactory, unique

HubFactory = Callable[..., Awaitable[Bus]]


@pytest.fixture
async def hub(make_bus: BusFactory) -> AsyncIterator[HubFactory]:
    """A bus with the hub's services started on it (settings overridable); stopped after."""
    async with contextlib.AsyncExitStack() as stack:
        async def factory(**overrides: Any) -> Bus:
            settings = {"hermes_tools": ["tests.hub.hubtools"],
                        "hub_tools": ["double", "explode", "erase"], **overrides}
            bus = await make_bus(**settings)
            for service in hub_services(bus, bus.settings):
                await service.start()
                stack.push_async_callback(service.stop)
            return bus

        yield factory


def call(tool: str, caller: str = "claims-agent", **parameters: Any) -> ToolCall:
    return ToolCall(sender_id=caller, caller_id=caller, tool_name=tool, parameters=parameters)


async def test_an_allowlisted_tool_runs_and_its_answer_is_kept_under_the_correlation(
        hub: HubFactory, make_bus: BusFactory) -> None:
    await hub()
    client = await make_bus()
    request = call("double", amount=21)
    answer = await call_tool(client, request)
    assert answer.status == "success", answer
    assert answer.result["output"] == {"doubled": 42}
    assert (answer.task_id, answer.correlation_id) == (request.message_id,
                                                      request.correlation_id)
    assert hubtools.CALLS[-1] == ("hub:claims-agent", 21), "it runs as the calling agent"
    hops = await replay(client, request.correlation_id)
    assert [(h.stream, h.message["type"]) for h in hops] == [
        ("HMP_TOOLS", "tool_call"), ("HMP_REPLIES", "task_response")]


async def test_a_tool_outside_the_allowlist_is_refused_and_never_runs(hub: HubFactory,
                                                                      make_bus: BusFactory) -> None:
    await hub()
    client = await make_bus()
    ran = len(hubtools.CALLS)
    for name in ("forbidden", "no_such_tool"):
        answer = await call_tool(client, call(name))
        assert answer.status == "failed" and answer.error_code == "TOOL_NOT_ALLOWED"
        assert answer.result["field"] == "tool_name"
        assert "double" in answer.result["rule"] and "forbidden" not in answer.result["rule"]
    assert len(hubtools.CALLS) == ran


async def test_with_no_allowlist_every_tool_call_is_refused(hub: HubFactory,
                                                            make_bus: BusFactory) -> None:
    await hub(hub_tools=[])
    answer = await call_tool(await make_bus(), call("double", amount=1))
    assert answer.error_code == "TOOL_NOT_ALLOWED"
    assert answer.result["rule"].endswith(": none")


async def test_bad_arguments_a_raising_tool_and_a_write_come_back_as_clear_failures(
        hub: HubFactory, make_bus: BusFactory) -> None:
    await hub()
    client = await make_bus()
    bad = await call_tool(client, call("double", amount=5000))
    assert (bad.status, bad.error_code) == ("failed", "INVALID_ARGUMENTS")
    assert "amount" in bad.result["error"]
    raised = await call_tool(client, call("explode"))
    assert (raised.status, raised.error_code) == ("failed", "TOOL_ERROR")
    assert "RuntimeError" in raised.result["error"]
    assert hubtools.SECRET not in json.dumps(raised.result), "secrets never leave in errors"
    write = await call_tool(client, call("erase", path="a.txt"))
    assert (write.status, write.error_code) == ("failed", "PERMISSION")
    assert "'write' permission" in write.result["error"]
    assert ("erase", 0) not in hubtools.CALLS


async def test_the_same_tool_call_delivered_twice_runs_once(hub: HubFactory,
                                                            make_bus: BusFactory) -> None:
    await hub()
    client = await make_bus()
    request = call("double", amount=7)
    first = await call_tool(client, request)
    again = await call_tool(client, request)
    assert first.status == again.status == "success"
    assert again == first, "the second delivery gets the first one's answer"
    assert hubtools.CALLS.count(("hub:claims-agent", 7)) == 1


async def test_a_call_that_breaks_a_rule_is_answered_with_the_field_and_the_rule(
        hub: HubFactory, make_bus: BusFactory) -> None:
    await hub()
    client = await make_bus()
    message_id = uuid.uuid4().hex
    broken = {"type": "tool_call", "message_id": message_id, "sender_id": "a",
              "tool_name": "double", "parameters": {}}  # no caller_id
    reply = await client.nc.request("tool.call.double", json.dumps(broken).encode(), timeout=10)
    answer = client.parse(reply.data)
    assert isinstance(answer, TaskResponse) and answer.status == "failed"
    assert answer.error_code == "INVALID_MESSAGE" and answer.task_id == message_id
    assert answer.result["field"] == "caller_id"
    heartbeat = {"type": "heartbeat", "sender_id": "a", "agent_id": "a", "load_percent": 1,
                 "memory_used_mb": 1}
    reply = await client.nc.request("tool.call.double", json.dumps(heartbeat).encode(),
                                    timeout=10)
    answer = client.parse(reply.data)
    assert isinstance(answer, TaskResponse)
    assert answer.error_code == "INVALID_MESSAGE" and answer.result["field"] == "type"


async def test_with_no_hub_running_a_caller_is_told_at_once(make_bus: BusFactory) -> None:
    client = await make_bus()
    started = time.monotonic()
    answer = await call_tool(client, call("double", amount=1), wait=30)
    assert (answer.status, answer.error_code) == ("failed", "NO_HUB")
    assert "hermes-gateway hub" in answer.result["error"]
    assert time.monotonic() - started < 20, "no responders is an answer, not a wait"


def context(cid: str, version: int, data: bytes, **fields: Any) -> ContextUpdate:
    return ContextUpdate(sender_id="researcher", context_id=cid, version=version,
                         data=ContextUpdate.pack(data), expires_at=time.time() + 60, **fields)


async def test_context_updates_two_megabytes_kept_a_larger_one_refused_a_stale_one_ignored(
        hub: HubFactory, make_bus: BusFactory) -> None:
    await hub()
    client = await make_bus()
    cid = unique("case")
    fits = await share_context(client, context(cid, 2, os.urandom(MAX_CONTEXT_BYTES)))
    assert fits.status == "success" and fits.result == {"kept": True, "stored_version": 2}
    stale = await share_context(client, context(cid, 1, b"older"))
    assert stale.status == "success" and stale.result == {"kept": False, "stored_version": 2}
    # Built by hand: the model would refuse to make it, and a client need not use the model.
    big = context(cid, 3, b"").model_dump()
    big["data"] = ContextUpdate.pack(os.urandom(int(MAX_CONTEXT_BYTES * 1.05)))
    reply = await client.nc.request(f"context.update.{cid}", json.dumps(big).encode(),
                                    timeout=30)
    refused = client.parse(reply.data)
    assert isinstance(refused, TaskResponse) and refused.status == "failed"
    assert refused.error_code == "INVALID_MESSAGE"
    assert refused.result["field"] == "data" and "more than" in refused.result["rule"]
    kept = await Contexts(client).get(cid)
    assert kept is not None and kept.version == 2


async def test_two_copies_of_the_hub_run_each_call_once(hub: HubFactory,
                                                        make_bus: BusFactory) -> None:
    await hub()
    await hub()
    client = await make_bus()
    calls = [call("double", caller=unique("twice"), amount=n) for n in range(10)]
    for request in [*calls, *calls]:  # each one delivered twice
        answer = await call_tool(client, request)
        assert answer.status == "success" and answer.result["output"]["doubled"] == \
            request.parameters["amount"] * 2
    ran = [c for c in hubtools.CALLS if c[0] in {f"hub:{r.caller_id}" for r in calls}]
    assert sorted(amount for _, amount in ran) == list(range(10))


async def test_an_allowlisted_mcp_tool_runs_for_agents(make_bus: BusFactory) -> None:
    import sys
    from pathlib import Path

    from hub.services import start_services

    time_server = {"command": str(Path(sys.executable).parent / "mcp-server-time")}
    async with contextlib.AsyncExitStack() as stack:
        bus = await make_bus(hermes_tools=["tests.hub.hubtools"],
                             hub_tools=["time__get_current_time"],
                             hermes_mcp_servers={"time": time_server})
        await start_services(bus, bus.settings, stack)
        client = await make_bus()
        answer = await call_tool(client, call("time__get_current_time", timezone="UTC"))
        assert answer.status == "success", answer
        assert answer.result["output"]["timezone"] == "UTC"
        refused = await call_tool(client, call("time__convert_time", source_timezone="UTC",
                                               time="12:00", target_timezone="UTC"))
        assert refused.status == "failed" and refused.error_code == "TOOL_NOT_ALLOWED"

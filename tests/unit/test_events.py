"""EventBus: delivery, unsubscribe, sync and async handlers, failing handlers."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent_core import Event, EventBus, EventType


def ev(type_: EventType = EventType.TOOL_STARTED, **payload: object) -> Event:
    return Event(type_, "trace1", "conv1", 3, dict(payload))


async def test_typed_and_catch_all_subscribers_both_receive() -> None:
    bus = EventBus()
    typed: list[Event] = []
    everything: list[Event] = []
    bus.subscribe(typed.append, EventType.TOOL_STARTED)
    bus.subscribe(everything.append)
    bus.emit(ev(EventType.TOOL_STARTED))
    bus.emit(ev(EventType.AGENT_FINISHED))
    assert [e.type for e in typed] == [EventType.TOOL_STARTED]
    assert [e.type for e in everything] == [EventType.TOOL_STARTED, EventType.AGENT_FINISHED]
    assert everything[0].trace_id == "trace1" and everything[0].conversation_id == "conv1"
    assert everything[0].round == 3 and everything[0].timestamp > 0


async def test_unsubscribe_stops_delivery() -> None:
    bus = EventBus()
    got: list[Event] = []
    off = bus.subscribe(got.append, EventType.TOOL_STARTED)
    bus.emit(ev())
    off()
    bus.emit(ev())
    assert len(got) == 1


async def test_async_handlers_run_without_blocking_emit() -> None:
    bus = EventBus()
    got: list[str] = []
    gate = asyncio.Event()

    async def slow(e: Event) -> None:
        await gate.wait()
        got.append(str(e.type))

    bus.subscribe(slow)
    bus.emit(ev())
    assert got == []
    gate.set()
    await bus.drain()
    assert got == ["TOOL_STARTED"]


async def test_failing_handlers_are_logged_and_do_not_break_delivery(
        caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    got: list[Event] = []

    def bad(e: Event) -> None:
        raise RuntimeError("handler bug")

    async def bad_async(e: Event) -> None:
        raise RuntimeError("async handler bug")

    bus.subscribe(bad)
    bus.subscribe(bad_async)
    bus.subscribe(got.append)
    with caplog.at_level(logging.ERROR):
        bus.emit(ev())
        await bus.drain()
    assert len(got) == 1
    assert "handler bug" in caplog.text and "async handler bug" in caplog.text


async def test_secrets_in_payloads_are_redacted() -> None:
    from agent_core.redaction import register

    register(["xoxb-not-a-real-token-1234567890"])
    bus = EventBus()
    got: list[Event] = []
    bus.subscribe(got.append)
    bus.emit(ev(message="token xoxb-not-a-real-token-1234567890 failed",
                nested={"list": ["Bearer abcdefghijklmnop123"]}))
    assert "xoxb" not in str(got[0].payload) and "abcdefghijklmnop123" not in str(got[0].payload)


async def test_every_string_at_any_depth_is_redacted_and_the_rest_kept() -> None:
    import collections
    import enum

    from agent_core.redaction import MARKER

    class Kind(enum.StrEnum):
        LEAKY = "sk-leakyEnumValue9876XYZ"  # no other test registers a part of it

    token = "Bearer abcdefghijklmnop123"
    payload = {"n": 3, "x": 0.5, "ok": True, "none": None, "text": f"say {token}",
               "kind": Kind.LEAKY, "list": [1, token, {"deep": (token, 2)}],
               "ordered": collections.OrderedDict(a=token, b=7), "short": "answered"}
    bus = EventBus()
    got: list[Event] = []
    bus.subscribe(got.append)
    bus.emit(Event(EventType.TOOL_STARTED, "trace1", "conv1", 3, payload))
    assert got[0].payload == {
        "n": 3, "x": 0.5, "ok": True, "none": None, "text": f"say {MARKER}", "kind": MARKER,
        "list": [1, MARKER, {"deep": [MARKER, 2]}], "ordered": {"a": MARKER, "b": 7},
        "short": "answered"}
    assert payload["text"] == f"say {token}", "the emitter's own dict is left as it was"

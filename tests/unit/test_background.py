"""Background loops: a repeating step survives its own failures and ends when stopped,
even one stuck in a call that ignores the stop flag."""

from __future__ import annotations

import asyncio

from agent_core.background import Background, repeating


async def test_a_repeating_step_goes_on_after_a_failure_and_stops_when_asked() -> None:
    runs: list[int] = []

    async def step() -> None:
        runs.append(len(runs))
        if len(runs) == 2:
            raise ConnectionError("store down for a moment")

    loop = repeating(step, 0.01, "test step")
    async with asyncio.timeout(10):
        while len(runs) < 4:
            await asyncio.sleep(0.01)
    await loop.stop()
    stopped_at = len(runs)
    assert not loop.running
    await asyncio.sleep(0.05)
    assert len(runs) == stopped_at, "no run after the stop"


async def test_a_loop_stuck_in_a_call_is_cancelled_after_its_grace() -> None:
    loop = Background()
    entered = asyncio.Event()

    async def stuck() -> None:
        entered.set()
        await asyncio.Event().wait()  # a call that never looks at the flag

    loop.start(stuck(), name="stuck")
    await entered.wait()
    async with asyncio.timeout(10):
        await loop.stop(grace=0.05)
    assert not loop.running

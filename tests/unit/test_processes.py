"""The parent's keeping of its serving children (``gateway.processes.Siblings``), with
real child processes that stand in for ``serve --child``: one that dies at once, one that
never says it serves."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from gateway import processes
from gateway.processes import READY, Child, Siblings


class Stand(Siblings):
    """Siblings with one child, which runs the first of ``codes`` instead of a gateway, its
    replacement the second, and so on (the last one from then on)."""

    def __init__(self, *codes: str) -> None:
        super().__init__(2, "127.0.0.1", 0, stop_timeout=10)
        self.codes = codes
        self.spawned: list[Child] = []

    async def _spawn(self) -> Child:
        code = self.codes[min(len(self.spawned), len(self.codes) - 1)]
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE)
        self.spawned.append(child)
        return child


SERVES_THEN_DIES = f"print({READY!r}, flush=True)"
NEVER_SERVES = "import time; time.sleep(600)"


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(processes, "RESTART_DELAY", (0.05, 0.2))
    caplog.set_level(logging.INFO, "gateway.processes")


def delays(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().rsplit(" in ", 1)[1] for r in caplog.records
            if "starting another" in r.getMessage()]


async def restarted(siblings: Stand, caplog: pytest.LogCaptureFixture, times: int
                    ) -> list[str]:
    """Start, wait until the child was started again ``times`` times, stop: the delays."""
    await siblings.start()
    try:
        for _ in range(3000):  # 30 s, for a busy machine
            if len(delays(caplog)) >= times:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail(f"not started again {times} times: {delays(caplog)}")
    finally:
        await siblings.stop()
    return delays(caplog)[:times]


async def test_a_child_that_keeps_dying_young_is_started_again_later_each_time(
        caplog: pytest.LogCaptureFixture) -> None:
    siblings = Stand(SERVES_THEN_DIES)
    assert await restarted(siblings, caplog, 5) == \
        ["0.05 s", "0.1 s", "0.2 s", "0.2 s", "0.2 s"]
    assert all(child.returncode is not None for child in siblings.spawned)
    replaced = [r.getMessage() for r in caplog.records if "replaces" in r.getMessage()]
    first, second = siblings.spawned[:2]
    assert replaced[0] == f"serving process {second.pid} replaces {first.pid}"


async def test_after_a_long_life_a_child_is_started_again_after_the_first_delay(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(processes, "STABLE_AFTER", 0.0)  # every life counts as long
    assert await restarted(Stand(SERVES_THEN_DIES), caplog, 3) == ["0.05 s"] * 3


async def test_a_replacement_that_never_serves_is_killed_and_tried_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(processes, "START_TIMEOUT", 0.5)
    siblings = Stand(SERVES_THEN_DIES, NEVER_SERVES)
    await restarted(siblings, caplog, 2)
    first, hung = siblings.spawned[:2]
    said = [r.getMessage() for r in caplog.records]
    expected = [f"serving process {first.pid} exited (0); starting another in 0.05 s",
                f"serving process {hung.pid} did not start within 0.5 s; killing it",
                f"serving process {hung.pid} was killed by signal 9; "
                "starting another in 0.1 s"]
    assert [m for m in said if m in expected] == expected, said
    assert hung.returncode == -9


async def test_a_child_that_never_serves_at_start_fails_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "START_TIMEOUT", 0.5)
    siblings = Stand(NEVER_SERVES)
    with pytest.raises(RuntimeError, match=r"did not start within 0\.5 s"):
        await siblings.start()  # the parent does not serve with fewer than it was asked
    await siblings.stop()
    assert siblings.spawned[0].returncode is not None

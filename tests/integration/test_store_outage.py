"""A store outage as it happens: the gateway's Valkey stopped for ~5 s under traffic and
restarted on its data, while 30 Slack conversations send messages (Slack resends every
event that got no 2xx, as Slack does). Counted: messages told of an error and later answered
(must be 0), answers seen twice (must be 0), acked messages never answered (must be 0)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from agent_core.models.replay import Reply
from agent_core.store.embedded import EmbeddedValkey
from gateway.outage import DELAYED
from tests.integration.conftest import GatewayFactory, Harness, answer_echo
from tests.integration.test_slack import answers, event_body, mention, send

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CONVERSATIONS = 30
MESSAGES = 3


async def _refuse(info: Any) -> bool:
    return False


def tool_then_answer(path: str, body: dict[str, Any]) -> Any:
    """Each task takes two rounds (a tool call, then the answer), so the outage lands
    between saves of running tasks, not only before or after them."""
    if body["messages"][-1]["role"] == "user":
        return Reply.call("calc_growth_rate", {"current": 2, "previous": 1})
    return answer_echo(path, body)


def thread_of(h: Harness, message: dict[str, Any]) -> tuple[str, str]:
    """The thread a message is in: a post's own, or for an edit (a notice or an answer put
    in place of "working"), that of the message it edits. Each mention is its own thread,
    so its own conversation: a notice twice in one is a user told twice."""
    assert h.slack is not None
    if message.get("thread_ts"):
        return message["channel"], message["thread_ts"]
    posted = {p["ts"]: p.get("thread_ts") for p in h.slack.of("chat.postMessage")}
    return message["channel"], posted.get(message["ts"]) or message["ts"]


async def deliver_like_slack(h: Harness, text: str, channel: str, acked: list[str]) -> None:
    """POST one event until it gets a 2xx (the same event id each time, as Slack retries)."""
    body = event_body(mention(text, channel=channel))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            response = await send(h, body)
        except Exception:  # the gateway's own connection may drop during the outage
            response = None
        if response is not None and response.status < 300:
            acked.append(text)
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"{text!r} was never accepted")


@pytest.mark.parametrize("wait", [20.0, 1.0], ids=["tasks-wait", "users-told-of-delay"])
async def test_a_five_second_store_outage_under_traffic(make_gateway: GatewayFactory,
                                                       own_store: Any, wait: float) -> None:
    """``wait`` 20: running tasks wait the outage out; 1: they give up waiting, their users
    are told once that the answer is delayed, and the answer still comes, once."""
    server, info = own_store
    h = await make_gateway(slack=True, redis_url=info.url, hermes_lease_seconds=10,
                           hermes_store_outage_wait=wait)
    assert h.slack is not None
    h.model.responder = tool_then_answer
    h.model.latency = 0.5  # tasks are mid-flight when the store goes
    acked: list[str] = []

    async def conversation(n: int) -> None:
        for m in range(MESSAGES):
            await deliver_like_slack(h, f"c{n} message {m}", f"C{n:03d}", acked)
            await asyncio.sleep(0.4)

    senders = [asyncio.create_task(conversation(n)) for n in range(CONVERSATIONS)]
    # Stopped once tasks are running, not only queued: on a busy machine acked tasks may
    # not be claimed yet, and only a running task waits for the store (and is told of it).
    await h.wait_for(lambda: len(acked) >= CONVERSATIONS // 2
                     and len(h.model.requests) >= CONVERSATIONS // 2, timeout=60)
    # The outage an operator's SIGTERM makes: the server serves on until its next cron tick
    # (~50 ms). (Our own stop asks with SHUTDOWN and is gone in ~3 ms.)
    server.ask_to_stop = _refuse  # type: ignore[method-assign]
    await server.stop()
    in_flight = len(acked) - len(answers(h))
    await asyncio.sleep(5)
    restarted = EmbeddedValkey(server.dir.parent, port=info.port)
    await restarted.start()
    try:
        await asyncio.gather(*senders)
        expected = {f"answer to: {t}" for t in acked}

        def shown() -> Counter[str]:
            return Counter(a["text"] for a in answers(h) if a["text"] != DELAYED)

        await h.wait_for(lambda: expected <= set(shown()), timeout=120)
        await asyncio.sleep(2)  # a late duplicate would come now: 2 s of quiet first
        texts = shown()
        assert in_flight >= 10, "the outage must catch tasks mid-flight"
        notices = Counter(thread_of(h, a) for a in answers(h) if a["text"] == DELAYED)
        assert all(n == 1 for n in notices.values()), f"a delay told twice: {notices}"
        if wait < 5:
            assert notices, "users whose answers waited past the wait were told"
        else:
            assert not notices, "an outage shorter than the wait goes unnoticed"
        twice = {t: n for t, n in texts.items() if n > 1}
        errors = [t for t in texts if "try again" in t or "went wrong" in t]
        assert twice == {}, f"answers seen twice: {twice}"
        assert errors == [], f"told of an error (and answered anyway): {errors}"
        assert len(acked) == CONVERSATIONS * MESSAGES
    finally:
        await restarted.stop()


def lose_the_first_removal(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first item removal after a delivery fails as in an outage, and the process
    forgets what it delivered (as another one would)."""
    from agent_core import StoreUnavailableError

    h.model.responder = answer_echo
    outage = h.gateway.parts.workers.outage
    real = outage.retrying
    lost: list[str] = []

    async def losing(step: Any, what: str) -> Any:
        if not lost:
            lost.append(what)
            raise StoreUnavailableError("the conversation store is unreachable: simulated")
        return await real(step, what)

    monkeypatch.setattr(outage, "retrying", losing)
    monkeypatch.setattr(outage, "was_delivered", lambda task_id: False)
    return lost


async def test_an_answer_served_again_is_not_sent_again(
        make_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer went out, its removal from the queue was lost, and the item is served
    again in a process that does not remember sending it: the reply's record in the store
    says it was delivered, so nothing is posted or edited again."""
    h = await make_gateway(slack=True)
    assert h.slack is not None
    lost = lose_the_first_removal(h, monkeypatch)
    await send(h, event_body(mention("hello")))

    def carrying() -> list[tuple[str, dict[str, Any]]]:
        return [(m, p) for m, p in h.slack.calls  # type: ignore[union-attr]
                if p.get("text") == "answer to: hello"
                or p.get("markdown_text") == "answer to: hello"]

    await h.wait_for(lambda: bool(carrying()) and bool(lost), timeout=30)
    await h.wait_idle(timeout=30)
    assert h.gateway.parts.workers.processed == 2, "served again"
    [(method, _)] = carrying()
    assert method == "chat.postMessage"
    assert [m.text for m in h.slack.everything()] == ["answer to: hello"]


async def test_a_telegram_answer_served_again_is_not_sent_again(
        make_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.integration.test_telegram import post, update

    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    lost = lose_the_first_removal(h, monkeypatch)
    assert (await post(h, update("hello"))).status == 200
    await h.wait_for(lambda: bool(h.telegram.of("sendMessage")) and bool(lost),  # type: ignore[union-attr]
                     timeout=30)
    await h.wait_idle(timeout=30)
    assert h.gateway.parts.workers.processed == 2, "served again"
    assert [m.text for m in h.telegram.chat(42)] == ["answer to: hello"]
    assert h.telegram.of("editMessageText") == []

"""The signed webhook channel end to end, and the durable per-conversation queue under
load, duplicates and a worker that dies mid-task."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from adapters.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, signed_headers, verify
from agent_core.models.replay import ReplayModelServer, Reply
from tests.integration.conftest import WEBHOOK_SECRET, GatewayFactory, answer_echo

ROOT = Path(__file__).resolve().parents[2]


def body_of(**fields: Any) -> bytes:
    return json.dumps({"conversation_id": "ticket-7", "user_id": "agent-9", "text": "hello",
                       **fields}).encode()


async def post(client: Any, body: bytes, *, source: str = "crm", secret: str = WEBHOOK_SECRET,
               now: float | None = None, headers: dict[str, str] | None = None) -> Any:
    return await client.post(f"/webhook/{source}", data=body,
                             headers=headers if headers is not None else
                             signed_headers(secret, body, now))


async def test_a_signed_message_is_answered_at_the_signed_callback(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    response = await post(h.client, body_of(text="status of order 42?",
                                            callback_url=callback_server["url"]))
    assert response.status == 202
    accepted = await response.json()
    assert accepted["conversation_id"] == "webhook:crm:ticket-7"
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    headers, raw, payload = callback_server["received"][0]
    assert payload["text"] == "answer to: status of order 42?"
    assert payload["task_id"] == accepted["task_id"] and payload["kind"] == "answer"
    assert verify(WEBHOOK_SECRET, headers, raw) is None, "the callback is signed the same way"
    assert headers["Idempotency-Key"] == f"{accepted['task_id']}:answer"


async def test_without_a_callback_the_answer_is_fetched_from_the_task_api(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    accepted = await (await post(h.client, body_of(text="poll me"))).json()
    view = await h.wait_task(accepted["task_id"], "answered")
    assert view["text"] == "answer to: poll me"


async def test_callback_outage_is_retried_until_delivered(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    callback_server["fail_next"] = 3
    await post(h.client, body_of(callback_url=callback_server["url"]))
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    assert callback_server["attempts"] == 4


@pytest.mark.parametrize(("body", "tweak", "status", "reason"), [
    (body_of(), "bad_signature", 401, "signature does not match"),
    (body_of(), "stale", 401, "5-minute window"),
    (body_of(), "future", 401, "5-minute window"),
    (body_of(), "no_headers", 401, "missing"),
    (body_of(), "bad_timestamp", 401, "unix seconds"),
    (body_of(), "other_secret", 401, "signature does not match"),
    (b"{not json", None, 400, "invalid body"),
    (b"", None, 400, "invalid body"),
    (b'["a list"]', None, 400, "invalid body"),
    (json.dumps({"user_id": "u", "text": "x"}).encode(), None, 400, "conversation_id"),
    (body_of(text=""), None, 400, "text"),
    (body_of(text=17), None, 400, "text"),
    (body_of(surprise=True), None, 400, "surprise"),
    (body_of(conversation_id="has spaces"), None, 400, "conversation_id"),
    (body_of(callback_url="ftp://example.com/x"), None, 400, "callback_url"),
    (b"x" * 300_000, None, 413, "larger than"),
])
async def test_bad_webhook_requests_are_refused_with_a_reason(
        make_gateway: GatewayFactory, body: bytes, tweak: str | None, status: int,
        reason: str) -> None:
    h = await make_gateway()
    headers = signed_headers(WEBHOOK_SECRET, body)
    match tweak:
        case "bad_signature":
            headers[SIGNATURE_HEADER] = "sha256=" + "0" * 64
        case "stale":
            headers = signed_headers(WEBHOOK_SECRET, body, now=time.time() - 400)
        case "future":
            headers = signed_headers(WEBHOOK_SECRET, body, now=time.time() + 400)
        case "no_headers":
            headers = {"Content-Type": "application/json"}
        case "bad_timestamp":
            headers[TIMESTAMP_HEADER] = "yesterday"
        case "other_secret":
            headers = signed_headers("not-the-secret", body)
    response = await post(h.client, body, headers=headers)
    assert response.status == status
    assert reason in (await response.json())["error"]
    assert h.model.requests == []


async def test_callback_hosts_can_be_restricted(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_webhook_callback_hosts=["hooks.example.com"])
    response = await post(h.client, body_of(callback_url="http://127.0.0.1:9/evil"))
    assert response.status == 400


async def test_a_duplicate_delivery_runs_the_agent_once(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    body = body_of(callback_url=callback_server["url"], idempotency_key="evt-1")
    first = await post(h.client, body)
    second = await post(h.client, body)
    third = await post(h.client, body_of(callback_url=callback_server["url"],
                                         idempotency_key="evt-1", text="same key, new text"))
    assert first.status == 202
    assert second.status == 200 and (await second.json())["status"] == "duplicate"
    assert third.status == 200
    await h.wait_idle()
    await asyncio.sleep(0.2)
    assert len(h.model.requests) == 1 and len(callback_server["received"]) == 1

    # Without an idempotency key, a replay of the very same signed request is a duplicate.
    replay = body_of(callback_url=callback_server["url"], text="replayed")
    headers = signed_headers(WEBHOOK_SECRET, replay)
    assert (await post(h.client, replay, headers=headers)).status == 202
    assert (await post(h.client, replay, headers=headers)).status == 200


async def test_100_conversations_in_parallel_get_their_answers_in_order_exactly_once(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_workers=32)

    def slow_echo(path: str, body: dict[str, Any]) -> Any:
        reply = answer_echo(path, body)
        reply.delay = 0.01
        return reply

    h.model.responder = slow_echo
    conversations, per_conversation = 100, 3

    async def chat(n: int) -> None:
        for i in range(per_conversation):
            body = body_of(conversation_id=f"c{n}", text=f"c{n} m{i}",
                           callback_url=callback_server["url"])
            assert (await post(h.client, body)).status == 202

    await asyncio.gather(*(chat(n) for n in range(conversations)))
    total = conversations * per_conversation
    await h.wait_for(lambda: len(callback_server["received"]) >= total, timeout=60)
    await h.wait_idle()
    answers: dict[str, list[str]] = defaultdict(list)
    for _, _, payload in callback_server["received"]:
        answers[payload["conversation_id"]].append(payload["text"])
    assert len(callback_server["received"]) == total, "nothing duplicated"
    for n in range(conversations):
        assert answers[f"webhook:crm:c{n}"] == [f"answer to: c{n} m{i}"
                                               for i in range(per_conversation)]


async def test_messages_of_one_conversation_wait_for_the_running_task(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_workers=8)
    h.model.add(Reply("first done", delay=0.4), Reply("second done"))
    await post(h.client, body_of(text="one", callback_url=callback_server["url"]))
    await post(h.client, body_of(text="two", callback_url=callback_server["url"]))
    await h.wait_for(lambda: len(callback_server["received"]) == 2)
    assert [p["text"] for _, _, p in callback_server["received"]] == ["first done",
                                                                     "second done"]
    second_prompt = h.model.requests[1][1]["messages"]
    assert any(m["content"] == "first done" for m in second_prompt), \
        "the second task started after the first one finished"


async def test_waiting_conversations_are_served_first_come_first_served(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_workers=1)

    def echo_slow_first(path: str, body: dict[str, Any]) -> Any:
        reply = answer_echo(path, body)
        reply.delay = 0.4 if reply.text.endswith("c0") else 0.0
        return reply

    h.model.responder = echo_slow_first
    await post(h.client, body_of(conversation_id="c0", text="c0",
                                 callback_url=callback_server["url"]))
    await h.wait_for(lambda: len(h.model.requests) == 1)
    for n in range(1, 6):  # all arrive while the only worker is busy with c0
        assert (await post(h.client, body_of(conversation_id=f"c{n}", text=f"c{n}",
                                             callback_url=callback_server["url"]))).status == 202
    await h.wait_for(lambda: len(callback_server["received"]) == 6)
    served = [request["messages"][-1]["content"] for _, request in h.model.requests]
    assert served == [f"c{n}" for n in range(6)], "a later message overtook an earlier one"


async def test_interrupt_mode_stops_the_running_task_for_the_new_message(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_busy_mode="interrupt")
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}, delay=0.6),
                Reply("second task answer"))
    await post(h.client, body_of(text="long job", callback_url=callback_server["url"]))
    await h.wait_for(lambda: len(h.model.requests) == 1)
    await post(h.client, body_of(text="never mind, do this", callback_url=callback_server["url"]))
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    await h.wait_idle()
    assert [p["text"] for _, _, p in callback_server["received"]] == ["second task answer"]
    last_prompt = h.model.requests[-1][1]["messages"]
    assert last_prompt[-1]["content"] == "never mind, do this"


async def test_steer_mode_injects_the_message_into_the_running_task(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_busy_mode="steer")
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}, delay=0.5),
                Reply("answered with the steer"))
    await post(h.client, body_of(text="start", callback_url=callback_server["url"]))
    await h.wait_for(lambda: len(h.model.requests) == 1)
    await post(h.client, body_of(text="also mention the date", callback_url=callback_server["url"]))
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    await h.wait_idle()
    second_prompt = h.model.requests[1][1]["messages"]
    assert second_prompt[-1] == {"role": "user", "content": "also mention the date"}
    assert len(h.model.requests) == 2, "the steer did not start a task of its own"


def test_signature_helpers_round_trip() -> None:
    body = b'{"a": 1}'
    headers = signed_headers("s", body, now=1000)
    assert headers[SIGNATURE_HEADER] == sign("s", "1000", body)
    assert verify("s", headers, body, now=1100) is None
    assert verify("s", headers, body + b" ", now=1100) == "signature does not match"


async def test_a_burst_is_acknowledged_before_its_conversations_are_claimed(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    queue, workers = h.gateway.parts.queue, h.gateway.parts.workers
    workers.quiet_limit = 60.0  # no time limit in the test: the order alone
    in_flight: list[int] = []
    claim = queue.claim

    async def watched(cids: list[str]) -> Any:
        in_flight.append(queue._ingesting)  # messages of this process not yet queued
        return await claim(cids)

    queue.claim = watched  # type: ignore[method-assign]
    posts = []
    for n in range(40):  # a burst that arrives over a while, as a platform's does
        body = body_of(conversation_id=f"burst{n}", text=f"b{n}",
                       callback_url=callback_server["url"])
        posts.append(asyncio.ensure_future(post(h.client, body)))
        await asyncio.sleep(0.001)
    assert [r.status for r in await asyncio.gather(*posts)] == [202] * 40
    await h.wait_for(lambda: len(callback_server["received"]) == 40, timeout=60)
    assert in_flight and set(in_flight) == {0}, \
        f"claimed while messages of the burst waited for the store: {in_flight}"


# --- a worker that dies mid-task -----------------------------------------------------------


async def test_a_worker_killed_mid_task_has_its_messages_processed_after_the_lease(
        make_gateway: GatewayFactory, callback_server: dict[str, Any], redis_url: str,
        model_server: ReplayModelServer, tmp_path: Path) -> None:
    prefix = f"kill{os.getpid()}{int(time.time())}"
    entered = asyncio.Event()

    def hanging(path: str, body: dict[str, Any]) -> Any:
        entered.set()
        return Reply("never delivered", delay=4)

    model_server.responder = hanging
    env = {**os.environ, "REDIS_URL": redis_url, "REDIS_PREFIX": prefix,
           "HERMES_DATA_DIR": str(tmp_path / "victim"),
           "LLM_PROVIDER": "openai", "LLM_MODEL_NAME": "scripted",
           "LLM_BASE_URL": model_server.openai_url, "LLM_API_KEY": "sk-test-0123456789abcdef",
           "LLM_MAX_RETRIES": "0", "HERMES_LEASE_SECONDS": "3", "AGENT_REPLAN_EVERY": "0",
           "HERMES_WEBHOOK_SECRETS": json.dumps({"crm": WEBHOOK_SECRET}),
           "HERMES_WEBHOOK_CALLBACK_HOSTS": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    errors = (tmp_path / "victim.log").open("wb")
    victim = subprocess.Popen([sys.executable, "-m", "tests.integration.victim"], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=errors)
    assert victim.stdout is not None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(victim.stdout.readline), 30)
        assert line.strip(), (tmp_path / "victim.log").read_text()[-2000:]
        port = int(line)
        import aiohttp

        body = body_of(text="survive me", callback_url=callback_server["url"])
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/webhook/crm", data=body,
                headers=signed_headers(WEBHOOK_SECRET, body)) as response:
            assert response.status == 202
            task_id = (await response.json())["task_id"]
            await asyncio.wait_for(entered.wait(), 15)
            # Queued behind the running task: nobody is woken for it (its holder would
            # take it next), so it must be recovered with the dead holder's own item.
            behind = body_of(text="and me", callback_url=callback_server["url"])
            async with session.post(f"http://127.0.0.1:{port}/webhook/crm", data=behind,
                                    headers=signed_headers(WEBHOOK_SECRET, behind)) as second:
                assert second.status == 202
                second_id = (await second.json())["task_id"]
        victim.send_signal(signal.SIGKILL)  # the worker dies holding the lease
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)
        victim.stdout.close()
        errors.close()
    model_server.responder = answer_echo
    killed_at = time.monotonic()
    h = await make_gateway(redis_prefix=prefix, hermes_lease_seconds=3)
    await h.wait_for(lambda: len(callback_server["received"]) == 2, timeout=30)
    waited = time.monotonic() - killed_at
    answers = [(p["task_id"], p["text"]) for _, _, p in callback_server["received"]]
    assert answers == [(task_id, "answer to: survive me"), (second_id, "answer to: and me")]
    assert waited >= 1.0, "the messages waited for the dead worker's lease to expire"
    await h.wait_idle()
    assert len(callback_server["received"]) == 2


async def test_a_store_outage_answers_503_so_the_sender_retries(
        make_gateway: GatewayFactory, own_store: Any) -> None:
    server, info = own_store
    h = await make_gateway(redis_url=info.url)
    await server.stop()
    response = await post(h.client, body_of(text="while the store is down"))
    assert response.status == 503 and "retry" in (await response.json())["error"]
    assert (await h.client.get("/readyz")).status == 503

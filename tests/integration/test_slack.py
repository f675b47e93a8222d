"""Slack through the real slack-bolt AsyncApp: signed requests shaped like Slack's, and the
Web API calls captured by a local stand-in."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from adapters.slack import WORKING
from agent_core.models.replay import Reply
from tests.integration.conftest import GatewayFactory, Harness, answer_echo, slack_headers

_counter = iter(range(10_000, 99_999))


def ts() -> str:
    return f"{int(time.time())}.{next(_counter):06d}"


def event_body(event: dict[str, Any], *, event_id: str | None = None) -> bytes:
    return json.dumps({
        "token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id or f"Ev{next(_counter)}", "event_time": int(time.time()),
        "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": True}],
        "event": event,
    }).encode()


def mention(text: str, *, channel: str = "C9", user: str = "U1", thread_ts: str | None = None,
            message_ts: str | None = None) -> dict[str, Any]:
    event = {"type": "app_mention", "user": user, "text": f"<@UBOT> {text}",
             "ts": message_ts or ts(), "channel": channel, "event_ts": ts()}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


async def send(h: Harness, body: bytes, **kw: Any) -> Any:
    return await h.client.post("/slack/events", data=body, headers=slack_headers(body, **kw))


def answers(h: Harness) -> list[dict[str, Any]]:
    """The bot's messages a person sees that are not "working" placeholders, oldest first:
    channel, ts, thread_ts and text (mrkdwn for a post, Markdown for a stream)."""
    assert h.slack is not None
    shown = sorted(h.slack.everything(), key=lambda m: float(m.ts))
    return [{"channel": m.channel, "ts": m.ts, "thread_ts": m.thread_ts, "text": m.text,
             "streaming": m.streaming} for m in shown
            if m.text and not m.text.startswith(WORKING)]


async def test_url_verification_is_answered(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    body = json.dumps({"token": "x", "challenge": "abc123", "type": "url_verification"}).encode()
    response = await send(h, body)
    assert response.status == 200 and "abc123" in await response.text()


async def test_a_mention_is_streamed_into_its_thread_with_its_tool_steps(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    assert h.slack is not None
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}),
                Reply("**Sales doubled.** See [the report](https://example.com/r)."))
    event = mention("how did sales go?")
    started = time.monotonic()
    response = await send(h, event_body(event))
    assert response.status == 200 and time.monotonic() - started < 3.0
    await h.wait_for(lambda: bool(h.slack.of("chat.stopStream")))
    await h.wait_idle()
    [start] = h.slack.of("chat.startStream")
    assert start["thread_ts"] == event["ts"] and start["channel"] == "C9"
    assert (start["recipient_team_id"], start["recipient_user_id"]) == ("T1", "U1")
    assert start["task_display_mode"] == "plan", "it began with a step: shown as a plan"
    [message] = h.slack.thread("C9", event["ts"])
    assert not message.streaming and message.ts == start["ts"]
    assert message.text == "**Sales doubled.** See [the report](https://example.com/r)."
    steps = [c for c in message.chunks if c["type"] == "task_update"]
    assert steps and {s["title"] for s in steps} == {"calc_growth_rate"}
    assert steps[-1]["status"] == "complete"
    assert message.tag() == {"delivery": message.tag()["delivery"], "part": 0}
    assert [b["type"] for b in message.blocks] == ["context_actions"], "👍 / 👎 under it"
    assert h.slack.of("chat.postMessage") == [], "one message: the stream"
    statuses = [s for _, thread, s in h.slack.statuses if thread == event["ts"]]
    assert statuses[0] == "is thinking…" and statuses[-1] == "", "set, then cleared"
    sent = h.model.requests[0][1]["messages"]
    assert sent[-1]["content"] == "how did sales go?", "the <@BOT> mention is stripped"


async def test_without_streaming_a_working_message_is_replaced_by_the_answer(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_streaming=False)
    assert h.slack is not None
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}),
                Reply("**Sales doubled.** See [the report](https://example.com/r).",
                      delay=0.3))
    event = mention("how did sales go?")
    await send(h, event_body(event))
    await h.wait_for(lambda: len(answers(h)) == 1)
    await h.wait_idle()
    [working] = h.slack.of("chat.postMessage")
    assert working["text"] == WORKING and working["thread_ts"] == event["ts"]
    assert any("calc_growth_rate" in u["text"] for u in h.slack.of("chat.update"))
    [final] = answers(h)
    assert final["ts"] == working["ts"]
    assert final["text"] == "*Sales doubled.* See <https://example.com/r|the report>."
    assert h.slack.of("chat.startStream") == []


async def test_one_conversation_per_thread(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_progress="off")
    assert h.slack is not None
    h.model.responder = answer_echo
    root = ts()
    await send(h, event_body(mention("first", message_ts=root)))
    await h.wait_for(lambda: len(answers(h)) == 1)
    await send(h, event_body(mention("second", thread_ts=root)))
    await h.wait_for(lambda: len(answers(h)) == 2)
    await send(h, event_body(mention("elsewhere", channel="C7")))
    await h.wait_for(lambda: len(answers(h)) == 3)
    second_prompt = h.model.requests[1][1]["messages"]
    assert [m["content"] for m in second_prompt if m["role"] == "user"] == ["first", "second"]
    third_prompt = h.model.requests[2][1]["messages"]
    assert [m["content"] for m in third_prompt if m["role"] == "user"] == ["elsewhere"]
    assert [a["thread_ts"] for a in answers(h)[:2]] == [root, root]


async def test_a_direct_message_is_its_own_conversation(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_progress="off")
    h.model.responder = answer_echo
    event = {"type": "message", "channel_type": "im", "channel": "D42", "user": "U1",
             "text": "private question", "ts": ts(), "event_ts": ts()}
    await send(h, event_body(event))
    await h.wait_for(lambda: len(answers(h)) == 1)
    [reply] = answers(h)
    assert reply["channel"] == "D42" and reply.get("thread_ts") is None
    assert reply["text"] == "answer to: private question"


async def test_retries_and_the_duplicate_message_event_run_the_agent_once(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    h.model.responder = answer_echo
    event = mention("only once please")
    body = event_body(event, event_id="EvSAME")
    assert (await send(h, body)).status == 200
    assert (await send(h, body, retry=1)).status == 200
    assert (await send(h, body, retry=2)).status == 200
    as_message = {**event, "type": "message", "channel_type": "channel"}
    assert (await send(h, event_body(as_message))).status == 200
    await h.wait_for(lambda: len(answers(h)) == 1)
    await h.wait_idle()
    await asyncio.sleep(0.3)
    assert len(h.model.requests) == 1 and len(answers(h)) == 1


async def test_bots_and_ourselves_are_ignored(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    h.model.responder = answer_echo
    other_bot = {**mention("hi from a bot"), "bot_id": "B999"}
    ourselves = mention("echo", user="UBOT")
    dm_from_bot = {"type": "message", "channel_type": "im", "channel": "D1",
                   "subtype": "bot_message", "bot_id": "B1", "text": "x", "ts": ts()}
    for event in (other_bot, ourselves, dm_from_bot):
        assert (await send(h, event_body(event))).status == 200
    await asyncio.sleep(0.3)
    await h.wait_idle()
    assert h.model.requests == []


@pytest.mark.parametrize("forgery", ["bad_signature", "stale", "wrong_secret", "no_headers"])
async def test_forged_or_stale_requests_are_rejected(make_gateway: GatewayFactory,
                                                     forgery: str) -> None:
    h = await make_gateway(slack=True)
    body = event_body(mention("let me in"))
    headers = slack_headers(body)
    if forgery == "bad_signature":
        headers["X-Slack-Signature"] = "v0=" + "0" * 64
    elif forgery == "stale":
        headers = slack_headers(body, timestamp=int(time.time()) - 600)
    elif forgery == "wrong_secret":
        headers = slack_headers(body, secret="guessed")
    else:
        headers = {"Content-Type": "application/json"}
    response = await h.client.post("/slack/events", data=body, headers=headers)
    assert response.status == 401
    await asyncio.sleep(0.2)
    assert h.model.requests == []


@pytest.mark.parametrize(("body", "content_type"), [
    (b"null", "application/json"), (b"[1, 2]", "application/json"),
    (b"{not json", "application/json"), (b"payload=null", "application/x-www-form-urlencoded"),
    (b"payload=%7Bbad", "application/x-www-form-urlencoded"),
])
async def test_signed_bodies_that_are_not_objects_get_a_400(
        make_gateway: GatewayFactory, body: bytes, content_type: str) -> None:
    h = await make_gateway(slack=True)
    headers = {**slack_headers(body), "Content-Type": content_type}
    response = await h.client.post("/slack/events", data=body, headers=headers)
    assert response.status == 400
    assert "JSON object" in (await response.json())["error"]
    unsigned = await h.client.post("/slack/events", data=body,
                                   headers={"Content-Type": content_type})
    assert unsigned.status == 401, "the signature is checked before the body is read"


@pytest.mark.parametrize("event", [None, {**mention("hi"), "channel": "C1;drop"}])
async def test_signed_events_of_a_shape_slack_never_sends_get_a_400(
        make_gateway: GatewayFactory, event: Any) -> None:
    h = await make_gateway(slack=True)
    response = await send(h, event_body(event))
    assert response.status == 400, "a 5xx would make Slack send it again, to fail again"
    assert (await response.json())["error"]
    await asyncio.sleep(0.2)
    assert h.model.requests == []


async def test_long_answers_are_split_and_rate_limits_honoured(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    assert h.slack is not None
    paragraph = "word " * 200
    h.model.add(Reply("\n\n".join(f"Part {i}. {paragraph}" for i in range(8))))
    h.slack.fail("chat.postMessage", 429, times=1, headers={"Retry-After": "1"})
    started = time.monotonic()
    await send(h, event_body(mention("write a lot")))
    await h.wait_for(lambda: len(answers(h)) >= 3, timeout=20)
    await h.wait_idle()
    chunks = answers(h)
    assert all(len(c["text"]) <= 3500 for c in chunks)
    joined = " ".join(c["text"] for c in chunks)
    assert all(f"Part {i}." in joined for i in range(8))
    assert time.monotonic() - started >= 1.0, "the 429's Retry-After was waited out"


async def test_commands_work_in_slack(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True)
    assert h.slack is not None
    await send(h, event_body(mention("/help")))
    await h.wait_for(lambda: len(h.slack.of("chat.postMessage")) == 1)
    assert "/status" in h.slack.of("chat.postMessage")[0]["text"]
    assert h.model.requests == []


async def test_unknown_users_get_one_polite_refusal(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, hermes_allowed_users=["slack:UFRIEND"])
    assert h.slack is not None
    h.model.responder = answer_echo
    await send(h, event_body(mention("hi", user="USTRANGER")))
    await send(h, event_body(mention("hello?", user="USTRANGER")))
    await send(h, event_body(mention("hey", user="UFRIEND")))
    await h.wait_for(lambda: len(answers(h)) == 2)
    await h.wait_idle()
    texts = [a["text"] for a in answers(h)]
    assert sum("access list" in t for t in texts) == 1
    assert "answer to: hey" in texts and len(h.model.requests) == 1


async def test_a_store_outage_answers_503_so_slack_retries(make_gateway: GatewayFactory,
                                                           own_store: Any) -> None:
    server, info = own_store
    h = await make_gateway(slack=True, redis_url=info.url)
    await server.stop()
    response = await send(h, event_body(mention("are you there?")))
    assert response.status == 503 and response.headers["Retry-After"] == "5"


async def test_socket_mode_receives_events_and_acks_them(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_signing_secret=None,
                           slack_app_token="xapp-1-test-socket-token")
    assert h.slack is not None
    await h.wait_for(lambda: bool(h.slack.sockets))  # type: ignore[union-attr]
    h.model.responder = answer_echo
    envelope = await h.slack.push_event(json.loads(event_body(mention("over the socket"))))
    await h.wait_for(lambda: any(a["text"] == "answer to: over the socket"
                                 for a in answers(h)))
    assert envelope in h.slack.socket_acks
    # Without a signing secret the HTTP endpoint refuses everything.
    response = await send(h, event_body(mention("over http")))
    assert response.status == 401

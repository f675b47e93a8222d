"""Edits of what people sent (Slack message_changed, Telegram edited_message), and the
collect busy mode: real slack-bolt and python-telegram-bot against the stand-ins."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent_core.models.replay import Reply
from tests.integration.conftest import GatewayFactory, Harness, answer_echo, slack_headers
from tests.integration.test_slack import event_body, mention, send, ts
from tests.integration.test_telegram import PRIVATE, post, update


def edited(original: dict[str, Any], text: str) -> dict[str, Any]:
    """The message_changed event Slack sends when ``original`` (an app_mention) is edited."""
    inner = {"type": "message", "user": original["user"], "text": f"<@UBOT> {text}",
             "ts": original["ts"], "edited": {"user": original["user"], "ts": ts()}}
    if original.get("thread_ts"):
        inner["thread_ts"] = original["thread_ts"]
    return {"type": "message", "subtype": "message_changed", "hidden": True,
            "channel": original["channel"], "channel_type": "channel", "message": inner,
            "previous_message": {**inner, "text": original["text"]}, "event_ts": ts(),
            "ts": ts()}


def user_turns(h: Harness, request: int) -> list[str]:
    return [m["content"] for m in h.model.requests[request][1]["messages"]
            if m["role"] == "user"]


async def test_an_edit_of_a_queued_message_replaces_it(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_progress="off")
    started = asyncio.Event()

    def slow_first(path: str, body: dict[str, Any]) -> Reply:
        started.set()
        return Reply("first answer", delay=0.8) if len(h.model.requests) == 1 else \
            answer_echo(path, body)

    h.model.responder = slow_first
    root = mention("first")
    await send(h, event_body(root))
    await asyncio.wait_for(started.wait(), 10)
    second = mention("secnod question", thread_ts=root["ts"])
    await send(h, event_body(second))
    await send(h, event_body(edited(second, "second question")))
    await h.wait_for(lambda: len(h.model.requests) == 2)
    await h.wait_idle()
    assert user_turns(h, 1)[-1] == "second question", "the queued message was replaced"
    assert len(h.model.requests) == 2


async def test_an_edit_of_the_running_message_comes_in_as_a_new_message(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_progress="off")
    started = asyncio.Event()

    def slow_first(path: str, body: dict[str, Any]) -> Reply:
        started.set()
        return Reply("first answer", delay=0.5) if len(h.model.requests) == 1 else \
            answer_echo(path, body)

    h.model.responder = slow_first
    root = mention("waht is up")
    await send(h, event_body(root))
    await asyncio.wait_for(started.wait(), 10)
    await send(h, event_body(edited(root, "what is up")))
    await h.wait_for(lambda: len(h.model.requests) == 2)
    await h.wait_idle()
    assert user_turns(h, 1)[-1].endswith("what is up")
    assert "edited my previous message" in user_turns(h, 1)[-1]


async def test_an_edit_of_an_answered_message_offers_to_run_it_again(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_progress="off")
    assert h.slack is not None
    h.model.responder = answer_echo
    root = mention("how did sales go")
    await send(h, event_body(root))
    await h.wait_for(lambda: len(h.model.requests) == 1)
    await h.wait_idle()
    await send(h, event_body(edited(root, "how did sales go in Q3")))
    await h.wait_for(lambda: any(b.get("type") == "actions" for c in h.slack.of(
        "chat.postMessage") for b in c.get("blocks") or []))
    notice = next(c for c in h.slack.of("chat.postMessage") if c.get("blocks") and any(
        b["type"] == "actions" for b in c["blocks"]))
    assert "already answered" in notice["text"]
    assert len(h.model.requests) == 1, "the edit did not run by itself"
    button = next(b for b in notice["blocks"] if b["type"] == "actions")["elements"][0]
    payload = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U1"},
               "channel": {"id": "C9"}, "container": {"type": "message"},
               "message": {"ts": notice["ts"], "thread_ts": root["ts"], "text": ""},
               "actions": [{"type": "button", "action_id": button["action_id"],
                            "value": button["value"], "block_id": "b"}],
               "trigger_id": "1", "api_app_id": "A1", "token": "t"}
    body = f"payload={json.dumps(payload)}".encode()
    headers = {**slack_headers(body), "Content-Type": "application/x-www-form-urlencoded"}
    for _ in range(2):  # a second press runs nothing more
        assert (await h.client.post("/slack/events", data=body, headers=headers)).status == 200
    await h.wait_for(lambda: len(h.model.requests) == 2)
    await h.wait_idle()
    assert user_turns(h, 1)[-1] == "how did sales go in Q3"
    assert len(h.model.requests) == 2


async def test_a_telegram_edit_of_an_answered_message_offers_to_run_it_again(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.responder = answer_echo
    original = update("wether tomorrow?")
    await post(h, original)
    await h.wait_for(lambda: len(h.model.requests) == 1)
    await h.wait_idle()
    message = {**original["message"], "text": "weather tomorrow?",
               "edit_date": original["message"]["date"] + 5}
    await post(h, {"update_id": original["update_id"] + 1, "edited_message": message})
    await h.wait_for(lambda: any(c.get("reply_markup") for c in h.telegram.of("sendMessage")))
    notice = next(c for c in h.telegram.of("sendMessage") if c.get("reply_markup"))
    assert "already answered" in notice["text"]
    data = notice["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    press = {"update_id": original["update_id"] + 2, "callback_query": {
        "id": "cb1", "from": {"id": 42, "is_bot": False, "first_name": "Ann"},
        "chat_instance": "ci", "data": data,
        "message": {"message_id": notice["message_id"], "date": 0, "chat": PRIVATE,
                    "text": notice["text"]}}}
    await post(h, press)
    await h.wait_for(lambda: len(h.model.requests) == 2)
    await h.wait_idle()
    assert user_turns(h, 1)[-1] == "weather tomorrow?"


async def test_collect_mode_makes_a_burst_of_messages_one_task(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_progress="off", hermes_busy_mode="collect",
                           hermes_collect_window_ms=600)
    h.model.responder = answer_echo
    root = mention("I need the sales figures")
    await send(h, event_body(root))
    for text in ("for Q3", "by region please"):
        await asyncio.sleep(0.2)
        await send(h, event_body(mention(text, thread_ts=root["ts"])))
    await h.wait_for(lambda: len(h.model.requests) == 1)
    await h.wait_idle()
    await asyncio.sleep(0.3)
    assert len(h.model.requests) == 1, "one task for the burst"
    assert user_turns(h, 0)[-1] == "I need the sales figures\nfor Q3\nby region please"
    # A message after the window is a task of its own.
    await send(h, event_body(mention("thanks", thread_ts=root["ts"])))
    await h.wait_for(lambda: len(h.model.requests) == 2)
    assert user_turns(h, 1)[-1] == "thanks"

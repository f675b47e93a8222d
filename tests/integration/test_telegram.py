"""Telegram through python-telegram-bot's Bot and Update: Update JSON posted to the
webhook, Bot API calls captured by a local stand-in."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

from adapters.telegram_out import WORKING
from agent_core.models.replay import Reply
from tests.integration.conftest import TELEGRAM_SECRET, GatewayFactory, Harness, answer_echo
from tests.standins.telegram_api import BOT_ID, BOT_USERNAME

_ids = itertools.count(1000)
SECRET = {"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}
PRIVATE = {"id": 42, "type": "private", "first_name": "Ann"}
GROUP = {"id": -100123, "type": "supergroup", "title": "Sales", "is_forum": True}
ANN = {"id": 42, "is_bot": False, "first_name": "Ann", "username": "ann"}


def update(text: str, *, chat: dict[str, Any] = PRIVATE, entities: list[Any] | None = None,
           update_id: int | None = None, **message: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"message_id": next(_ids), "date": int(time.time()), "chat": chat,
                            "from": ANN, "text": text, **message}
    if entities:
        body["entities"] = entities
    return {"update_id": update_id or next(_ids), "message": body}


def mention(text: str, **kw: Any) -> dict[str, Any]:
    handle = f"@{BOT_USERNAME}"
    return update(f"{handle} {text}", chat=GROUP,
                  entities=[{"type": "mention", "offset": 0, "length": len(handle)}], **kw)


async def post(h: Harness, payload: Any, headers: dict[str, str] | None = None) -> Any:
    return await h.client.post("/telegram/webhook", json=payload,
                               headers=SECRET if headers is None else headers)


def sent(h: Harness) -> list[dict[str, Any]]:
    """The bot's messages a person sees now, oldest first (a message edited in place, as it
    reads now), with the parameters it was sent with; not the "working" placeholders."""
    assert h.telegram is not None
    posted = {int(c["message_id"]): c for c in h.telegram.of("sendMessage")
              if "message_id" in c}
    shown = []
    for m in sorted(h.telegram.messages.values(), key=lambda m: m.message_id):
        if m.deleted or m.text.startswith(WORKING):
            continue
        shown.append({**posted.get(m.message_id, {}), "chat_id": m.chat_id, "text": m.text,
                      "message_id": m.message_id})
    return shown


async def test_secret_token_is_required(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    assert (await post(h, update("hi"), headers={})).status == 401
    wrong = {"X-Telegram-Bot-Api-Secret-Token": "guess"}
    assert (await post(h, update("hi"), headers=wrong)).status == 401
    await asyncio.sleep(0.2)
    assert h.model.requests == []


@pytest.mark.parametrize("payload", ["not json", {"no": "update_id"}, {"update_id": "7"}, [1]])
async def test_malformed_updates_are_refused(make_gateway: GatewayFactory, payload: Any) -> None:
    h = await make_gateway(telegram=True)
    if payload == "not json":
        response = await h.client.post("/telegram/webhook", data=b"{oops", headers=SECRET)
    else:
        response = await post(h, payload)
    assert response.status == 400 and "error" in await response.json()


async def test_a_private_chat_is_answered_with_typing_shown(make_gateway: GatewayFactory
                                                            ) -> None:
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.add(Reply("Use **bold** & <tags> safely.", delay=0.2))
    assert (await post(h, update("format test"))).status == 200
    await h.wait_for(lambda: len(sent(h)) == 1)
    [message] = sent(h)
    assert message["chat_id"] == 42 and message["parse_mode"] == "HTML"
    assert message["text"] == "Use <b>bold</b> &amp; &lt;tags&gt; safely."
    assert h.telegram.of("sendChatAction")[0]["action"] == "typing"
    assert "reply_parameters" not in message, "private answers need no reply quote"


async def test_group_messages_need_a_mention_a_reply_or_a_command(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    h.model.responder = answer_echo
    await post(h, update("just chatting", chat=GROUP))
    bot_message = {"message_id": 3, "date": int(time.time()), "chat": GROUP, "text": "earlier",
                   "from": {"id": BOT_ID, "is_bot": True, "first_name": "Hermes",
                            "username": BOT_USERNAME}}
    await post(h, update("a reply to the bot", chat=GROUP, reply_to_message=bot_message))
    await post(h, mention("a mention"))
    command = f"/status@{BOT_USERNAME}"
    await post(h, update(command, chat=GROUP, message_thread_id=9, is_topic_message=True,
                         entities=[{"type": "bot_command", "offset": 0,
                                    "length": len(command)}]))
    other = "/status@some_other_bot"
    await post(h, update(other, chat=GROUP, entities=[{"type": "bot_command", "offset": 0,
                                                       "length": len(other)}]))
    await h.wait_for(lambda: len(sent(h)) == 3)
    await h.wait_idle()
    await asyncio.sleep(0.2)
    texts = [m["text"] for m in sent(h)]
    assert "answer to: a reply to the bot" in texts and "answer to: a mention" in texts
    assert any("idle" in t for t in texts), "the command addressed to us was run"
    assert len(h.model.requests) == 2
    quoted = next(m for m in sent(h) if m["text"] == "answer to: a mention")
    assert quoted["reply_parameters"]["message_id"] > 0


async def test_forum_topics_are_separate_conversations(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    h.model.responder = answer_echo
    await post(h, mention("topic seven", message_thread_id=7, is_topic_message=True))
    await h.wait_for(lambda: len(sent(h)) == 1)
    await post(h, mention("topic eight", message_thread_id=8, is_topic_message=True))
    await h.wait_for(lambda: len(sent(h)) == 2)
    assert sent(h)[1]["message_thread_id"] == 8
    prompt = h.model.requests[1][1]["messages"]
    assert [m["content"] for m in prompt if m["role"] == "user"] == ["topic eight"]


async def test_a_5000_character_answer_arrives_as_two_messages(make_gateway: GatewayFactory
                                                              ) -> None:
    h = await make_gateway(telegram=True)
    long_answer = "\n".join(f"line {i}: " + "x" * 90 for i in range(50))
    assert 4900 <= len(long_answer) <= 5100
    h.model.add(Reply(long_answer))
    await post(h, update("long please"))
    await h.wait_for(lambda: len(sent(h)) == 2)
    await h.wait_idle()
    first, second = sent(h)
    assert len(first["text"]) <= 4096 and len(second["text"]) <= 4096
    assert first["text"].endswith("x") and second["text"].startswith("line")
    assert (first["text"] + "\n" + second["text"]) == long_answer


async def test_update_id_dedupe(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    h.model.responder = answer_echo
    payload = update("once", update_id=555)
    for _ in range(3):
        assert (await post(h, payload)).status == 200
    await h.wait_for(lambda: len(sent(h)) == 1)
    await h.wait_idle()
    await asyncio.sleep(0.2)
    assert len(h.model.requests) == 1


async def test_flood_control_retry_after_is_honoured(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.responder = answer_echo
    h.telegram.fail("sendMessage", {"ok": False, "error_code": 429,
                                    "description": "Too Many Requests: retry after 1",
                                    "parameters": {"retry_after": 1}})
    started = time.monotonic()
    await post(h, update("flood"))
    await h.wait_for(lambda: len(sent(h)) == 1)
    assert time.monotonic() - started >= 1.0
    assert sent(h)[0]["text"] == "answer to: flood"


async def test_only_one_replica_sets_the_webhook(make_gateway: GatewayFactory) -> None:
    first = await make_gateway(telegram=True)
    assert first.telegram is not None
    second = await make_gateway(telegram=True, redis_prefix=first.settings.redis_prefix,
                                telegram_api_url=first.telegram.url)
    await first.wait_for(lambda: len(first.telegram.of("setWebhook")) >= 1)
    await asyncio.sleep(0.5)
    calls = first.telegram.of("setWebhook")
    assert len(calls) == 1 and calls[0]["url"] == "https://hermes.example.test/telegram/webhook"
    assert calls[0]["secret_token"] == TELEGRAM_SECRET
    assert second.gateway.parts.channels.telegram is not None


async def test_long_polling_by_the_leader(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True, telegram_mode="polling")
    assert h.telegram is not None
    h.model.responder = answer_echo
    await h.wait_for(lambda: len(h.telegram.of("getUpdates")) >= 1)
    h.telegram.push_update(update("via polling"))
    await h.wait_for(lambda: len(sent(h)) == 1)
    assert sent(h)[0]["text"] == "answer to: via polling"
    assert h.telegram.of("deleteWebhook")


async def test_a_store_outage_answers_503_so_telegram_retries(make_gateway: GatewayFactory,
                                                               own_store: Any) -> None:
    server, info = own_store
    h = await make_gateway(telegram=True, redis_url=info.url)
    await server.stop()
    response = await post(h, update("while the store is down"))
    assert response.status == 503, "a 200 would tell Telegram the update was handled"
    assert "retry" in (await response.json())["error"]


async def test_polling_asks_again_for_an_update_the_store_could_not_take(
        make_gateway: GatewayFactory, own_store: Any) -> None:
    server, info = own_store
    h = await make_gateway(telegram=True, telegram_mode="polling", redis_url=info.url)
    assert h.telegram is not None
    h.model.responder = answer_echo
    await h.wait_for(lambda: len(h.telegram.of("getUpdates")) >= 1)
    await server.stop()
    h.telegram.push_update(update("sent while the store is down"))
    await asyncio.sleep(2.5)
    assert sent(h) == []
    assert h.telegram.updates, "the update was not confirmed to Telegram"
    await server.start()
    await h.wait_for(lambda: len(sent(h)) == 1, timeout=30)
    assert sent(h)[0]["text"] == "answer to: sent while the store is down"
    await h.wait_idle()
    await asyncio.sleep(0.5)
    assert len(sent(h)) == 1, "answered once"


@pytest.mark.parametrize(("change", "status"), [
    ({"chat": {"id": [1], "type": "private"}}, 400),  # a chat id that is no number: refused
    ({"text": True}, 200),  # not text: ignored
])
async def test_updates_of_a_shape_telegram_never_sends(make_gateway: GatewayFactory,
                                                       change: dict[str, Any],
                                                       status: int) -> None:
    h = await make_gateway(telegram=True)
    payload = update("hi")
    payload["message"].update(change)
    response = await post(h, payload)
    assert response.status == status
    if status >= 400:
        assert (await response.json())["error"]
    await asyncio.sleep(0.2)
    assert h.model.requests == []


async def test_the_poller_survives_a_failing_get_updates(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True, telegram_mode="polling")
    assert h.telegram is not None
    h.model.responder = answer_echo
    await h.wait_for(lambda: len(h.telegram.of("getUpdates")) >= 1)
    h.telegram.fail("getUpdates", {"ok": False, "error_code": 409, "description":
                                   "Conflict: terminated by other getUpdates request"})
    await h.wait_for(lambda: not h.telegram.failures["getUpdates"])  # it got the 409
    h.telegram.push_update(update("after a conflict"))
    await h.wait_for(lambda: len(sent(h)) == 1)
    assert sent(h)[0]["text"] == "answer to: after a conflict"

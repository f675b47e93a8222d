"""Telegram answers shown as they are written (a draft in a private chat, one message
edited in place in a group) and delivered once whatever fails: python-telegram-bot against
the stand-in, which keeps the messages and drafts a person sees and fails chosen calls."""

from __future__ import annotations

import pytest

from adapters.telegram_out import REPEATED, WORKING
from agent_core.models.replay import Reply
from tests.integration.conftest import GatewayFactory, Harness
from tests.integration.test_telegram import GROUP, PRIVATE, mention, post, update
from tests.standins.telegram_api import Message

ANSWER = ("Sales grew 12% in Q3, led by the north region. Margins held at 41%, and the new "
          "product line sold 3,200 units in its first month.")


def shown(h: Harness, chat: int) -> list[Message]:
    assert h.telegram is not None
    return h.telegram.chat(chat)


def answers(h: Harness, chat: int) -> list[Message]:
    return [m for m in shown(h, chat) if m.text.startswith(ANSWER[:30])]


async def idle_with_answer(h: Harness, chat: int, count: int = 1) -> list[Message]:
    await h.wait_for(lambda: len(answers(h, chat)) >= count, timeout=20)
    await h.wait_idle()
    return answers(h, chat)


async def test_a_private_answer_is_drafted_as_it_is_written_then_posted_once(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True, llm_stream=True)
    assert h.telegram is not None
    h.model.add(Reply(ANSWER, pace=0.03))
    await post(h, update("how did Q3 go?"))
    [message] = await idle_with_answer(h, PRIVATE["id"])
    assert message.text == ANSWER
    drafts = [text for chat, _, text in h.telegram.draft_log if chat == PRIVATE["id"]]
    texts = [" ".join(d.removesuffix("…").split()) for d in drafts if d != WORKING]
    assert len(texts) >= 2, "the answer was drafted as it was written"
    assert all(ANSWER.startswith(t) for t in texts), drafts
    assert [len(t) for t in texts] == sorted(len(t) for t in texts), "in order"
    assert len({draft for _, draft, _ in h.telegram.draft_log}) == 1, "one draft, animated"
    assert (PRIVATE["id"], None) not in h.telegram.drafts, "the answer replaced the draft"
    assert h.telegram.of("sendChatAction"), "typing while it worked"
    assert h.gateway.parts.channels.telegram is not None
    assert not h.gateway.parts.channels.telegram._typing, "and not after"


async def test_flood_control_on_a_draft_drops_drafts_never_the_answer(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True, llm_stream=True)
    assert h.telegram is not None
    h.model.add(Reply(ANSWER, pace=0.03))
    h.telegram.inject("sendMessageDraft", "429", retry_after=1)
    await post(h, update("how did Q3 go?"))
    [message] = await idle_with_answer(h, PRIVATE["id"])
    assert message.text == ANSWER
    outcomes = [a.outcome for a in h.telegram.attempts if a.method == "sendMessageDraft"]
    assert outcomes[0] == "429"


@pytest.mark.parametrize(("failure", "copies"), [("429", 1), ("timeout", 1), ("lost", 2)])
async def test_a_private_answer_whose_post_failed(make_gateway: GatewayFactory,
                                                  failure: str, copies: int) -> None:
    """Flood control: posted again after retry_after, once. A timeout or a lost answer:
    Telegram cannot be asked whether the message arrived, so it is posted again saying
    that it may repeat an earlier message (the stand-in carried out the lost one, not the
    timed-out one)."""
    h = await make_gateway(telegram=True, telegram_timeout=1)
    assert h.telegram is not None
    h.model.add(Reply(ANSWER))
    h.telegram.inject("sendMessage", failure, retry_after=1)  # type: ignore[arg-type]
    await post(h, update("how did Q3 go?"))
    found = await idle_with_answer(h, PRIVATE["id"], copies)
    assert len(found) == copies
    assert found[0].text.startswith(ANSWER)
    if failure == "429":
        assert found[0].text == ANSWER
    else:
        assert REPEATED.strip("_") in found[-1].text or "may repeat" in found[-1].text


async def test_a_group_answer_is_one_message_edited_in_place(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True, llm_stream=True)
    assert h.telegram is not None
    h.model.add(Reply(ANSWER, pace=0.05))
    await post(h, mention("how did Q3 go?"))
    [message] = await idle_with_answer(h, GROUP["id"])
    assert shown(h, GROUP["id"]) == [message], "the placeholder became the answer"
    [placeholder] = h.telegram.of("sendMessage")
    # Posted when the task starts: "working", or the first words if the model was quicker.
    assert placeholder["text"] == WORKING or ANSWER.startswith(
        placeholder["text"].removesuffix(" …"))
    assert placeholder["reply_parameters"]
    assert message.text == ANSWER and message.edits >= 1
    assert h.telegram.of("sendMessageDraft") == [], "no drafts in groups"


@pytest.mark.parametrize("failure", ["429", "timeout", "lost"])
async def test_a_group_answer_whose_last_edit_failed_is_edited_again(
        make_gateway: GatewayFactory, failure: str) -> None:
    """The answer is an edit of a message the gateway holds: repeated until it is there
    (a repeat of an edit that went in answers "not modified")."""
    h = await make_gateway(telegram=True, telegram_timeout=1)
    assert h.telegram is not None
    h.model.add(Reply(ANSWER))
    h.telegram.inject("editMessageText", failure, retry_after=1)  # type: ignore[arg-type]
    await post(h, mention("how did Q3 go?"))
    [message] = await idle_with_answer(h, GROUP["id"])
    assert message.text == ANSWER and shown(h, GROUP["id"]) == [message]


async def test_a_lost_placeholder_leaves_at_most_a_stale_one_and_one_answer(
        make_gateway: GatewayFactory) -> None:
    """The one step Telegram cannot reconcile in a group: the placeholder's post. Posted
    again, the first may stay, saying only "working"; the answer is still shown once."""
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.add(Reply(ANSWER))
    h.telegram.inject("sendMessage", "lost")
    await post(h, mention("how did Q3 go?"))
    [message] = await idle_with_answer(h, GROUP["id"])
    assert message.text == ANSWER
    assert [m.text for m in shown(h, GROUP["id"]) if m is not message] == [WORKING]


async def test_groups_can_have_only_the_final_message(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True, telegram_group_streaming=False, llm_stream=True)
    assert h.telegram is not None
    h.model.add(Reply(ANSWER, pace=0.02))
    await post(h, mention("how did Q3 go?"))
    [message] = await idle_with_answer(h, GROUP["id"])
    assert [c["text"] for c in h.telegram.of("sendMessage")] == [message.text]
    assert h.telegram.of("editMessageText") == []

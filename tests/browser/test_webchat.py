"""The web chat as a new user meets it, in headless Chromium: answers rendered from
Markdown (and nothing else), chat commands, steps in the order they happened, Approve and
Reject, a question's choices, a reload in the middle of an approval, the working indicator
and Stop, Enter and Shift+Enter, a 390-pixel-wide screen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from agent_core.models.replay import Failure, Reply

from .conftest import EXPECT_MS, Chat

#: A browser, a gateway and several round trips per test: room for a loaded machine.
pytestmark = pytest.mark.timeout(180)

SAVE = Reply.call("save_daily_report", {"content": "Q3 revenue: 1.2M"})
HOSTILE = ("**bold** and `code`\n\n- one\n- two\n\n```\nblock line\n```\n\n"
           "| region | total |\n|---|---|\n| north | 12 |\n\n"
           "<img src=x onerror=\"window.pwned=1\"> <script>window.pwned=2</script>"
           "[click](javascript:window.pwned=3)")


def report(chat: Chat) -> str:
    files = list((Path(chat.harness.settings.hermes_data_dir) / "reports").glob("*.md"))
    return files[0].read_text() if files else ""


async def order_of(chat: Chat, *selectors: str) -> list[int]:
    """Positions, in the page, of the first element matching each selector (or text)."""
    return await chat.page.evaluate("""(sels) => {
        const all = [...document.querySelectorAll('#log *')];
        const deepest = (e, t) => e.textContent.includes(t)
            && ![...e.children].some((c) => c.textContent.includes(t));
        return sels.map((s) => all.findIndex((e) => s.startsWith('text=')
            ? deepest(e, s.slice(5)) : e.matches(s)));
    }""", list(selectors))


async def test_an_answer_is_rendered_from_markdown_and_only_safe_html_remains(
        chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply(HOSTILE))
    await c.send("show me")
    answer = c.bubbles("bot").last
    await expect(answer.locator("strong")).to_have_text("bold")
    await expect(answer.locator("li")).to_have_count(2)
    await expect(answer.locator("pre code")).to_have_text("block line\n")
    await expect(answer.locator("td").first).to_have_text("north")
    # HTML the model wrote is shown as text, never made into elements.
    await expect(answer).to_contain_text('<img src=x onerror="window.pwned=1">')
    assert await answer.locator("img, script, a[href^='javascript']").count() == 0
    assert await c.page.evaluate("window.pwned") is None
    # The page loads nothing from elsewhere: its scripts are the gateway's own.
    assert all(u.startswith(c.url) for u in c.requests), c.requests
    assert c.errors == []


async def test_chat_commands_answer_in_the_page_without_a_task(chat: Any) -> None:
    c: Chat = await chat()
    for command, says in [("/help", "/stop"), ("/status", "model"),
                          ("/reset", "fresh"), ("/stop", "")]:
        before = await c.bubbles("bot").count()
        await c.send(command)
        await expect(c.bubbles("bot")).to_have_count(before + 1)
        text = await c.bubbles("bot").last.inner_text()
        assert says.lower() in text.lower() and text.strip(), (command, text)
    assert not any("undefined" in u for u in c.requests), c.requests
    assert await c.page.get_by_text("event stream").count() == 0
    assert c.harness.model.requests == []
    assert c.errors == []


async def test_approve_shows_the_result_after_the_approval_in_the_order_it_happened(
        chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(SAVE, Reply("Saved the **Q3** report."))
    await c.send("save the Q3 report")
    approve = c.page.get_by_role("button", name="Approve")
    await expect(approve).to_be_visible()
    await expect(c.page.locator(".approval pre")).to_contain_text("Q3 revenue")
    # Paused for a person: not "working", and Send is free again.
    await expect(c.page.locator("#working")).to_be_hidden()
    assert report(c) == ""
    await approve.click()
    await expect(c.bubbles("bot").last.locator("strong")).to_have_text("Q3")
    await expect(c.page.get_by_role("button", name="Approve")).to_have_count(0)
    positions = await order_of(c, "text=→ save_daily_report", ".approval",
                               "text=✓ approved by", "text=✓ save_daily_report",
                               "text=Saved the")
    assert -1 not in positions and positions == sorted(positions), positions
    assert "Q3 revenue" in report(c)
    await expect(c.page.locator("#send")).to_be_enabled()
    assert c.errors == []


async def test_reject_says_the_call_was_not_run(chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(SAVE, Reply("Understood, I did not save it."))
    await c.send("save the Q3 report")
    await c.page.get_by_role("button", name="Reject").click()
    await expect(c.page.get_by_text("did not save it")).to_be_visible()
    refused = c.page.locator(".steps .error", has_text="save_daily_report was not run")
    await expect(refused).to_contain_text("rejected by")
    positions = await order_of(c, ".approval", "text=was not run", "text=did not save it")
    assert positions == sorted(positions) and -1 not in positions, positions
    assert report(c) == ""


async def test_a_reload_mid_approval_brings_back_the_history_and_the_buttons(
        chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply("The answer is **42**."), SAVE, Reply("Saved after the reload."))
    await c.send("what is the answer?")
    await expect(c.page.locator(".bot strong")).to_have_text("42")
    await c.send("save the Q3 report")
    await expect(c.page.get_by_role("button", name="Approve")).to_be_visible()
    await c.page.reload()
    # The history, in order, Markdown rendered again, and the pending approval's buttons.
    await expect(c.bubbles("user")).to_have_text(["what is the answer?", "save the Q3 report"])
    await expect(c.page.locator(".bot strong")).to_have_text("42")
    await expect(c.page.get_by_role("button", name="Approve")).to_have_count(1)
    await c.page.get_by_role("button", name="Approve").click()
    await expect(c.page.get_by_text("Saved after the reload.")).to_be_visible()
    assert "Q3 revenue" in report(c)
    # Reloaded once more, the finished conversation reads the same, with no buttons.
    await c.page.reload()
    await expect(c.page.get_by_text("Saved after the reload.")).to_have_count(1)
    await expect(c.page.get_by_role("button", name="Approve")).to_have_count(0)
    await expect(c.bubbles("user")).to_have_count(2)


async def test_a_question_s_choices_are_buttons_that_continue_the_task(chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply.call("ask_user", {"question": "Which week?",
                                                "choices": ["this week", "last week"]}),
                        Reply("Here are last week's numbers."))
    await c.send("sales numbers")
    await expect(c.page.get_by_text("Which week?")).to_be_visible()
    await c.page.reload()  # the open question and its choices come back
    await expect(c.page.get_by_text("Which week?")).to_have_count(1)
    await c.page.get_by_role("button", name="last week").click()
    await expect(c.page.get_by_text("Here are last week's numbers.")).to_be_visible()
    await expect(c.bubbles("user")).to_have_text(["sales numbers", "last week"])
    await expect(c.page.locator("#working")).to_be_hidden()
    await expect(c.page.locator("#send")).to_be_enabled()
    assert c.harness.model.requests[-1][1]["messages"][-1]["content"] == "last week"


async def test_working_until_the_answer_and_stop_ends_the_task(chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply("far too late", delay=30))
    await c.send("a slow question")
    await expect(c.page.locator("#working")).to_be_visible()
    await expect(c.page.locator("#send")).to_be_disabled()
    stop = c.page.get_by_role("button", name="Stop")
    await expect(stop).to_be_visible()
    await c.harness.wait_for(lambda: len(c.harness.model.requests) == 1, timeout=20)
    await stop.click()
    await expect(c.page.locator(".bot.error")).to_have_text("Stopped.")
    await expect(c.page.locator("#working")).to_be_hidden()
    await expect(stop).to_be_hidden()
    await expect(c.page.locator("#send")).to_be_enabled()
    assert await c.page.get_by_text("far too late").count() == 0


async def test_enter_sends_and_shift_enter_adds_a_line(chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply("two lines received"))
    box = c.page.get_by_label("Message")
    await box.type("line one")
    await box.press("Shift+Enter")
    await box.type("line two")
    assert await c.bubbles("user").count() == 0  # Shift+Enter did not send
    await box.press("Enter")
    await expect(c.bubbles("user")).to_have_text(["line one\nline two"])
    await expect(c.page.get_by_text("two lines received")).to_be_visible()
    assert c.harness.model.requests[0][1]["messages"][-1]["content"] == "line one\nline two"
    assert await box.input_value() == ""


async def test_a_failed_task_reads_as_an_error_and_the_page_has_an_icon(chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Failure(500), Failure(500), Failure(500))
    await c.send("anything")
    await expect(c.page.locator(".bot.error")).to_have_count(1, timeout=EXPECT_MS)
    icon = await c.page.evaluate("document.querySelector('link[rel=icon]').href")
    response = await c.page.request.get(icon)
    assert response.ok and response.headers["content-type"].startswith("image/svg+xml")
    legacy = await c.page.request.get(c.url + "favicon.ico")
    assert legacy.ok and legacy.headers["content-type"].startswith("image/svg+xml")


async def test_on_a_narrow_screen_the_buttons_and_the_placeholder_fit(chat: Any) -> None:
    c: Chat = await chat(width=390, height=844)
    for i in range(6):  # a conversation long enough to scroll
        c.harness.model.add(Reply(f"answer {i}\n\n" + "a longer line of text " * 12))
        await c.send(f"question {i}")
        await expect(c.page.get_by_text(f"answer {i}")).to_be_visible()
    c.harness.model.add(SAVE, Reply("Saved."))
    await c.send("save the Q3 report")
    for name in ("Approve", "Reject"):
        button = c.page.get_by_role("button", name=name)
        await expect(button).to_be_in_viewport(ratio=1.0)
    fits = await c.page.evaluate("""() => {
        const box = document.querySelector('#text'), style = getComputedStyle(box);
        const ctx = document.createElement('canvas').getContext('2d');
        ctx.font = style.font;
        const room = box.clientWidth - parseFloat(style.paddingLeft)
            - parseFloat(style.paddingRight);
        return ctx.measureText(box.placeholder).width <= room;
    }""")
    assert fits
    width = await c.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways ({width}px)"


async def test_a_streamed_answer_replaces_its_draft_once_even_across_a_reload(
        chat: Any) -> None:
    """The answer shows as it is written (a draft), and the final answer takes the draft's
    place exactly once: on the page that watched it, and on one reloaded mid-answer, whose
    draft is rebuilt from the task's events and then replaced."""
    c: Chat = await chat(llm_stream=True)
    words = " ".join(f"word{i}" for i in range(60))
    c.harness.model.add(Reply(f"**Streamed:** {words}.", pace=0.05),
                        Reply(f"Second: {words}.", pace=0.05))
    await c.send("write slowly")
    draft = c.page.locator("#log .msg.bot.draft")
    await expect(draft).to_have_count(1)
    await expect(draft).to_contain_text("word1")
    await expect(c.bubbles("bot").filter(has_text="word59")).to_have_count(1)
    await expect(draft).to_have_count(0)
    await expect(c.bubbles("bot").filter(has_text="Streamed:").locator("strong")).to_have_count(1)

    await c.send("and again")
    await expect(draft).to_contain_text("word2")
    await c.page.reload()  # in the middle of the second answer
    await expect(c.bubbles("bot").filter(has_text="Second:")).to_have_count(1)
    await expect(c.bubbles("bot").filter(has_text="word59")).to_have_count(2)
    await expect(draft).to_have_count(0)
    assert await c.bubbles("bot").filter(has_text="Streamed:").count() == 1
    await c.page.reload()  # both finished: each shown once, nothing drafted
    await expect(c.bubbles("bot").filter(has_text="word59")).to_have_count(2)
    assert await draft.count() == 0
    assert c.errors == []


async def test_with_api_keys_the_page_asks_for_one_and_speaks_as_its_principal(
        chat: Any) -> None:
    key = "browser-key-0123456789abcdef"
    c: Chat = await chat(hermes_api_keys=[{"key": key, "user": "dana", "role": "user"}])
    c.harness.model.add(Reply("Hello, Dana."))
    asked: list[str] = []

    async def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        await dialog.accept(key)

    c.page.on("dialog", answer)
    await c.send("hi")
    await expect(c.bubbles("bot").last).to_have_text("Hello, Dana.")
    assert asked and "HERMES_API_KEYS" in asked[0]
    # After a reload the page knows whose conversations to show (GET /agent/whoami).
    await c.page.reload()
    await expect(c.bubbles("user").first).to_have_text("hi")
    await expect(c.bubbles("bot").last).to_have_text("Hello, Dana.")
    assert len(asked) == 1, "the key is remembered"
    assert c.errors == []

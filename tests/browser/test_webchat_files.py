"""Files in the web chat, in headless Chromium: attached with the 📎 button, dropped on the
page or pasted (a screenshot from the clipboard), shown as chips and thumbnails (blob:
URLs the page's CSP allows), sent with the message: the model is given the document's text
and the image; after a reload the history shows them again; a file past a limit is refused
naming it, in the page or by the gateway; on a 390-pixel screen everything fits."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from playwright.async_api import expect

from agent_core.models.replay import Reply
from tests.integration import fixture_files as files

from .conftest import Chat

pytestmark = pytest.mark.timeout(180)

PDF = files.pdf(["The term is 24 months"])


def upload(name: str, data: bytes, mime: str) -> dict[str, Any]:
    return {"name": name, "mimeType": mime, "buffer": data}


def user_content(chat: Chat, request: int = -1) -> Any:
    messages = chat.harness.model.requests[request][1]["messages"]
    return [m for m in messages if m["role"] == "user"][-1]["content"]


def text_of(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return str(content)


def images_in(content: Any) -> int:
    return sum(1 for p in content if p.get("type") == "image_url") \
        if isinstance(content, list) else 0


async def data_transfer(chat: Chat, *named: tuple[str, str, bytes]) -> Any:
    """A DataTransfer in the page holding these files (name, type, bytes)."""
    return await chat.page.evaluate_handle("""(items) => {
        const dt = new DataTransfer();
        for (const [name, type, b64] of items) {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            dt.items.add(new File([bytes], name, {type: type}));
        }
        return dt;
    }""", [[n, t, base64.b64encode(d).decode()] for n, t, d in named])


async def thumbnail_loaded(locator: Any) -> bool:
    """Whether an image shows: a blob: URL the page made, decoded to real pixels."""
    return bool(await locator.evaluate(
        "(img) => img.src.startsWith('blob:') && img.complete && img.naturalWidth > 0"))


async def test_a_document_attached_with_the_button_reaches_the_model(chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply("It runs for **24 months**."))
    await c.page.set_input_files("#files", files=[upload("contract.pdf", PDF,
                                                         "application/pdf")])
    await expect(c.page.locator("#tray .chip")).to_contain_text("contract.pdf")
    await c.send("how long is the contract?")
    question = c.bubbles("user").last
    await expect(question).to_contain_text("how long is the contract?")
    await expect(question.locator(".chip")).to_contain_text("contract.pdf")
    await expect(c.bubbles("bot").last.locator("strong")).to_have_text("24 months")
    await expect(c.page.locator("#tray")).to_be_hidden()
    sent = text_of(user_content(c))
    assert "how long is the contract?" in sent and "The term is 24 months" in sent
    assert "[Attachment: contract.pdf (application/pdf" in sent
    assert c.errors == []


async def test_an_image_dropped_on_the_page_is_a_thumbnail_the_model_sees_and_the_history_keeps(
        chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply("A red rectangle, and your notes."))
    dropped = await data_transfer(c, ("screen.png", "image/png", files.png(300, 200)),
                                  ("notes.txt", "text/plain", b"remember the milk"))
    await c.page.dispatch_event("#log", "dragover", {"dataTransfer": dropped})
    await expect(c.page.locator("body.dropping")).to_have_count(1)
    await c.page.dispatch_event("#log", "drop", {"dataTransfer": dropped})
    await expect(c.page.locator("body.dropping")).to_have_count(0)
    await expect(c.page.locator("#tray .chip")).to_have_count(2)
    assert await thumbnail_loaded(c.page.locator("#tray img.thumb"))
    await c.send("what is this?")
    await expect(c.page.get_by_text("A red rectangle, and your notes.")).to_be_visible()
    shown = c.bubbles("user").last.locator("img.thumb")
    assert await thumbnail_loaded(shown)
    content = user_content(c)
    assert images_in(content) == 1
    assert "remember the milk" in text_of(content)
    # After a reload the message shows its files again: the image read back from the
    # conversation's files, the document as a chip.
    await c.page.reload()
    again = c.bubbles("user").last
    await expect(again).to_contain_text("what is this?")
    await expect(again.locator("img.thumb")).to_have_count(1)
    await expect(again.locator(".chip", has_text="notes.txt")).to_have_count(1)
    await c.page.wait_for_function(
        "() => { const img = document.querySelector('.user img.thumb');"
        " return img && img.complete && img.naturalWidth > 0; }")
    assert await thumbnail_loaded(again.locator("img.thumb"))
    assert c.errors == []


async def test_a_pasted_screenshot_goes_without_any_text(chat: Any) -> None:
    c: Chat = await chat()
    c.harness.model.add(Reply("That is a blue square."))
    await c.page.evaluate("""(b64) => {
        const bytes = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], "image.png", {type: "image/png"}));
        const box = document.getElementById("text");
        box.focus();
        box.dispatchEvent(new ClipboardEvent("paste", {clipboardData: dt, bubbles: true,
                                                       cancelable: true}));
    }""", base64.b64encode(files.png(64, 64, (20, 20, 200))).decode())
    await expect(c.page.locator("#tray img.thumb")).to_have_count(1)
    assert await c.page.get_by_label("Message").input_value() == ""
    await c.page.get_by_label("Message").press("Enter")
    await expect(c.page.get_by_text("That is a blue square.")).to_be_visible()
    assert images_in(user_content(c)) == 1
    assert await c.bubbles("user").last.inner_text() == ""  # only the thumbnail
    assert c.errors == []


async def test_files_past_a_limit_are_refused_naming_it(chat: Any) -> None:
    c: Chat = await chat(hermes_max_file_mb=0.01, hermes_max_files_per_message=2,
                         hermes_max_files_mb_per_task=0.015)
    note = c.page.locator("#filenote")
    await c.page.set_input_files("#files", files=[upload("big.bin", bytes(20_000),
                                                         "application/octet-stream")])
    await expect(note).to_contain_text("big.bin was not added")
    await expect(note).to_contain_text("HERMES_MAX_FILE_MB")
    await expect(c.page.locator("#tray")).to_be_hidden()
    small = [upload(f"part-{i}.txt", b"x" * 8000, "text/plain") for i in range(3)]
    await c.page.set_input_files("#files", files=small)
    await expect(note).to_contain_text("part-2.txt was not added")
    await expect(note).to_contain_text("HERMES_MAX_FILES_PER_MESSAGE")
    await expect(c.page.locator("#tray .chip")).to_have_count(2)
    # Two files of 8 KB pass the page's checks; together they pass the gateway's limit of
    # a message's files, which refuses them, naming it: they wait in the tray again.
    await c.send("both of these")
    await expect(c.page.locator(".bot.error")).to_contain_text("HERMES_MAX_FILES_MB_PER_TASK")
    await expect(c.page.locator("#tray .chip")).to_have_count(2)
    await c.page.get_by_role("button", name="Remove part-1.txt").click()
    c.harness.model.add(Reply("Got one part."))
    await c.send("just this one")
    await expect(c.page.get_by_text("Got one part.")).to_be_visible()
    assert "part-0.txt" in text_of(user_content(c)) and "part-1.txt" not in \
        text_of(user_content(c))
    assert c.harness.model.requests and len(c.harness.model.requests) == 1
    # The one console line is Chromium's own note of the 413 answer.
    assert all("413" in e for e in c.errors), c.errors


async def test_what_the_gateway_says_of_a_received_file_is_shown(chat: Any) -> None:
    c: Chat = await chat(hermes_max_files_mb_per_day=0.001)  # about 1 KB a day
    c.harness.model.add(Reply("I could not read it."))
    await c.page.set_input_files("#files", files=[upload("log.txt", b"y" * 5000,
                                                         "text/plain")])
    await c.send("read the log")
    refused = c.page.locator(".steps .error", has_text="log.txt was not read")
    await expect(refused).to_contain_text("HERMES_MAX_FILES_MB_PER_DAY")
    await expect(c.page.get_by_text("I could not read it.")).to_be_visible()
    await c.page.reload()  # the history marks the file as not read
    await expect(c.bubbles("user").last.locator(".chip.refused")).to_contain_text("not read")
    assert c.errors == []


async def test_on_a_narrow_screen_attached_files_fit(chat: Any) -> None:
    c: Chat = await chat(width=390, height=844)
    long_name = "quarterly-report-for-the-northern-region-" + "x" * 60 + ".pdf"
    await c.page.set_input_files("#files", files=[
        upload(long_name, PDF, "application/pdf"),
        upload("photo.png", files.png(1200, 900), "image/png")])
    await expect(c.page.locator("#tray .chip")).to_have_count(2)
    for name in ("Attach files", "Send"):
        await expect(c.page.get_by_role("button", name=name)).to_be_in_viewport(ratio=1.0)
    c.harness.model.add(Reply("Both read."))
    await c.send("read these")
    await expect(c.page.get_by_text("Both read.")).to_be_visible()
    width = await c.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways ({width}px)"
    bubble = await c.bubbles("user").last.bounding_box()
    assert bubble is not None and bubble["x"] + bubble["width"] <= 390
    assert c.errors == []

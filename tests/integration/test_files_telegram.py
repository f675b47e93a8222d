"""Files sent to the Telegram bot: a document, a photo in its largest size, a voice note
(transcribed: the transcript is the person's message, echoed back as "heard: ..."), and
what a missing transcription endpoint or a dropped download gets."""

from __future__ import annotations

import itertools
import time
from typing import Any

from agent_core.models.replay import ReplayModelServer, Reply
from tests.integration import fixture_files as files
from tests.integration.conftest import GatewayFactory, Harness
from tests.integration.test_telegram import ANN, PRIVATE, post, sent

_ids = itertools.count(50_000)


def with_file(**media: Any) -> dict[str, Any]:
    body = {"message_id": next(_ids), "date": int(time.time()), "chat": PRIVATE,
            "from": ANN, **media}
    return {"update_id": next(_ids), "message": body}


def user_content(h: Harness, request: int = 0) -> Any:
    return [m for m in h.model.requests[request][1]["messages"] if m["role"] == "user"][-1][
        "content"]


def texts(h: Harness) -> list[str]:
    return [str(c.get("text", "")) for c in sent(h)]


async def test_a_document_reaches_the_model_as_its_text(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.add(Reply("It asks for a refund."))
    file_id = h.telegram.host_file(files.docx(["Dear team,", "Please refund order 1187."]),
                                   path="documents/file_7.docx")
    response = await post(h, with_file(caption="what does this letter ask?", document={
        "file_id": file_id, "file_unique_id": "u1", "file_name": "letter.docx",
        "mime_type": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "file_size": 9000}))
    assert response.status == 200
    await h.wait_for(lambda: "It asks for a refund." in texts(h))
    content = user_content(h)
    assert "what does this letter ask?" in content and "Please refund order 1187." in content
    assert h.telegram.downloads == ["documents/file_7.docx"]


async def test_a_photo_is_fetched_in_its_largest_size_and_shown_to_the_model(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.add(Reply("A green square."))
    small = h.telegram.host_file(files.png(90, 90, (0, 200, 0)), path="photos/s.jpg")
    large = h.telegram.host_file(files.png(800, 800, (0, 200, 0)), path="photos/l.jpg")
    await post(h, with_file(photo=[
        {"file_id": small, "file_unique_id": "s", "width": 90, "height": 90,
         "file_size": 900},
        {"file_id": large, "file_unique_id": "l", "width": 800, "height": 800,
         "file_size": 9000}]))
    await h.wait_for(lambda: "A green square." in texts(h))
    assert h.telegram.downloads == ["photos/l.jpg"]
    content = user_content(h)
    assert isinstance(content, list)
    assert any(p["type"] == "image_url" and p["image_url"]["url"].startswith(
        "data:image/jpeg;base64,") for p in content)


async def test_a_voice_note_is_transcribed_and_is_the_persons_message(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.transcripts.append("remind me to call the bank tomorrow")
    h.model.add(Reply("I will remind you."))
    file_id = h.telegram.host_file(files.ogg_voice(), path="voice/file_3.oga")
    await post(h, with_file(voice={"file_id": file_id, "file_unique_id": "v", "duration": 2,
                                   "mime_type": "audio/ogg", "file_size": 200}))
    await h.wait_for(lambda: "I will remind you." in texts(h))
    assert "heard: remind me to call the bank tomorrow" in texts(h)[0]
    content = user_content(h)
    assert content.startswith("remind me to call the bank tomorrow")
    [asked] = h.model.transcriptions
    assert asked["model"] == "whisper-1" and asked["content_type"] == "audio/ogg"


async def test_without_a_transcription_endpoint_the_person_is_told_how_to_enable_it(
        make_gateway: GatewayFactory, model_server: ReplayModelServer) -> None:
    # A chat-only server: it has no /audio/transcriptions (404).
    h = await make_gateway(telegram=True, stt_base_url=f"{model_server.root}/chat-only")
    assert h.telegram is not None
    h.model.add(Reply("I could not hear it."))
    file_id = h.telegram.host_file(files.wav(), path="audio/a.wav")
    await post(h, with_file(audio={"file_id": file_id, "file_unique_id": "a", "duration": 1,
                                   "mime_type": "audio/wav", "file_size": 3000}))
    await h.wait_for(lambda: "I could not hear it." in texts(h))
    assert "STT_BASE_URL" in texts(h)[0]
    assert "could not be transcribed" in user_content(h)


async def test_a_dropped_telegram_download_is_a_clear_note(make_gateway: GatewayFactory
                                                           ) -> None:
    h = await make_gateway(telegram=True)
    assert h.telegram is not None
    h.model.add(Reply("Send it again?"))
    data = files.pdf(["z" * 60] * 50)
    file_id = h.telegram.host_file(data, path="documents/d.pdf", drop_after=100)
    await post(h, with_file(caption="read", document={
        "file_id": file_id, "file_unique_id": "d", "file_name": "d.pdf",
        "mime_type": "application/pdf", "file_size": len(data)}))
    await h.wait_for(lambda: "Send it again?" in texts(h))
    assert "d.pdf could not be fetched" in texts(h)[0]

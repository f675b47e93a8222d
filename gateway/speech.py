"""Voice notes and audio, transcribed through an OpenAI-compatible
``/audio/transcriptions`` endpoint (STT_BASE_URL, STT_MODEL_NAME, STT_API_KEY; by default
the model's own endpoint when it speaks the OpenAI API, and whisper-1)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: What a person is told when their voice note cannot be heard for want of an endpoint.
HOW_TO_ENABLE = ("Voice notes need a speech-to-text endpoint: set STT_BASE_URL to an "
                 "OpenAI-compatible /audio/transcriptions service (and STT_API_KEY, "
                 "STT_MODEL_NAME if it needs them).")


class TranscriptionError(Exception):
    """The audio could not be transcribed; the message says why (for the person);
    ``unavailable``: there is no transcription endpoint to ask."""

    def __init__(self, reason: str, *, unavailable: bool = False) -> None:
        super().__init__(reason)
        self.unavailable = unavailable


@dataclass(frozen=True, slots=True)
class Transcriber:
    """One transcription endpoint."""

    base_url: str | None
    model: str = "whisper-1"
    api_key: str | None = None
    timeout: float = 120.0

    async def transcribe(self, path: Path, mime_type: str) -> str:
        """The text spoken in the audio file at ``path``."""
        if not self.base_url:
            raise TranscriptionError(HOW_TO_ENABLE, unavailable=True)
        import httpx  # only when a voice note comes: a gateway need not load it


        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                with path.open("rb") as audio:
                    response = await client.post(
                        f"{self.base_url}/audio/transcriptions", headers=headers,
                        data={"model": self.model, "response_format": "json"},
                        files={"file": (path.name, audio, mime_type)})
        except httpx.HTTPError as exc:
            raise TranscriptionError(f"the transcription service could not be reached "
                                     f"({type(exc).__name__})") from None
        if response.status_code in (404, 405):
            raise TranscriptionError(HOW_TO_ENABLE, unavailable=True)
        if response.status_code != 200:
            log.info("transcription failed: HTTP %d", response.status_code)
            raise TranscriptionError(f"the transcription service answered HTTP "
                                     f"{response.status_code}")
        try:
            text = response.json().get("text")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise TranscriptionError("the transcription service gave no text")
        return text.strip()

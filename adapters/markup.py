"""Text for chat platforms: splitting under length limits, Markdown to Slack mrkdwn and to
Telegram HTML."""

from __future__ import annotations

import html
import re

_FENCE = "```"


def split_text(text: str, limit: int) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters on safe boundaries.

    Prefers paragraph breaks, then line breaks, then spaces; never cuts inside a word when
    a space is near. A code fence cut across chunks is closed and reopened, so each chunk
    renders on its own.
    """
    if limit < 20:
        raise ValueError("limit too small to split safely")
    chunks: list[str] = []
    rest = text.strip()
    reopen = ""
    while rest:
        budget = limit - len(reopen) - (len(_FENCE) + 1)
        if len(reopen) + len(rest) <= limit:
            chunks.append(reopen + rest)
            break
        window = rest[:budget]
        cut = _best_cut(window)
        piece, rest = window[:cut].rstrip(), rest[cut:].lstrip("\n")
        if not piece:
            piece, rest = window, rest[len(window):]
        body = reopen + piece
        if body.count(_FENCE) % 2 == 1:  # we are inside a code block: close it here
            lang = _open_fence_lang(body)
            chunks.append(body + "\n" + _FENCE)
            reopen = f"{_FENCE}{lang}\n"
        else:
            chunks.append(body)
            reopen = ""
    return [c for c in chunks if c.strip()]


def _best_cut(window: str) -> int:
    for sep in ("\n\n", "\n", ". ", "。", " "):
        at = window.rfind(sep)
        if at >= len(window) // 2:
            return at + len(sep)
    return len(window)


def _open_fence_lang(body: str) -> str:
    last = body.rfind(_FENCE)
    match = re.match(r"```([\w+-]*)", body[last:])
    return match.group(1) if match else ""


# --- Slack mrkdwn -------------------------------------------------------------------------

_CODE_SPLIT = re.compile(r"(```.*?```|`[^`\n]+`)", re.DOTALL)


def to_mrkdwn(markdown: str) -> str:
    """Markdown as Slack mrkdwn: bold, italics, strike, links, headings, bullets; code kept
    verbatim; &, < and > escaped as Slack requires."""
    parts = _CODE_SPLIT.split(markdown)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1:
            out.append(slack_escape(part))
            continue
        text = slack_escape(part)
        text = re.sub(r"\[([^\]]+)\]\((https?://[^)\s]+)\)", r"<\2|\1>", text)
        text = re.sub(r"^#{1,6}\s+(.+)$", r"*\1*", text, flags=re.MULTILINE)
        text = re.sub(r"\*\*(.+?)\*\*|__(.+?)__",
                      lambda m: f"\x00B{m.group(1) or m.group(2)}\x00B", text)
        text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"_\1_", text)
        text = text.replace("\x00B", "*")
        text = re.sub(r"~~(.+?)~~", r"~\1~", text)
        text = re.sub(r"^(\s*)[-*+]\s+", r"\1• ", text, flags=re.MULTILINE)
        out.append(text)
    return "".join(out)


def slack_escape(text: str) -> str:
    """&, < and > as the entities Slack requires: nothing in the text is read as a mention
    (``<!channel>``), a user or a link (``<https://x|click>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- Telegram HTML ------------------------------------------------------------------------


def to_telegram_html(markdown: str) -> str:
    """Markdown as Telegram's HTML parse mode; everything else is escaped."""
    parts = _CODE_SPLIT.split(markdown)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1:
            if part.startswith(_FENCE):
                body = re.sub(r"^```[\w+-]*\n?", "", part)[:-3]
                out.append(f"<pre>{html.escape(body, quote=False)}</pre>")
            else:
                out.append(f"<code>{html.escape(part[1:-1], quote=False)}</code>")
            continue
        text = html.escape(part, quote=False)
        text = re.sub(r"\[([^\]]+)\]\((https?://[^)\s]+)\)",
                      lambda m: f'<a href="{html.escape(m.group(2))}">{m.group(1)}</a>', text)
        text = re.sub(r"^#{1,6}\s+(.+)$", r"<b>\1</b>", text, flags=re.MULTILINE)
        text = re.sub(r"\*\*(.+?)\*\*|__(.+?)__",
                      lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
        text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", text)
        text = re.sub(r"~~(.+?)~~", r"<s>\1</s>", text)
        text = re.sub(r"^(\s*)[-*+]\s+", r"\1• ", text, flags=re.MULTILINE)
        out.append(text)
    return "".join(out)

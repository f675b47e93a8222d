"""The contract between the channels and the gateway, and the Channel interface.

An adapter is a converter plus a thin handler: it turns platform events into
``InboundMessage`` (and button presses into one ``Interaction``), hands them to the gateway
through ``Ingest`` (and ``Interact``), and renders what comes back (``Routed``,
``InteractionReply``, ``OutboundMessage``). Routing, dedupe, access policy, locking and
every decision on a press happen once, in the gateway, for every channel. An adapter says
only what the platform's delivery identity of a message is (``platform_message_id``).
"""

from __future__ import annotations

import abc
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from agent_core import new_id

ChannelName = Literal["slack", "telegram", "webhook", "webchat", "api", "schedule"]
OutboundKind = Literal["answer", "question", "approval", "notice", "error"]
RouteStatus = Literal["queued", "steered", "duplicate", "refused", "ignored", "command",
                      "edited"]
#: How the gateway fetches a file that came with a message: from the channel's platform
#: (``Channel.download``), a URL under the SSRF guard (an A2A file part), or the bytes the
#: API received, kept in the store until the worker takes them.
AttachmentSource = Literal["slack", "telegram", "url", "stash"]
#: What the platform says a file is (a voice note, a photo); the content decides the rest.
AttachmentHint = Literal["file", "image", "voice", "audio", "video_note"]


class Attachment(BaseModel):
    """A file that came with a message, as its platform describes it: nothing is fetched
    before the message is acknowledged; the worker fetches it under the limits. Name, type
    and size are claims, checked (the name made safe, the type sniffed) once fetched."""

    source: AttachmentSource
    #: Where it is: Slack's url_private_download, Telegram's file_id, the URL, the stash id.
    ref: str = Field(repr=False)
    name: str = ""
    mime_type: str = ""
    size: int | None = None
    hint: AttachmentHint = "file"


class InboundMessage(BaseModel):
    """A message from any channel, normalised."""

    channel: ChannelName
    conversation_id: str
    user_id: str
    user_name: str = ""
    text: str
    is_direct: bool = False
    mentions_bot: bool = False
    #: The platform's identity of this delivery, unique within the channel: the router
    #: handles a second message with the same identity as a duplicate (a platform's retry,
    #: or one message delivered as two events). Slack: ``team:channel:ts``; Telegram:
    #: ``bot:update_id``; webhooks: ``source:idempotency key`` (or signature); the API: its
    #: Idempotency-Key. None: every delivery is new.
    platform_message_id: str | None
    #: Where replies go, in the channel's own terms (channel + thread, chat + topic, URL).
    reply_target: dict[str, Any] = Field(default_factory=dict)
    received_at: float = Field(default_factory=time.time)
    #: Group or workspace the message came from, for allowlists (team id, chat id).
    space_id: str = ""
    #: Channel within the space (Slack channel id), for allowlists.
    room_id: str = ""
    #: The sender's role when its credential proved one (an API key's); None: HERMES_ROLES
    #: decides from the identity. Set by the gateway's API only, never from a platform.
    role: str | None = None
    #: The API key's principal that sent this for ``user_id`` (its act_as), for the audit.
    principal: str = ""
    #: The message's own identity, where it is not the delivery's (Telegram's: chat and
    #: message id; its deliveries are updates); what an edit of it names.
    message_key: str | None = None
    #: An edit of a message sent before: that message's identity (``message_key``, else
    #: ``platform_message_id``); the text is the edited one (Slack ``message_changed``,
    #: Telegram ``edited_message``).
    edit_of: str | None = None
    #: Files that came with the message (fetched by the worker, not before the ack).
    attachments: list[Attachment] = Field(default_factory=list)
    id: str = Field(default_factory=new_id)

    def reply(self, text: str, kind: OutboundKind = "answer", **fields: Any
              ) -> OutboundMessage:
        """A message back to where this one came from (same channel, conversation and
        thread)."""
        return OutboundMessage(channel=self.channel, conversation_id=self.conversation_id,
                               reply_target=self.reply_target, text=text, kind=kind,
                               **fields)


class OutboundMessage(BaseModel):
    """Something to post back into a conversation."""

    channel: ChannelName
    conversation_id: str
    reply_target: dict[str, Any] = Field(default_factory=dict)
    text: str
    kind: OutboundKind = "answer"
    task_id: str = ""
    #: Buttons to offer (ask_user choices).
    choices: list[str] = Field(default_factory=list)
    #: For kind == "approval": the approval id and what is asked.
    approval: dict[str, Any] | None = None
    #: Where this reply was already posted (the ref ``send`` returned then): a reply sent
    #: again after a restart edits that message, so the person never sees it twice.
    replaces: dict[str, Any] | None = None
    #: For a notice about an edited message: the edit's id, which its button runs anew.
    rerun: str | None = None

    def edits(self, key: str) -> dict[str, Any] | None:
        """The ref of the message this reply edits in place, when it does: sent before, and
        plain text (buttons, of a question or an approval, are posted anew). ``key`` is
        what the channel's refs must hold (Slack's ``ts``, Telegram's ``message_id``)."""
        ref = self.replaces
        if ref and ref.get(key) and not self.choices and self.kind != "approval" \
                and self.rerun is None:
            return ref
        return None


@dataclass(frozen=True, slots=True)
class Routed:
    """What the gateway did with an inbound message."""

    status: RouteStatus
    #: The task that will answer it (queued, steered into a running task).
    task_id: str | None = None
    #: Why it was refused or ignored, or which command it was.
    reason: str = ""
    #: The reply already sent (commands, refusals).
    reply: str = ""
    #: Its task was started by a worker of the process that queued it.
    started_here: bool = False


class Ingest(Protocol):
    """What an adapter calls with each message it accepted from its platform; returns once
    the message is durably queued (or answered), so the platform can be acknowledged."""

    async def __call__(self, message: InboundMessage, /) -> Routed: ...


#: approval: Approve / Reject; choice: an offered answer; feedback: 👍 / 👎 under an answer
#: (``approved``: 👍); rerun: run an edited message as a new one (``target``: the edit).
InteractionKind = Literal["approval", "choice", "feedback", "rerun", "unknown"]


@dataclass(frozen=True, slots=True)
class Interaction:
    """A button press, normalised: an approval decided, or an offered answer chosen."""

    kind: InteractionKind
    channel: ChannelName
    #: Who pressed: the platform's user id, and how to name them in a chat.
    user_id: str
    user_name: str
    #: The approval's id, the asking task's id, the answer's delivery id, the edit's id.
    target: str = ""
    #: For an approval: Approve (True) or Reject.
    approved: bool = False
    #: For a choice: the index of the answer among those offered (None: not a number).
    choice: int | None = None
    #: The conversation the pressed message is in, named as the channel's inbound
    #: messages name it ("": unknown, the message is gone): a press counts only in the
    #: conversation its approval or question belongs to.
    conversation_id: str = ""
    #: Where the press happened, as a reply target (None: the message is gone).
    reply_target: dict[str, Any] | None = None
    space_id: str = ""
    room_id: str = ""
    is_direct: bool = False
    #: The message with the buttons (to replace it), and its text.
    prompt: dict[str, Any] | None = None
    prompt_text: str = ""


@dataclass(frozen=True, slots=True)
class FileToShow:
    """A file a tool produced for the person (kept in the task's sandbox)."""

    name: str
    mime_type: str
    data: bytes = field(repr=False)

    @property
    def is_image(self) -> bool:
        """A raster image every platform shows inline (SVG is not: it can carry script)."""
        return self.mime_type in ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True, slots=True)
class InteractionReply:
    """What the channel shows after a press."""

    #: Told to the person who pressed.
    text: str
    #: The press changed nothing (not allowed, already decided, no longer open): shown as
    #: a refusal (a Telegram alert, a Slack message only they see).
    refused: bool = False
    #: For a choice: the answer chosen, which the question's message shows in place of its
    #: buttons (each channel renders it in its markup, escaped).
    chosen: str | None = None


class Interact(Protocol):
    """What an adapter calls with each button press; the gateway decides."""

    async def __call__(self, press: Interaction, /) -> InteractionReply: ...


class Channel(abc.ABC):
    """A chat platform, web surface or API: receives messages and delivers replies."""

    name: ChannelName

    @abc.abstractmethod
    async def send(self, message: OutboundMessage) -> dict[str, Any] | None:
        """Deliver a reply; returns where it was posted (to update it later), if anywhere.

        Raises DeliveryError on failure.
        """

    async def direct_target(self, user_id: str) -> dict[str, Any]:
        """Where to reach one user privately (a DM), as a reply target."""
        raise NotImplementedError

    async def working(self, target: dict[str, Any], task_id: str) -> None:
        """Show that a task started (a reaction, a "working" message, typing)."""
        raise NotImplementedError

    async def progress(self, target: dict[str, Any], task_id: str, line: str) -> None:
        """Update the progress display with one line about the latest step."""
        raise NotImplementedError

    async def done(self, target: dict[str, Any], task_id: str) -> None:
        """The task ended: clear progress displays."""
        raise NotImplementedError

    async def attach(self, target: dict[str, Any], task_id: str, file: FileToShow) -> None:
        """Show a file a tool made for the person (an MCP tool's image), where the platform
        can show one; channels that cannot raise NotImplementedError."""
        raise NotImplementedError

    def download(self, attachment: Attachment) -> AsyncIterator[bytes]:
        """The bytes of a file that came with a message from this platform, in chunks (the
        caller stops reading at its limit); channels without files raise
        NotImplementedError. Raises DownloadError when the platform fails."""
        raise NotImplementedError

    async def show_decision(self, ref: dict[str, Any], message: OutboundMessage) -> None:
        """Replace the approval prompt posted at ``ref`` (what ``send`` returned) with
        ``message``: the same approval, decided (``approval["decision"]``), without
        buttons. Channels that post no prompt raise NotImplementedError."""
        raise NotImplementedError

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect (webhook registration, polling, sockets)."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Disconnect."""

"""Errors of the channels and of the gateway service around them.

They live here, in the lower of the two packages, because both raise them: adapters fail
to deliver, the gateway stops. The tree continues agent_core's (one root, three families)::

    HermesError                      (agent_core.errors)
    ├── ConfigError                  a setting or usage mistake: fail fast, say what to change
    ├── RuntimeFailure
    │   ├── DeliveryError            a reply could not be sent (retryable, retry_after,
    │   │                            applied: whether the platform may have done it anyway)
    │   └── DownloadError            a file that came with a message could not be fetched
    └── Signal                       not an error: control flow
        └── GatewayStopping          the gateway has begun to stop (/readyz answers 503)

A request the gateway refuses is not an exception here: the router answers with a
``Routed`` status, and the HTTP layer turns client mistakes into 4xx answers itself.
"""

from __future__ import annotations

from typing import Literal

from agent_core import RuntimeFailure, Signal

#: Whether a failed request may have been carried out all the same: "no" (refused, rate
#: limited, never sent) or "maybe" (sent, and the answer was lost: the connection closed,
#: a timeout, a server error after the request arrived).
Applied = Literal["no", "maybe"]


class DeliveryError(RuntimeFailure):
    """Sending failed. ``retryable`` outages are retried with backoff; others are not.
    ``applied="maybe"``: the platform may have done it; repeating a step that is not
    idempotent could show it twice, so the gateway looks for it first (or says so)."""

    user_message = "I could not deliver my answer."

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None,
                 applied: Applied = "no", code: str = "") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.applied: Applied = applied
        #: The platform's own name for the error, when it gave one (``message_not_found``).
        self.code = code


class GatewayStopping(Signal):
    """The gateway has begun to stop: it takes no more work (what /readyz reports then)."""


class DownloadError(RuntimeFailure):
    """A file that came with a message could not be fetched (its platform failed, refused,
    or the connection dropped); ``reason`` is a sentence for the person."""

    user_message = "I could not fetch a file you sent."

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

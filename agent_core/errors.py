"""Errors of the agent runtime.

One root, three families kept apart::

    HermesError
    ├── ConfigError                  a setting or usage mistake: fail fast, say what to change
    │   └── ToolDefinitionError      a tool's signature or schema cannot be turned into a tool
    ├── RuntimeFailure               something failed while running; structured fields
    │   ├── ModelError               the model could not give an answer
    │   │   ├── ModelAuthError           401/403: the key is wrong or lacks access
    │   │   ├── ModelUnreachableError    connection refused, DNS, TLS
    │   │   ├── ModelTimeoutError        no answer in time (after retries)
    │   │   ├── ModelHTTPError           an error the provider answered (status_code, body,
    │   │   │   │                        retry_after, retryable), over HTTP or inside a 200
    │   │   │   │                        stream (in_stream: the status its type stands for)
    │   │   │   ├── ModelRateLimitError      a rate limit, after the backoff budget
    │   │   │   ├── ModelQuotaError          out of credit / quota (not retried)
    │   │   │   └── ModelModeratedError      the provider's moderation declined the input
    │   │   │                                (OpenRouter's 403 "flagged"): the person is
    │   │   │                                told, as for a content filter
    │   │   ├── ContextLengthError       the prompt is longer than the model accepts
    │   │   ├── ModelResponseError       a 2xx whose body is not what the API promises
    │   │   └── ModelPausedError         the provider kept pausing the turn (pause_turn)
    │   ├── ModelOutputCutOff        a tool call cut at the output limit, even a raised one
    │   ├── AgentLoopLimitError      AGENT_MAX_ROUND reached without an answer
    │   ├── AgentDeadlineError       the overall task deadline passed
    │   ├── TooManyInvalidDecisions  K consecutive unusable model outputs
    │   ├── BudgetExceeded           a model call would exceed a budget (HERMES_BUDGETS)
    │   ├── ToolError                a tool failed on purpose, with a message for the model
    │   ├── StoreUnavailableError    the Redis-protocol store cannot be reached
    │   └── AddressRefused           a URL that leads inside the network (the SSRF guard)
    └── Signal                       not an error: control flow the loop understands
        ├── ApprovalRequired         a tool call waits for a human decision
        └── TaskInterrupted          a newer message asked the running task to stop

Every message quotes identifiers with ``!r`` and never contains a secret.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .budget.base import Overrun


class HermesError(Exception):
    """Root of every error raised by hermes-gateway."""


# --- configuration and usage ---------------------------------------------------------------


class ConfigError(HermesError):
    """A setting or an API is used wrongly; the message says what to change."""


class ToolDefinitionError(ConfigError):
    """A function cannot be registered as a tool (bad signature, bad schema)."""


# --- runtime failures ----------------------------------------------------------------------


class RuntimeFailure(HermesError):
    """Something failed while running; subclasses carry structured fields."""

    #: A sentence a chat user can read; never contains a traceback or a secret.
    user_message: str = "Something went wrong while working on this."

    def __init__(self, message: str, *, user_message: str | None = None) -> None:
        super().__init__(message)
        if user_message is not None:
            self.user_message = user_message


class ModelError(RuntimeFailure):
    """The model could not give an answer."""

    #: Whether a fallback model should be tried after this error.
    fallback_worthy: bool = True
    user_message = "The language model is not answering right now; please try again shortly."


class ModelAuthError(ModelError):
    """The provider refused the credentials (401/403)."""

    def __init__(self, provider: str, status_code: int, *,
                 key_setting: str = "LLM_API_KEY") -> None:
        super().__init__(
            f"{provider!r} refused the API key (HTTP {status_code}): check {key_setting}",
            user_message=f"The model provider refused the API key; an operator should check "
            f"{key_setting}.",
        )
        self.provider = provider
        self.status_code = status_code


class ModelUnreachableError(ModelError):
    """The model endpoint could not be connected to."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach the model at {url!r}: {reason}")
        self.url = url
        self.reason = reason


class ModelTimeoutError(ModelError):
    """The model did not answer in time, retries included."""

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(f"the model at {url!r} did not answer within {timeout:g}s")
        self.url = url
        self.timeout = timeout


class ModelHTTPError(ModelError):
    """The model endpoint answered with an error: an HTTP status, or an error event inside
    a 200 stream (``in_stream``; ``status_code`` is then the status its type stands for,
    e.g. 529 for Anthropic's overloaded_error)."""

    def __init__(
        self,
        status_code: int,
        body: str,
        *,
        url: str = "",
        retry_after: float | None = None,
        message: str | None = None,
        retryable: bool | None = None,
        in_stream: bool = False,
    ) -> None:
        super().__init__(message or f"model endpoint {url!r} answered HTTP {status_code}: "
                         f"{body[:300]}")
        self.status_code = status_code
        self.body = body
        self.url = url
        self.retry_after = retry_after
        #: Whether the same call may succeed when sent again (a server error, a timeout).
        self.retryable = (status_code >= 500 or status_code == 408) if retryable is None \
            else retryable
        self.in_stream = in_stream


class ModelRateLimitError(ModelHTTPError):
    """A rate limit (429, or a rate-limit error in a stream), through the backoff budget."""

    def __init__(self, status_code: int, body: str, **kw: Any) -> None:
        kw.setdefault("retryable", True)
        super().__init__(status_code, body, **kw)


class ModelQuotaError(ModelHTTPError):
    """The account is out of credit or over its quota: waiting does not help."""

    user_message = ("The model provider reports the account is out of credit or quota; "
                    "an operator should check the provider account.")

    def __init__(self, status_code: int, body: str, **kw: Any) -> None:
        kw["retryable"] = False
        super().__init__(status_code, body, **kw)


class ModelModeratedError(ModelHTTPError):
    """A moderation layer in front of the model declined the request (OpenRouter answers
    403 with ``metadata.reasons`` / ``flagged_input``): not the key's fault, and sending the
    same input again meets the same filter. Another model may not sit behind one."""

    def __init__(self, status_code: int, body: str, **kw: Any) -> None:
        kw["retryable"] = False
        super().__init__(status_code, body, **kw)


class ContextLengthError(ModelError):
    """The prompt exceeds the model's context window."""

    fallback_worthy = False


class ModelResponseError(ModelError):
    """A successful HTTP response whose body does not follow the provider's format."""


class ModelPausedError(ModelError):
    """The provider paused the turn (Anthropic's pause_turn: its server tools' loop hit its
    limit) and was still paused after the adapter sent it back ``times`` times."""

    user_message = "The model paused its answer and did not finish it; please try again."

    def __init__(self, provider: str, times: int) -> None:
        super().__init__(f"{provider!r} still paused its turn after {times} continuations")
        self.provider = provider
        self.times = times


class ModelOutputCutOff(RuntimeFailure):
    """The model's output was cut at its token limit in the middle of a tool call, and again
    when asked with a raised limit (or the limit could not be raised)."""

    def __init__(self, max_tokens: int, tools: list[str]) -> None:
        named = ", ".join(repr(t) for t in tools) or "a tool call"
        super().__init__(
            f"the model's output was cut at {max_tokens} tokens inside {named}",
            user_message="The model's reply was cut off at its output limit in the middle "
            "of a tool call, so nothing was run. Try a smaller request, or ask an operator to "
            "raise LLM_MAX_TOKENS.")
        self.max_tokens = max_tokens
        self.tools = tools


class AgentLoopLimitError(RuntimeFailure):
    """The task used all its rounds without reaching an answer."""

    def __init__(self, max_rounds: int) -> None:
        super().__init__(
            f"no final answer after {max_rounds} rounds (AGENT_MAX_ROUND={max_rounds})",
            user_message=f"I stopped after {max_rounds} steps without finishing. "
            "Try a narrower request, or ask an operator to raise AGENT_MAX_ROUND.",
        )
        self.max_rounds = max_rounds


class AgentDeadlineError(RuntimeFailure):
    """The task's overall deadline passed."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"task deadline of {seconds:g}s passed",
            user_message=f"I ran out of time ({seconds:g}s) before finishing this task.",
        )
        self.seconds = seconds


class TooManyInvalidDecisions(RuntimeFailure):
    """The model produced K unusable outputs in a row."""

    def __init__(self, count: int, last_reason: str) -> None:
        super().__init__(
            f"{count} consecutive invalid decisions; last: {last_reason}",
            user_message="The model kept giving answers I could not understand, so I stopped. "
            "Please rephrase the request or try again.",
        )
        self.count = count
        self.last_reason = last_reason


class BudgetExceeded(RuntimeFailure):
    """A model call would take a budget past its limit: the call is not made and the task
    ends (its work so far kept). ``overrun`` says which budget, its ``limit``, what is
    ``used`` and when it ``resets_at``; ``user_message`` says it to the person."""

    def __init__(self, overrun: Overrun, *, user_message: str) -> None:
        o = overrun
        super().__init__(
            f"budget {o.rule!r} ({o.scope} {o.subject!r}, per {o.window}) would be exceeded: "
            f"{o.used:g} used + {o.reserved:g} reserved + {o.wanted:g} wanted > "
            f"{o.limit:g} {o.unit}", user_message=user_message)
        self.overrun = overrun

    @property
    def limit(self) -> float:
        """The budget's limit, in its ``overrun.unit``."""
        return self.overrun.limit

    @property
    def used(self) -> float:
        """What was used of it in this window."""
        return self.overrun.used

    @property
    def resets_at(self) -> float:
        """When its window ends (Unix seconds)."""
        return self.overrun.resets_at


class ToolError(RuntimeFailure):
    """Raised by a tool to fail with a clean message (no traceback reaches the model).

    ``retryable=True`` marks a transient failure the executor may retry automatically.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class StoreUnavailableError(RuntimeFailure):
    """The conversation store cannot be reached."""

    user_message = "My memory store is unreachable right now; please try again in a moment."


# --- signals -------------------------------------------------------------------------------


class AddressRefused(RuntimeFailure):
    """A URL the SSRF guard will not let anything connect to (``agent_core.ssrf``); the
    message says why, naming the host."""

    user_message = "That address is not reachable from here."


class Signal(HermesError):
    """Control flow the loop understands; never shown to a user as a failure."""


class ApprovalRequired(Signal):
    """A tool call must wait for a human decision before it runs."""

    def __init__(self, tool_name: str, arguments: dict[str, Any], reason: str) -> None:
        super().__init__(f"tool {tool_name!r} needs approval: {reason}")
        self.tool_name = tool_name
        self.arguments = arguments
        self.reason = reason


class TaskInterrupted(Signal):
    """The running task was asked to stop at the next tool boundary."""

"""What a deployment lets its people spend on the model, and what the loop asks before and
after each model call.

A ``BudgetRule`` (HERMES_BUDGETS) caps the tokens and/or the US dollars of one ``scope``
(each user, each conversation, each channel, each schedule, each hub agent, or everyone)
per ``window`` (hour, day, month, in HERMES_TIMEZONE). The loop describes each model call
as a ``Charge`` and calls a ``Budget``: ``reserve`` before the call (its worst case: the
prompt as counted plus max_tokens; ``BudgetExceeded`` when a budget would be exceeded) and
``settle`` after it (to the usage the provider reported). Tools and channels know nothing
of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..models.base import Usage

Scope = Literal["user", "conversation", "channel", "schedule", "agent", "global"]
Period = Literal["hour", "day", "month"]
Unit = Literal["tokens", "usd"]
SCOPES: tuple[Scope, ...] = ("user", "conversation", "channel", "schedule", "agent", "global")
_MATCHED = ("user", "conversation", "channel", "role", "schedule", "agent")
#: A rule's id: part of its counters' keys, so kept short and plain.
RULE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"


class BudgetMatch(BaseModel):
    """Which calls a rule applies to: each field given is a list of ``*`` patterns, one of
    which the call's value must match (all fields given must hold)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    user: tuple[str, ...] = ()
    conversation: tuple[str, ...] = ()
    channel: tuple[str, ...] = ()
    role: tuple[str, ...] = ()
    schedule: tuple[str, ...] = ()
    agent: tuple[str, ...] = ()
    _any: bool = PrivateAttr(False)

    def model_post_init(self, context: Any, /) -> None:
        self._any = any(getattr(self, name) for name in _MATCHED)

    @field_validator(*_MATCHED, mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    def allows(self, charge: Charge) -> bool:
        """Whether the call is one this rule counts."""
        if not self._any:
            return True
        for name in _MATCHED:
            patterns: tuple[str, ...] = getattr(self, name)
            if not patterns:
                continue
            value = charge.role if name == "role" else charge.subject(name)
            if value is None or not any(fnmatchcase(value, p) for p in patterns):
                return False
        return True


class BudgetRule(BaseModel):
    """One budget: at most ``tokens`` and/or ``usd`` per ``window``, for each subject of
    ``scope`` (each user, ...; ``global``: everyone together)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    scope: Scope
    window: Period
    tokens: int | None = Field(None, ge=0)
    usd: float | None = Field(None, ge=0)
    match: BudgetMatch = Field(default_factory=BudgetMatch)
    #: Roles this budget does not count (their calls are not charged to it).
    exempt_roles: tuple[str, ...] = ()
    #: Share of a limit at which the conversation is warned, once per window; None: never.
    warn_at: float | None = Field(0.8, gt=0, le=1)
    #: Names the rule's counters; by default derived from scope, window and match, so a
    #: changed limit keeps counting what was already spent.
    id: str | None = Field(None, pattern=RULE_ID)
    _key: str = PrivateAttr("")

    @model_validator(mode="after")
    def _a_limit(self) -> BudgetRule:
        if self.tokens is None and self.usd is None:
            raise ValueError("a budget needs tokens, usd or both")
        return self

    def model_post_init(self, context: Any, /) -> None:
        what = json.dumps([self.scope, self.window, self.match.model_dump()], sort_keys=True)
        self._key = self.id or \
            f"{self.scope[0]}{self.window[0]}-{hashlib.sha256(what.encode()).hexdigest()[:10]}"

    @property
    def key(self) -> str:
        """The id of this rule's counters."""
        return self._key

    def applies(self, charge: Charge) -> bool:
        """Whether ``charge`` is counted by this rule."""
        return (charge.subject(self.scope) is not None
                and charge.role not in self.exempt_roles and self.match.allows(charge))

    def limit(self, unit: Unit) -> float | None:
        """The limit in ``unit`` (None: none)."""
        return self.tokens if unit == "tokens" else self.usd


class ModelPrice(BaseModel):
    """US dollars per million tokens of one model (HERMES_MODEL_PRICES)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    #: Input tokens the provider served from its prompt cache; None: the input price.
    cached_input_per_mtok: float | None = Field(None, ge=0)


@dataclass(frozen=True, slots=True)
class Charge:
    """One model call as a budget sees it: for whom, on which model, and its worst case."""

    task_id: str
    user_id: str
    conversation_id: str
    role: str
    model: str
    #: The prompt's tokens as counted before the call.
    prompt_tokens: int
    max_tokens: int
    channel: str | None = None
    #: The scheduled job the task runs for; the hub agent that runs it.
    schedule: str | None = None
    agent: str | None = None
    #: Whether the task made model calls before this one (a refusal then stops it).
    started: bool = False
    #: The task's own fields (``TaskState.extra``): where its conversation is, for notices.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """The worst case in tokens: the prompt and the longest answer."""
        return self.prompt_tokens + self.max_tokens

    def subject(self, scope: Scope | str) -> str | None:
        """Whom the call counts against in ``scope`` (None: the scope does not apply)."""
        match scope:
            case "user":
                return self.user_id or None
            case "conversation":
                return self.conversation_id or None
            case "channel":
                return self.channel or None
            case "schedule":
                return self.schedule or None
            case "agent":
                return self.agent or None
            case "global":
                return "all"
        return None


@dataclass(slots=True)
class Hold:
    """A reservation of a call's worst case, until it is settled (a Budget's own subclass
    says against what)."""

    charge: Charge
    id: str


class Overrun(BaseModel):
    """The budget that refused a call: its limit, what was used and reserved, what the call
    wanted, and when the window resets."""

    model_config = ConfigDict(defer_build=True)

    rule: str
    scope: Scope
    subject: str
    window: Period
    unit: Unit
    limit: float
    used: float
    #: Held by other calls under way.
    reserved: float
    wanted: float
    resets_at: float
    timezone: str = "UTC"


class BudgetUse(BaseModel):
    """One budget's standing in its current window (``/usage``, GET /agent/usage)."""

    model_config = ConfigDict(defer_build=True)

    rule: str
    scope: Scope
    subject: str
    window: Period
    tokens: int | None = None
    usd: float | None = None
    used_tokens: int = 0
    used_usd: float = 0.0
    #: Held by calls under way (their worst case until they settle).
    reserved_tokens: int = 0
    reserved_usd: float = 0.0
    resets_at: float = 0.0
    timezone: str = "UTC"
    exempt: bool = False


class Budget(Protocol):
    """What the loop calls around each model call (``agent_core.budget.StoreBudget``
    implements it on the store)."""

    async def reserve(self, charge: Charge) -> Hold:
        """Hold the call's worst case against every budget that applies, at once; raises
        BudgetExceeded (nothing held) when one would be exceeded."""
        ...

    async def settle(self, hold: Hold, usage: Usage | None, *, model: str = "") -> None:
        """Replace the hold by what the call used (None: it failed; nothing is charged)."""
        ...


class BudgetListener(Protocol):
    """Hears what a Budget decides (the gateway: metrics, the audit log, notices). Called
    inline: each method returns at once, scheduling any I/O of its own."""

    def refused(self, charge: Charge, overrun: Overrun) -> None:
        """A call was refused."""
        ...

    def spent(self, charge: Charge, usage: Usage, usd: float | None,
              scopes: tuple[Scope, ...]) -> None:
        """A call was settled: its usage, its cost (None: the model has no price) and the
        scopes of the budgets it was charged to."""
        ...

    def warned(self, charge: Charge, use: BudgetUse) -> None:
        """A budget passed its warning share in this window, for the first time (``charge``:
        the call that took it there)."""
        ...

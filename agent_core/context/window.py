"""ContextWindow: which messages stay in front of the model, within a token budget.

Rules, in the order they act when the window is over its message count or token budget:

1. Never evicted: the system prompt and pinned plan (not stored in the window at all), the
   user's original instruction for the running task, that task's tool errors, and everything
   from the second-to-last assistant turn on (the last 2 rounds).
2. Old tool observations go first: their text moves to the archive and a one-line stub stays,
   so every tool call keeps its result and the provider's call/result pairing stays valid.
3. Then whole units leave, oldest first: a user message, an answer, or an assistant tool-call
   turn together with its results.
4. If protected messages alone are still over budget, the largest is cut to its head and tail
   (its full text is archived).

Everything that leaves is archived, never deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..messages import Message
from .tokens import MESSAGE_OVERHEAD, TokenCounter

STUB_PREFIX = "[archived:"
_MIN_TRUNCATED_TOKENS = 48


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """Limits of the window."""

    max_messages: int = 20
    budget_tokens: int = 24_000
    keep_last_rounds: int = 2
    warn_ratio: float = 0.8


@dataclass(slots=True)
class Eviction:
    """The result of fitting a window: what stays and what goes to the archive."""

    keep: list[Message]
    archive: list[Message] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether anything was evicted, stubbed or cut."""
        return bool(self.archive)


def is_stub(message: Message) -> bool:
    """Whether a message is a stub left behind by eviction."""
    return message.content.startswith(STUB_PREFIX)


def protected_ids(messages: list[Message], *, task_id: str | None,
                  keep_last_rounds: int) -> set[str]:
    """Ids of messages that rule 1 keeps."""
    keep: set[str] = set()
    assistant_at = [i for i, m in enumerate(messages) if m.role == "assistant"]
    if keep_last_rounds > 0 and assistant_at:
        start = assistant_at[-keep_last_rounds] if len(assistant_at) >= keep_last_rounds \
            else assistant_at[0]
        keep.update(m.id for m in messages[start:])
    for m in messages:
        if task_id is not None and m.task_id == task_id and m.kind in ("instruction", "error"):
            keep.add(m.id)
    return keep


def _units(messages: list[Message]) -> list[list[int]]:
    """Indices grouped so that a tool-call turn and its results stay or go together."""
    units: list[list[int]] = []
    open_calls: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        if m.role == "tool" and m.tool_call_id in open_calls:
            open_calls[m.tool_call_id].append(i)
            continue
        unit = [i]
        units.append(unit)
        if m.role == "assistant":
            open_calls = {c.id: unit for c in m.tool_calls}
    return units


def fit(messages: list[Message], policy: WindowPolicy, counter: TokenCounter, *,
        task_id: str | None) -> Eviction:
    """Apply the rules until the window is within ``policy``; pure, no I/O."""
    msgs = list(messages)
    protected = protected_ids(msgs, task_id=task_id, keep_last_rounds=policy.keep_last_rounds)
    archive: list[Message] = []
    archived_ids: set[str] = set()
    tokens = sum(m.tokens for m in msgs)

    def to_archive(m: Message) -> None:
        # A stub or a cut message is never archived: its original already was.
        if m.id not in archived_ids and not is_stub(m):
            archived_ids.add(m.id)
            archive.append(m)

    def over_tokens() -> bool:
        return tokens > policy.budget_tokens

    # Rule 2: stub old observations (only helps the token budget).
    if over_tokens():
        for i, m in enumerate(msgs):
            if not over_tokens():
                break
            if m.kind != "observation" or m.id in protected or is_stub(m):
                continue
            stub_text = (f"{STUB_PREFIX} output of {m.name or 'a tool'} from round {m.round}, "
                         f"{m.tokens} tokens; use the recall tool to search it]")
            stub = replace(m, content=stub_text,
                           tokens=MESSAGE_OVERHEAD + counter.count(stub_text))
            if stub.tokens >= m.tokens:
                continue
            to_archive(m)
            tokens -= m.tokens - stub.tokens
            msgs[i] = stub

    # Rule 3: drop whole unprotected units, oldest first.
    removed: set[int] = set()
    count = len(msgs)
    for unit in _units(msgs):
        if count <= policy.max_messages and not over_tokens():
            break
        if any(msgs[i].id in protected for i in unit):
            continue
        for i in unit:
            removed.add(i)
            tokens -= msgs[i].tokens
            to_archive(msgs[i])
        count -= len(unit)
    msgs = [m for i, m in enumerate(msgs) if i not in removed]

    # Rule 4: cut the largest protected messages to head and tail.
    while over_tokens():
        largest = max(range(len(msgs)), key=lambda i: msgs[i].tokens, default=None)
        if largest is None or msgs[largest].tokens <= _MIN_TRUNCATED_TOKENS:
            break
        m = msgs[largest]
        target = max(_MIN_TRUNCATED_TOKENS, m.tokens - (tokens - policy.budget_tokens))
        # A message with files is cut as the text the model reads of it (its images go).
        cut = _head_tail(m.text, target, counter)
        new = replace(m, content=cut, parts=[], tokens=MESSAGE_OVERHEAD + counter.count(cut))
        if new.tokens >= m.tokens:
            break
        to_archive(m)
        tokens -= m.tokens - new.tokens
        msgs[largest] = new

    return Eviction(keep=msgs, archive=archive)


def _head_tail(text: str, target_tokens: int, counter: TokenCounter) -> str:
    """Keep the start and end of ``text`` within about ``target_tokens``."""
    marker = "\n[... middle archived; use the recall tool to search it ...]\n"
    budget = max(8, target_tokens - MESSAGE_OVERHEAD - counter.count(marker))
    chars = len(text)
    ratio = chars / max(1, counter.count(text))
    keep_chars = int(budget * ratio * 0.9)
    head = text[: keep_chars * 2 // 3]
    tail = text[chars - keep_chars // 3:] if keep_chars // 3 else ""
    return head + marker + tail

"""Every Redis key hermes-gateway uses, built in one place from a configurable prefix.

Two layouts, the same keys: ``Keys(prefix)`` for one Redis (a single node, or a primary
found through Sentinel), ``Keys(prefix, shards=N)`` for a Redis Cluster (``slots.py``).

- One node: conversation keys carry the conversation id as a hash tag (``{...}``); the
  global indexes are one key each (``hermes:q:pending``).
- Cluster: every key a step of the queue or the store changes together lives in one slot:
  a conversation's keys, its tasks' keys (a task id minted by ``new_task_id`` names its
  conversation's shard), its dedupe markers and its shard of each global index (the
  conversations with queued work, the wake list, the start counts, the conversations by
  activity) carry the tag of the conversation's shard (``hermes:q:{h3}{slack:T1:C9}:items``,
  ``hermes:q:pending:{h3}``); readers of an index read every shard (``pendings()``).
  Approvals, schedules, budgets and the console's keys have one slot each (their steps
  touch several of their own keys; their rate is a few per task at most); the audit
  stream, dead letters, leader leases, rate counters and live replies are single keys
  written alone, so any slot does.

Conversation ids are validated (``CONVERSATION_ID``) so they never contain glob or hash-tag
characters.

``Keys(prefix)`` builds the store's own keys (conversations, tasks) and, through its
sections, those of the gateway's parts: ``.queue`` (the work queue), ``.approvals``,
``.schedules``, ``.budgets`` (one Cluster slot for all: see ``BudgetKeys``), ``.console``
(what the operator's console reads), ``.a2a`` (the A2A edge's tasks), plus the dedupe
markers, rate-limit counters, dead letters, audit stream and leader leases. No other module
writes a key's name but ``section_keys.py``, the sections of one slot each that would make
this module too long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from ..errors import ConfigError
from ..ids import new_id
from .section_keys import A2AKeys, ConsoleKeys
from .slots import ONE_NODE, Layout, mint_task_id, shard_of, task_shard

#: Ids look like ``slack:T1:C9:1712.33``, ``telegram:-100123:42``, ``webhook:crm:ticket-7``.
CONVERSATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._@+=/-]{0,199}$")
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,63}$")


def check_conversation_id(conversation_id: str) -> str:
    """The id itself, or ValueError saying what a conversation id may contain."""
    if not CONVERSATION_ID.match(conversation_id):
        raise ValueError(
            f"conversation id {conversation_id[:80]!r} is invalid: use 1-200 letters, digits "
            "and : . _ @ + = / - (starting with a letter or digit)")
    return conversation_id


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The work queue's keys: per conversation a FIFO list, a lease, steered messages and
    control flags; globally (one per shard on a cluster) the conversations with work, the
    wake list and start counts."""

    prefix: str
    layout: Layout = ONE_NODE

    def queue(self, cid: str) -> str:
        """LIST of a conversation's work items (JSON), head first."""
        return f"{self.prefix}:q:{self.layout.conv(cid)}:items"

    def lock(self, cid: str) -> str:
        """STRING: the lease token of the worker holding the conversation."""
        return f"{self.prefix}:q:{self.layout.conv(cid)}:lock"

    def steer(self, cid: str) -> str:
        """LIST of messages steered into the running task (HERMES_BUSY_MODE=steer)."""
        return f"{self.prefix}:q:{self.layout.conv(cid)}:steer"

    def control(self, cid: str) -> str:
        """HASH flag -> task id (or *): interrupt / stop the running task."""
        return f"{self.prefix}:q:{self.layout.conv(cid)}:ctl"

    def pending(self, cid: str) -> str:
        """ZSET: conversation id -> when it first had queued work (the conversation's
        shard's)."""
        return self.layout.index(f"{self.prefix}:q:pending", cid)

    def pendings(self) -> list[str]:
        """Every shard's ``pending``."""
        return self.layout.indexes(f"{self.prefix}:q:pending")

    def wake(self, cid: str) -> str:
        """LIST of conversation ids a worker should look at, first in first out (the
        conversation's shard's)."""
        return self.layout.index(f"{self.prefix}:q:wake", cid)

    def wakes(self) -> list[str]:
        """Every shard's ``wake``."""
        return self.layout.indexes(f"{self.prefix}:q:wake")

    def attempts(self, cid: str) -> str:
        """HASH: work item id -> how many times it was started (the conversation's
        shard's)."""
        return self.layout.index(f"{self.prefix}:q:attempts", cid)


@dataclass(frozen=True, slots=True)
class ApprovalKeys:
    """Pending and decided approvals (one slot on a cluster: ``{approvals}``)."""

    prefix: str
    layout: Layout = ONE_NODE

    def approval(self, approval_id: str) -> str:
        """HASH: one approval's fields (status, tool, arguments, who asked, who decided)."""
        return f"{self.prefix}:{self.layout.grouped('approvals')}approval:{approval_id}"

    def expiry(self) -> str:
        """ZSET: pending approval id -> when it expires."""
        return f"{self.prefix}:{self.layout.grouped('approvals')}approvals:expiry"

    def recent(self) -> str:
        """ZSET: approval id -> when it was asked (pending and decided ones, for the
        console's list; trimmed past the task retention)."""
        return f"{self.prefix}:{self.layout.grouped('approvals')}approvals:recent"


@dataclass(frozen=True, slots=True)
class ScheduleKeys:
    """Scheduled jobs (one slot on a cluster: ``{jobs}``)."""

    prefix: str
    layout: Layout = ONE_NODE

    def jobs(self) -> str:
        """HASH: job id -> job (JSON)."""
        return f"{self.prefix}:{self.layout.grouped('jobs')}jobs"

    def due(self) -> str:
        """ZSET: job id -> next fire time."""
        return f"{self.prefix}:{self.layout.grouped('jobs')}jobs:due"

    def claim(self, job_id: str, fire_time: float) -> str:
        """STRING: the marker of one run of one job (SET NX; fired once across replicas)."""
        return f"{self.prefix}:{self.layout.grouped('jobs')}jobs:claim:{job_id}:{int(fire_time)}"


@dataclass(frozen=True, slots=True)
class BudgetKeys:
    """Budget counters and their reservations. Every one carries the same hash tag
    (``{budget}``), so they all live in one Redis Cluster slot: the one script that checks
    a call against all of its budgets (a user's, the channel's, everyone's) may touch them
    together. A budget check is one per model call, so one slot is not a hot spot."""

    prefix: str

    def counter(self, rule: str, window: str, subject: str) -> str:
        """HASH of one budget's window for one subject: t, u (tokens and nano-dollars
        used), rt, ru (reserved by calls under way), w (warned)."""
        return f"{self.prefix}:budget:{{budget}}:c:{rule}:{window}:{subject}"

    def holds(self, rule: str, window: str, subject: str) -> str:
        """ZSET of the reservations on that counter (``hold|tokens|nano``) -> when they
        expire unless their holder renews them (ms, the store's clock)."""
        return f"{self.prefix}:budget:{{budget}}:r:{rule}:{window}:{subject}"


class Keys:
    """Key builder for one deployment's prefix; ``shards``: the store is a Redis Cluster
    with that many shards (None: one Redis)."""

    def __init__(self, prefix: str = "hermes", *, shards: int | None = None) -> None:
        if not _PREFIX.match(prefix):
            raise ConfigError(f"REDIS_PREFIX={prefix!r}: use letters, digits and : . _ -")
        self.prefix = prefix
        self.shards = shards
        self.layout = Layout(shards)

    @classmethod
    def of(cls, client: object, prefix: str) -> Keys:
        """The keys of the store ``client`` talks to: a cluster client says how many
        shards it has (``store_shards``), any other client is one Redis."""
        return cls(prefix, shards=getattr(client, "store_shards", None))

    def layout_marker(self) -> str:
        """STRING: the layout the store's keys were written in (``shards=N``), checked by
        every process that opens it."""
        return f"{self.prefix}:layout"

    def probes(self) -> list[str]:
        """STRING per shard written by the readiness probe (``store.writable``)."""
        return self.layout.indexes(f"{self.prefix}:probe")

    # --- sections of the gateway's parts ---------------------------------------------
    @cached_property
    def queue(self) -> QueueKeys:
        """The work queue's keys."""
        return QueueKeys(self.prefix, self.layout)

    @cached_property
    def approvals(self) -> ApprovalKeys:
        """The approvals' keys."""
        return ApprovalKeys(self.prefix, self.layout)

    @cached_property
    def schedules(self) -> ScheduleKeys:
        """The scheduler's keys."""
        return ScheduleKeys(self.prefix, self.layout)

    @cached_property
    def budgets(self) -> BudgetKeys:
        """The budgets' keys."""
        return BudgetKeys(self.prefix)

    def rate(self, who: str, window: int) -> str:
        """STRING counter of one sender's messages in one rate-limit window."""
        return f"{self.prefix}:rate:{who}:{window}"

    @cached_property
    def a2a(self) -> A2AKeys:
        """The A2A edge's keys."""
        return A2AKeys(self.prefix)

    @cached_property
    def console(self) -> ConsoleKeys:
        """The operator's console's keys."""
        return ConsoleKeys(self.prefix)

    def dedupe(self, key: str, cid: str | None = None) -> str:
        """STRING marker of a delivery already seen (a platform's retry is handled once);
        ``cid``: the conversation it was queued in (on a cluster, the marker is set in
        the same step as the item, so it lives in the conversation's shard; a marker of
        no conversation in its own key's)."""
        if self.shards is None:
            return f"{self.prefix}:dedupe:{key}"
        return f"{self.prefix}:dedupe:{self.layout.of(cid or key)}{key}"

    def dead_letters(self) -> str:
        """LIST of replies that could not be delivered, with the reason."""
        return f"{self.prefix}:deadletter"

    def audit(self) -> str:
        """STREAM of audit entries (write-tool executions, approval decisions)."""
        return f"{self.prefix}:audit"

    def leader(self, job: str) -> str:
        """STRING lease of the replica doing a singleton job (e.g. Telegram polling)."""
        return f"{self.prefix}:leader:{job}"

    # --- conversations ---------------------------------------------------------------
    def conv(self, conversation_id: str, part: str) -> str:
        """A key of one conversation."""
        return f"{self.prefix}:conv:{self.layout.conv(conversation_id)}:{part}"

    def conv_pattern(self, conversation_id: str) -> str:
        """A SCAN pattern for every key of one conversation."""
        return f"{self.prefix}:conv:{self.layout.conv(conversation_id)}:*"

    def window(self, cid: str) -> str:
        """LIST of the window's messages (JSON)."""
        return self.conv(cid, "window")

    def meta(self, cid: str) -> str:
        """HASH: plan, summary, created_at, last_active, window_tokens, archived, terms."""
        return self.conv(cid, "meta")

    def archive(self, cid: str) -> str:
        """HASH: archive sequence number -> archived message (JSON)."""
        return self.conv(cid, "archive")

    def archive_ids(self, cid: str) -> str:
        """HASH: message id -> archive sequence number (archiving is idempotent)."""
        return self.conv(cid, "archive_ids")

    def archive_seq(self, cid: str) -> str:
        """STRING counter allocating archive sequence numbers."""
        return self.conv(cid, "archive_seq")

    def postings(self, cid: str, term: str) -> str:
        """STRING of packed (seq, tf, doclen) postings of one term (APPEND-only)."""
        return self.conv(cid, f"t:{term}")

    def vectors(self, cid: str) -> str:
        """HASH: archive sequence number -> packed unit embedding (with RECALL_EMBEDDINGS)."""
        return self.conv(cid, "vectors")

    def files_day(self, cid: str, day: str) -> str:
        """STRING counter: bytes of files the conversation was sent on ``day`` (UTC
        YYYYMMDD), for HERMES_MAX_FILES_MB_PER_DAY; expires after the day."""
        return self.conv(cid, f"files:{day}")

    def told(self, cid: str, what: str) -> str:
        """STRING marker: the conversation was told ``what`` once (SET NX)."""
        return self.conv(cid, f"told:{what}")

    def upload(self, cid: str, upload_id: str) -> str:
        """STRING: the bytes of a file the API received with a message, kept until the
        worker moves it into the conversation's inbox (expires unclaimed)."""
        return self.conv(cid, f"upload:{upload_id}")

    def conv_tasks(self, cid: str) -> str:
        """SET of task ids of one conversation."""
        return self.conv(cid, "tasks")

    def conversations(self, cid: str) -> str:
        """ZSET: conversation id -> last activity (for idle expiry; the conversation's
        shard's)."""
        return self.layout.index(f"{self.prefix}:conversations", cid)

    def all_conversations(self) -> list[str]:
        """Every shard's ``conversations``."""
        return self.layout.indexes(f"{self.prefix}:conversations")

    # --- tasks -----------------------------------------------------------------------
    def new_task_id(self, cid: str) -> str:
        """A new task id for conversation ``cid`` (also the task's trace id: 32 hex
        digits); on a cluster it names the conversation's shard, so the task's keys live
        in the conversation's slot."""
        if self.shards is None:
            return new_id()
        return mint_task_id(shard_of(cid, self.shards), self.shards)

    def task(self, task_id: str) -> str:
        """STRING: a task's state (JSON)."""
        if self.shards is None:
            return f"{self.prefix}:task:{task_id}"
        return f"{self.prefix}:task:{self.layout.tag(task_shard(task_id, self.shards))}{task_id}"

    def task_prefix(self, cid: str) -> str:
        """What a task id is appended to for the key of a task of conversation ``cid``
        (the queue's scripts build task keys from it)."""
        if self.shards is None:
            return f"{self.prefix}:task:"
        return f"{self.prefix}:task:{self.layout.of(cid)}"

    def delivered(self, task_id: str) -> str:
        """STRING: where a task's reply was posted (JSON), so that a reply sent again
        edits that message instead of posting a second one."""
        return f"{self.task(task_id)}:delivered"

    def task_events(self, task_id: str) -> str:
        """STREAM of a task's events (for SSE replay)."""
        return f"{self.task(task_id)}:events"

    # --- replies shown live (gateway/live.py) ------------------------------------------
    def reply(self, delivery_id: str) -> str:
        """STRING: one reply's state machine (JSON): how it is shown, the live message,
        the parts posted and a post whose outcome is not known yet, so that another
        replica can finish it. ``delivery_id`` is the work item's id."""
        return f"{self.prefix}:reply:{delivery_id}"

    def edit(self, edit_id: str) -> str:
        """STRING: an edited message kept for its "run it" button (InboundMessage JSON)."""
        return f"{self.prefix}:edit:{edit_id}"

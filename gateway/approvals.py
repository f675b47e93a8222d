"""Approvals: a paused tool call, the buttons that decide it, and the resumed task.

A pending approval is a Redis hash (``Keys.approvals``) next to the task's state,
so any replica can resume the task after a restart. Deciding is one atomic step
(pending → approved / rejected / expired, in a Lua script): double clicks, two approvers at
once and replayed callbacks decide once, and everyone else is told who decided. Who may
decide is checked here, on the server, from HERMES_APPROVERS, and fails closed; a button
press counts only from the approval's own conversation, and a signed webhook link only for
the source and requester it was signed for.

The arguments stored with the approval are the ones the tool will run with (validated by
the tool when the task paused); an approver's edit is validated by the tool too and
replaces them in the same atomic step as the decision (the model's proposal is kept beside
them), so what the prompt, the API and the audit show is what runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic_core import to_jsonable_python
from redis.asyncio import Redis

from adapters.base import Channel, InboundMessage, OutboundMessage
from agent_core import TaskResult, ToolRegistry
from agent_core.store import Keys, as_text, store_boundary

from .access import Roles
from .audit import AuditLog
from .router import Router
from .settings import ApproverRule, GatewaySettings

log = logging.getLogger(__name__)

Outcome = Literal["decided", "already", "forbidden", "unknown", "expired", "invalid"]

# KEYS: approval hash, expiry zset   ARGV: new status, by, by_name, now, note, id, edited
# arguments (JSON, '' for none)
_DECIDE = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return {'unknown', '', ''}
end
if status ~= 'pending' then
  return {status, redis.call('HGET', KEYS[1], 'decided_by') or '',
          redis.call('HGET', KEYS[1], 'decided_by_name') or ''}
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'decided_by', ARGV[2],
           'decided_by_name', ARGV[3], 'decided_at', ARGV[4], 'note', ARGV[5])
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'proposed_arguments', redis.call('HGET', KEYS[1], 'arguments'),
             'arguments', ARGV[7])
end
redis.call('ZREM', KEYS[2], ARGV[6])
return {'won', ARGV[2], ARGV[3]}
"""


@dataclass(frozen=True, slots=True)
class Decision:
    """The result of pressing a button."""

    outcome: Outcome
    status: str = ""
    by: str = ""
    by_name: str = ""
    message: str = ""


@store_boundary
class ApprovalService:
    """Opens approvals, decides them exactly once, expires them, updates their messages."""

    def __init__(self, redis: Redis, *, settings: GatewaySettings, channels: dict[str, Channel],
                 router: Router, audit: AuditLog, tools: ToolRegistry | None = None) -> None:
        self.redis = redis
        #: Validates an approver's edited arguments (None: edits are refused).
        self.tools = tools
        self.settings = settings
        self.channels = channels
        self.router = router
        self.audit = audit
        self.roles = Roles.from_settings(settings)
        self.keys = Keys.of(redis, settings.redis_prefix).approvals
        self._decide = redis.register_script(_DECIDE)
        #: Approvals a caller in this process waits to see stored (``until_open``).
        self._opening: dict[str, asyncio.Event] = {}

    # --- opening -------------------------------------------------------------------------
    async def open(self, result: TaskResult, msg: InboundMessage) -> OutboundMessage:
        """Store the pending approval of a paused task; the message asking for it."""
        pending = result.approval
        assert pending is not None
        now = time.time()
        expires = now + self.settings.hermes_approval_ttl
        record: dict[str, str] = {
            "id": pending.id, "status": "pending", "task_id": result.task_id,
            "conversation_id": result.conversation_id, "channel": msg.channel,
            "source": str(msg.reply_target.get("source", "")) if msg.channel == "webhook"
            else "", "inbound": msg.model_dump_json(), "tool": pending.tool_name,
            "arguments": json.dumps(pending.arguments, ensure_ascii=False, default=str),
            "reason": pending.reason, "requester": pending.requester or
            f"{msg.channel}:{msg.user_id}", "requester_name": msg.user_name or msg.user_id,
            "created_at": repr(now), "expires_at": repr(expires),
        }
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.approval(pending.id), mapping=dict(record))  # type: ignore[arg-type]
        pipe.expire(self.keys.approval(pending.id), int(self.settings.task_retention))
        pipe.zadd(self.keys.expiry(), {pending.id: expires})
        pipe.zadd(self.keys.recent(), {pending.id: now})
        pipe.zremrangebyscore(self.keys.recent(), "-inf", now - self.settings.task_retention)
        await pipe.execute()
        if (opened := self._opening.get(pending.id)) is not None:
            opened.set()
        view = self._view(record)
        if msg.channel == "webhook":
            view["approve_url"] = self.signed_url(record, "approve", expires)
            view["reject_url"] = self.signed_url(record, "reject", expires)
        return msg.reply(f"Approval needed to run {pending.tool_name} ({pending.reason}).",
                         "approval", task_id=result.task_id, approval=view)

    def _view(self, record: dict[str, str]) -> dict[str, Any]:
        """What a prompt shows of an approval (``adapters.approvals`` renders it)."""
        base = (self.settings.hermes_public_url or "").rstrip("/")
        return {"id": record["id"], "tool_name": record["tool"],
                "arguments": json.loads(record["arguments"]), "reason": record["reason"],
                "requester": record["requester_name"],
                "expires_at": float(record["expires_at"]),
                "arguments_url": f"{base}/agent/approvals/{record['id']}" if base else ""}

    async def until_open(self, approval_id: str) -> None:
        """Until approval ``approval_id`` is stored, so that whoever is told a task waits
        for it can decide it at once (the task pauses a moment before its approval is
        opened). The caller bounds the wait."""
        opened = self._opening.setdefault(approval_id, asyncio.Event())
        try:
            # Opened by a worker of another process: the store says so, not the event.
            while not await self.redis.exists(self.keys.approval(approval_id)):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await opened.wait()
        finally:
            self._opening.pop(approval_id, None)

    async def remember_message(self, approval_id: str, ref: dict[str, Any] | None) -> None:
        """Keep where the approval prompt was posted, to update it once decided."""
        if not ref:
            return
        await self.redis.hset(self.keys.approval(approval_id), "message_ref", json.dumps(ref))
        # Decided (or expired) before the prompt was even posted: show that at once.
        record = await self.get(approval_id)
        if record is not None and record["status"] != "pending":
            await self._update_message(record, record["status"],
                                       record.get("decided_by", ""),
                                       record.get("decided_by_name", ""))

    async def get(self, approval_id: str) -> dict[str, str] | None:
        """An approval's fields, or None."""
        raw = await self.redis.hgetall(self.keys.approval(approval_id))
        if not raw:
            return None
        return {as_text(k): as_text(v) for k, v in raw.items()}

    async def listing(self, *, limit: int) -> list[dict[str, str]]:
        """The approvals asked lately, newest first (pending and decided)."""
        ids = [as_text(i) for i in await self.redis.zrevrange(self.keys.recent(), 0,
                                                               limit - 1)]
        pipe = self.redis.pipeline(transaction=False)
        for approval_id in ids:
            pipe.hgetall(self.keys.approval(approval_id))
        found, gone = [], []
        for approval_id, raw in zip(ids, await pipe.execute(), strict=True):
            if raw:
                found.append({as_text(k): as_text(v) for k, v in raw.items()})
            else:
                gone.append(approval_id)
        if gone:  # past their retention
            await self.redis.zrem(self.keys.recent(), *gone)
        return found

    # --- deciding ------------------------------------------------------------------------
    async def decide(self, approval_id: str, *, approved: bool, actor: str, actor_name: str,
                     note: str = "", arguments: dict[str, Any] | None = None,
                     actor_role: str | None = None, principal: str = "",
                     place: tuple[str, str] | None = None) -> Decision:
        """Apply one person's decision, exactly once; tells the others what happened.
        ``actor_role``: the role the actor's credential proved (an API key's; None: from
        HERMES_ROLES); ``principal``: the API key that decided for ``actor``, audited;
        ``place``: the channel and conversation a button was pressed in (a press anywhere
        but the approval's own conversation changes nothing); ``arguments``: the approver's
        edit, validated by the tool before anything is decided."""
        record = await self.get(approval_id)
        if record is None:
            return Decision("unknown", message="This approval is no longer known here (it "
                            "was decided long ago or never existed); nothing was changed.")
        if place is not None and place != (record["channel"], record["conversation_id"]):
            return Decision("forbidden", message="This approval belongs to another "
                            "conversation: it can only be decided where it was asked. Nothing "
                            "was changed.")
        if record["status"] != "pending":
            return self._already(record["status"], record.get("decided_by_name", ""))
        if not self.may_decide(record, actor, approved=approved, role=actor_role):
            return Decision("forbidden", message="You can't approve this request: it needs "
                            "someone with permission for this tool. Nothing was changed.")
        edited = self._edited(record["tool"], arguments) if approved and arguments is not None \
            else None
        if isinstance(edited, Decision):
            return edited
        status = "approved" if approved else "rejected"
        won, _, by_name = await self._transition(approval_id, status, actor, actor_name, note,
                                                 edited=edited)
        if won != "won":
            return self._already(won, by_name)
        if edited is not None:
            record = {**record, "proposed_arguments": record["arguments"],
                      "arguments": json.dumps(edited, ensure_ascii=False)}
        await self._after(record, status, actor, actor_name, note=note, arguments=edited,
                          principal=principal)
        verb = "Approved" if approved else "Rejected"
        return Decision("decided", status=status, by=actor, by_name=actor_name,
                        message=f"{verb}. The task continues.")

    def _edited(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any] | Decision:
        """The approver's edited arguments as the tool will run them, or why not."""
        tool = self.tools.get(tool_name) if self.tools is not None else None
        if tool is None:
            return Decision("invalid", message=f"The arguments of {tool_name!r} cannot be "
                            "checked here, so they cannot be edited. Nothing was changed.")
        try:
            return dict(to_jsonable_python(tool.validate(arguments), fallback=str))
        except ValueError as exc:
            return Decision("invalid", message=f"The edited arguments are not valid for "
                            f"{tool_name!r}: {exc}. Nothing was changed.")

    def _already(self, status: str, by_name: str) -> Decision:
        if status == "expired":
            return Decision("expired", status=status,
                            message="This approval expired; the task was told it was "
                                    "rejected.")
        return Decision("already", status=status, by_name=by_name,
                        message=f"Already {status} by {by_name or 'someone else'}.")

    async def _transition(self, approval_id: str, status: str, actor: str, actor_name: str,
                          note: str, *, edited: dict[str, Any] | None = None
                          ) -> tuple[str, str, str]:
        result = await self._decide(
            keys=[self.keys.approval(approval_id), self.keys.expiry()],
            args=[status, actor, actor_name, repr(time.time()), note, approval_id,
                  "" if edited is None else json.dumps(edited, ensure_ascii=False)])
        return tuple(as_text(v) for v in result)  # type: ignore[return-value]

    def may_decide(self, record: dict[str, str], actor: str, *, approved: bool,
                   role: str | None = None) -> bool:
        """Whether ``actor`` (channel:user, in ``role`` when a credential proved one) may
        decide this approval. Fails closed."""
        rules = self.settings.hermes_approvers
        rule = rules.get(record["tool"]) or rules.get("*") or ApproverRule()
        is_requester = actor == record["requester"]
        if is_requester and not approved:
            return True  # asking people may always withdraw their own request
        if is_requester and not rule.self_approval:
            return False
        if rule.requester and is_requester:
            return True
        if (role or self.roles.role_of(actor)) in rule.roles:
            return True
        groups = self.settings.hermes_groups
        return any(fnmatchcase(actor, pattern) for name in rule.groups
                   for pattern in groups.get(name, ()))

    async def _after(self, record: dict[str, str], status: str, actor: str, actor_name: str,
                     *, note: str, arguments: dict[str, Any] | None,
                     principal: str = "") -> None:
        """Audit, resume the task (behind the conversation's other work), update buttons."""
        proposed = record.get("proposed_arguments")
        await self.audit.record({
            "type": "approval", "approval_id": record["id"], "decision": status,
            "tool": record["tool"], "arguments": json.loads(record["arguments"]),
            "proposed_arguments": json.loads(proposed) if proposed else None,
            "requester": record["requester"], "decided_by": actor,
            **({"principal": principal} if principal else {}), "note": note,
            "edited_arguments": arguments, "conversation_id": record["conversation_id"],
            "task_id": record["task_id"], "trace_id": record["task_id"]})
        inbound = InboundMessage.model_validate_json(record["inbound"])
        await self.router.enqueue_approval(inbound, record["task_id"], {
            "approved": status == "approved", "by": actor_name or actor,
            "note": note or ("expired without a decision" if status == "expired" else ""),
            "arguments": arguments})
        await self._update_message(record, status, actor, actor_name)

    async def _update_message(self, record: dict[str, str], status: str, actor: str,
                              actor_name: str) -> None:
        """The prompt becomes the decision: the same approval (with the arguments that run),
        its buttons replaced by who decided."""
        ref = json.loads(record.get("message_ref") or "null")
        channel = self.channels.get(record["channel"])
        if not ref or channel is None:
            return
        view = self._view(record)
        view["decision"] = {"status": status, "by": actor, "by_name": actor_name,
                            "edited": bool(record.get("proposed_arguments"))}
        inbound = InboundMessage.model_validate_json(record["inbound"])
        decided = inbound.reply(f"{status.capitalize()}: {record['tool']}", "approval",
                                task_id=record["task_id"], approval=view)
        try:
            await channel.show_decision(ref, decided)
        except NotImplementedError:
            pass
        except Exception as exc:  # the decision stands even if the message cannot change
            log.warning("could not update the approval message: %s", exc)

    # --- expiry --------------------------------------------------------------------------
    async def expire_due(self) -> int:
        """Expire pending approvals past their time; their tasks resume with a rejection."""
        due = await self.redis.zrangebyscore(self.keys.expiry(), "-inf", time.time(), start=0,
                                             num=100)
        expired = 0
        for raw_id in due:
            approval_id = as_text(raw_id)
            record = await self.get(approval_id)
            if record is None:
                await self.redis.zrem(self.keys.expiry(), approval_id)
                continue
            won, _, _ = await self._transition(approval_id, "expired", "system",
                                               "expiry", "expired")
            if won == "won":
                expired += 1
                await self._after(record, "expired", "system", "expiry", note="expired",
                                  arguments=None)
        return expired

    # --- signed webhook links ------------------------------------------------------------
    def signed_url(self, record: dict[str, str], decision: str, expires: float) -> str:
        """A link that decides the approval, signed with the webhook source's secret and
        bound to the source and the requester it was sent for."""
        source = record["source"]
        exp = str(int(expires))
        sig = approval_signature(self._secret(source), source=source,
                                 requester=record["requester"], approval_id=record["id"],
                                 decision=decision, exp=exp)
        base = (self.settings.hermes_public_url or "").rstrip("/")
        return f"{base}/webhook/{source}/approvals/{record['id']}/{decision}?exp={exp}&sig={sig}"

    def link_matches(self, record: dict[str, str], *, source: str, decision: str, exp: str,
                     sig: str) -> bool:
        """Whether a link signed for ``source`` decides this approval: the approval was asked
        through that source, and the signature covers its id, the decision, the expiry,
        the source and the approval's requester."""
        if record.get("channel") != "webhook" or record.get("source") != source \
                or not self._secret(source):
            return False
        expected = approval_signature(self._secret(source), source=source,
                                      requester=record["requester"], approval_id=record["id"],
                                      decision=decision, exp=exp)
        return hmac.compare_digest(expected, sig)

    def _secret(self, source: str) -> str:
        secret = self.settings.hermes_webhook_secrets.get(source)
        return secret.get_secret_value() if secret is not None else ""


def approval_signature(secret: str, *, source: str, requester: str, approval_id: str,
                       decision: str, exp: str) -> str:
    """HMAC-SHA256 with the source's secret of
    ``"<source>\n<requester>\n<id>\n<decision>\n<expiry>"``."""
    message = "\n".join((source, requester, approval_id, decision, exp)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()

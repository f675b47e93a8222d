"""The work queue's protocol under any interleaving of what workers and the world do.

A hypothesis state machine drives a real WorkQueue (its Lua scripts on the test server)
with two workers and two conversations: messages arrive (some delivered twice, some for a
caller waiting at a worker's process while it has a free worker, which then takes the
conversation if nobody holds it), workers claim, finish, renew and hand back
conversations, leases expire under them, and in steer mode running tasks take the
messages steered to them. After every step the server's state must match a plain model of
the intended protocol: one holder per conversation, items started in arrival order and
each finished exactly once, nothing lost when a lease expires, a holder that lost its lease
changing nothing, `pending` listing exactly the conversations with queued work, a wake for
exactly the work nobody took or holds, no claim of a conversation with nothing queued, in
interrupt mode a flag for the running task when a message arrives behind it, and start
counts as the model counts them.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from adapters.base import InboundMessage
from agent_core.store import as_text, connect
from gateway.queue import Head, WorkItem, WorkQueue
from tests.integration.test_work_queue import Taker

CONVERSATIONS = ("webhook:q:a", "webhook:q:b")
WORKERS = (0, 1)


@dataclass
class Held:
    """What a worker believes about a conversation it claimed."""

    token: str
    #: The item it started (a claim, an ingest or a completion hands over no empty queue).
    head: str


@dataclass
class Model:
    queue: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CONVERSATIONS})
    steer: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CONVERSATIONS})
    holder: dict[str, str | None] = field(default_factory=lambda: dict.fromkeys(CONVERSATIONS))
    started: dict[str, int] = field(default_factory=dict)
    finished: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CONVERSATIONS})
    arrived: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CONVERSATIONS})
    steered_away: set[str] = field(default_factory=set)
    dedupe: set[str] = field(default_factory=set)
    #: The wake list, oldest first.
    woken: list[str] = field(default_factory=list)
    interrupted: set[str] = field(default_factory=set)


class QueueProtocol(RuleBasedStateMachine):
    def __init__(self, url: str, mode: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.mode = mode
        self.redis = self.loop.run_until_complete(self._connect(url))
        self.queue = WorkQueue(self.redis, f"qp{uuid.uuid4().hex[:10]}", lease=30)
        self.model = Model()
        self.held: dict[int, dict[str, Held]] = {w: {} for w in WORKERS}
        self.keys_used: list[str] = []

    @staticmethod
    async def _connect(url: str) -> Any:
        return connect(url)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        async def clean() -> None:
            keys = [k async for k in self.redis.scan_iter(match=f"{self.queue.keys.prefix}:*")]
            if keys:
                await self.redis.unlink(*keys)
            await self.redis.aclose()

        self.run(clean())
        self.loop.close()

    # --- the world -----------------------------------------------------------------------
    @rule(cid=st.sampled_from(CONVERSATIONS), again=st.booleans(),
          at=st.sampled_from((None, *WORKERS)))
    def a_message_arrives(self, cid: str, again: bool, at: int | None) -> None:
        m = self.model
        key = f"d{len(m.dedupe) - 1 if again and m.dedupe else len(m.dedupe)}"
        inbound = InboundMessage(channel="webhook", conversation_id=cid, user_id="q:u",
                                 text="x", platform_message_id=key, reply_target={})
        item = WorkItem(inbound=inbound, task_id=uuid.uuid4().hex)
        taker = Taker()
        self.queue.taker = taker if at is not None else None
        result = self.run(self.queue.ingest(item, dedupe_key=key, mode=self.mode,
                                            start_here=at is not None))
        assert taker.reserved == 0, "a worker was held and neither used nor given back"
        if key in m.dedupe:
            assert result == "duplicate" and taker.adopted.empty()
            return
        m.dedupe.add(key)
        if self.mode == "steer" and m.holder[cid] is not None and m.queue[cid]:
            # A task is running (its item is queued until it finishes): steer into it.
            assert result == "steered" and taker.adopted.empty()
            m.steer[cid].append(item.id)
            return
        taken = m.holder[cid] is None and at is not None
        assert result == ("taken" if taken else "queued")
        m.queue[cid].append(item.id)
        m.arrived[cid].append(item.id)
        if m.holder[cid] is not None:
            # Not woken: its holder takes it next (or, past its lease, any worker from
            # `pending`).
            assert taker.adopted.empty()
            if self.mode == "interrupt":
                m.interrupted.add(cid)
        elif at is None:
            m.woken.append(cid)
        else:
            adopted, claim = taker.adopted.get_nowait()
            assert adopted == cid and taker.adopted.empty()
            m.holder[cid] = claim.token
            self.held[at][cid] = Held(claim.token, self._check_head(cid, claim.head))

    @rule(cid=st.sampled_from(CONVERSATIONS))
    def a_lease_expires(self, cid: str) -> None:
        self.run(self.redis.delete(self.queue.keys.lock(cid)))  # what PX does in time
        self.model.holder[cid] = None

    # --- workers -------------------------------------------------------------------------
    @rule(worker=st.sampled_from(WORKERS), cid=st.sampled_from(CONVERSATIONS))
    def claim(self, worker: int, cid: str) -> None:
        m = self.model
        taken = self.run(self.queue.claim([cid])).get(cid)
        if m.holder[cid] is not None:
            assert taken is None, "a held conversation was claimed again"
            return
        if not m.queue[cid]:
            assert taken is None, "a conversation with nothing queued was taken"
            return
        assert taken is not None
        m.holder[cid] = taken.token
        self.held[worker][cid] = Held(taken.token, self._check_head(cid, taken.head))

    @precondition(lambda self: any(self.held[w] for w in WORKERS))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        worker, cid = self._pick(data)
        held = self.held[worker].pop(cid)
        m = self.model
        left, head = self.run(self.queue.complete(cid, held.token, held.head))
        if m.holder[cid] != held.token:
            assert left == -1, "a holder that lost its lease completed something"
            return
        assert m.queue[cid] and m.queue[cid][0] == held.head
        m.queue[cid].pop(0)
        m.finished[cid].append(held.head)
        m.started.pop(held.head, None)
        m.queue[cid] += m.steer[cid]
        m.arrived[cid] += m.steer[cid]
        m.steer[cid] = []
        assert left == len(m.queue[cid])
        if left == 0:
            m.holder[cid] = None
            assert head is None
        else:
            self.held[worker][cid] = Held(held.token, self._check_head(cid, head))

    @precondition(lambda self: any(self.held[w] for w in WORKERS))
    @rule(data=st.data(), unstarted=st.booleans())
    def hand_back(self, data: st.DataObject, unstarted: bool) -> None:
        worker, cid = self._pick(data)
        held = self.held[worker].pop(cid)
        m = self.model
        unstarted_id = held.head if unstarted else None
        self.run(self.queue.release(cid, held.token, unstarted=unstarted_id))
        if m.holder[cid] != held.token:
            return  # its lease had expired: nothing of its is undone
        m.holder[cid] = None
        m.woken.insert(0, cid)
        if unstarted_id is not None:
            m.started[unstarted_id] -= 1

    @precondition(lambda self: any(self.held[w] for w in WORKERS))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        worker, cid = self._pick(data)
        held = self.held[worker][cid]
        renewed = self.run(self.queue.renew(cid, held.token))
        assert renewed == (self.model.holder[cid] == held.token)

    @precondition(lambda self: self.mode == "steer" and any(self.held[w] for w in WORKERS))
    @rule(data=st.data())
    def the_running_task_takes_its_steering(self, data: st.DataObject) -> None:
        _, cid = self._pick(data)
        taken = self.run(self.queue.take_steering(cid))
        assert [i.id for i in taken] == self.model.steer[cid]
        self.model.steered_away.update(self.model.steer[cid])
        self.model.steer[cid] = []

    # --- checks --------------------------------------------------------------------------
    def _pick(self, data: st.DataObject) -> tuple[int, str]:
        choices = sorted((w, c) for w in WORKERS for c in self.held[w])
        picked: tuple[int, str] = data.draw(st.sampled_from(choices))
        return picked

    def _check_head(self, cid: str, head: Head | None) -> str:
        queued = self.model.queue[cid]
        assert queued, "an empty queue was handed over"
        assert head is not None and head.item.id == queued[0], "not the oldest item"
        self.model.interrupted.discard(cid)  # a new task starts: old flags are cleared
        self.model.started[head.item.id] = self.model.started.get(head.item.id, 0) + 1
        assert head.attempts == self.model.started[head.item.id]
        return head.item.id

    @invariant()
    def the_server_agrees_with_the_model(self) -> None:
        m, keys = self.model, self.queue.keys

        async def read() -> Any:
            pipe = self.redis.pipeline(transaction=False)
            for cid in CONVERSATIONS:
                pipe.lrange(keys.queue(cid), 0, -1)
                pipe.lrange(keys.steer(cid), 0, -1)
                pipe.get(keys.lock(cid))
                pipe.hget(keys.control(cid), "interrupt")
            pipe.lrange(keys.wake(CONVERSATIONS[0]), 0, -1)  # one node: one list
            pipe.zrange(keys.pending(CONVERSATIONS[0]), 0, -1)
            pipe.hgetall(keys.attempts(CONVERSATIONS[0]))
            return await pipe.execute()

        found = self.run(read())
        for n, cid in enumerate(CONVERSATIONS):
            queue, steer, lock, interrupt = found[4 * n:4 * n + 4]
            assert [WorkItem.model_validate_json(r).id for r in queue] == m.queue[cid]
            assert [WorkItem.model_validate_json(r).id for r in steer] == m.steer[cid]
            assert (as_text(lock) if lock else None) == m.holder[cid]
            finished = m.finished[cid]
            assert len(set(finished)) == len(finished), "an item finished twice"
            assert finished == m.arrived[cid][:len(finished)], "finished out of order"
            assert (interrupt is not None) == (cid in m.interrupted)
        assert [as_text(c) for c in found[-3]] == m.woken
        pending = {as_text(c) for c in found[-2]}
        assert pending == {c for c in CONVERSATIONS if m.queue[c]}
        started = {as_text(k): int(v) for k, v in found[-1].items() if int(v)}
        assert started == {k: v for k, v in m.started.items() if v}


def _check(redis_url: str, mode: str) -> None:
    run_state_machine_as_test(
        lambda: QueueProtocol(redis_url, mode),
        settings=settings(max_examples=60, stateful_step_count=40, deadline=None,
                          derandomize=True, suppress_health_check=[HealthCheck.too_slow]))


def test_the_queue_protocol_in_queue_mode(redis_url: str) -> None:
    _check(redis_url, "queue")


def test_the_queue_protocol_in_steer_mode(redis_url: str) -> None:
    _check(redis_url, "steer")


def test_the_queue_protocol_in_interrupt_mode(redis_url: str) -> None:
    _check(redis_url, "interrupt")

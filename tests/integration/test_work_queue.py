"""The work queue's protocol on a real server: what a worker reads with the head item, what
completing an item hands back, what an empty complete must never remove, and what becomes
of a worker held for a conversation taken as its message is queued."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from adapters.base import InboundMessage
from agent_core import StoreUnavailableError
from agent_core.messages import Message
from agent_core.store import RedisConversationStore, connect
from agent_core.store.keys import Keys
from agent_core.task import TaskState
from gateway.queue import Claim, WorkItem, WorkQueue

CID = "webhook:test:c1"


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[WorkQueue]:
    redis = connect(redis_url)
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield WorkQueue(redis, prefix)
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
    if keys:
        await redis.unlink(*keys)
    await redis.aclose()


def message(text: str) -> WorkItem:
    inbound = InboundMessage(channel="webhook", conversation_id=CID, user_id="test:u1",
                             text=text, platform_message_id=uuid.uuid4().hex,
                             reply_target={})
    return WorkItem(inbound=inbound, task_id=uuid.uuid4().hex)


def placeholder(item: WorkItem, status: str = "queued") -> TaskState:
    return TaskState(task_id=item.task_id, trace_id=item.task_id, conversation_id=CID,
                     user_id="test:u1", role="", permissions=[], instruction=item.inbound.text,
                     status=status)  # type: ignore[arg-type]


async def claim(queue: WorkQueue) -> Claim:
    taken = (await queue.claim([CID])).get(CID)
    assert taken is not None
    return taken


async def test_the_head_comes_with_its_task_state_and_the_waiting_task(queue: WorkQueue
                                                                        ) -> None:
    asked = message("an earlier question")
    await queue.redis.set(queue.store_keys.task(asked.task_id),
                          placeholder(asked, "asked_user").model_dump_json())
    await queue.redis.hset(Keys(queue.keys.prefix).meta(CID), "waiting_task", asked.task_id)
    item = message("the reply")
    assert await queue.ingest(item, dedupe_key=None, placeholder=placeholder(item)) == "queued"
    taken = await claim(queue)

    head = taken.head
    assert head is not None
    assert head.item.id == item.id and head.attempts == 1
    assert head.task is not None and head.task.status == "queued"
    assert head.waiting is not None and head.waiting.task_id == asked.task_id
    assert head.waiting.status == "asked_user"
    assert await queue.claim([CID]) == {}, "one holder at a time"


async def test_completing_an_item_hands_over_the_next_one(queue: WorkQueue) -> None:
    first, second = message("one"), message("two")
    for item in (first, second):
        await queue.ingest(item, dedupe_key=None, placeholder=placeholder(item))
    taken = await claim(queue)
    token = taken.token
    assert taken.head is not None and taken.head.item.id == first.id

    left, following = await queue.complete(CID, token, first.id)
    assert left == 1
    assert following is not None and following.item.id == second.id
    assert following.attempts == 1 and following.task is not None
    assert following.waiting is None

    assert await queue.complete(CID, token, second.id) == (0, None)
    assert not await queue.is_busy(CID), "the lock went with the last item"
    assert await queue.claim([CID]) == {}, "nothing queued: nothing to take"
    assert not await queue.is_busy(CID), "and no lock taken to give back"
    third = message("three")
    await queue.ingest(third, dedupe_key=None, placeholder=placeholder(third))
    taken = await claim(queue)
    assert taken.head is not None and taken.head.item.id == third.id, \
        "anyone may take the conversation again"


async def test_a_message_behind_a_running_task_wakes_nobody(queue: WorkQueue) -> None:
    first, second = message("one"), message("two")
    await queue.ingest(first, dedupe_key=None, placeholder=placeholder(first))
    assert await queue.wait_for_work(0.1) == [CID]
    taken = await claim(queue)
    await queue.ingest(second, dedupe_key=None, placeholder=placeholder(second))
    assert await queue.redis.llen(queue.keys.wake(CID)) == 0, "its holder takes it next"
    left, following = await queue.complete(CID, taken.token, first.id)
    assert left == 1 and following is not None and following.item.id == second.id
    assert await queue.complete(CID, taken.token, second.id) == (0, None)
    third = message("three")
    await queue.ingest(third, dedupe_key=None, placeholder=placeholder(third))
    assert await queue.wait_for_work(0.1) == [CID], "a free conversation is woken"


async def test_quiet_waits_for_the_ingests_in_flight_within_its_limit(
        queue: WorkQueue, redis_url: str) -> None:
    await asyncio.wait_for(queue.quiet(30), 5)  # none in flight: at once
    admin = connect(redis_url)  # a connection of its own: pausing holds the queue's
    try:
        # The server holds write commands: the ingest waits for its reply meanwhile.
        await admin.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
        ingesting = asyncio.ensure_future(queue.ingest(message("one"), dedupe_key=None))
        quiet = asyncio.ensure_future(queue.quiet(30))
        done, _ = await asyncio.wait({quiet, ingesting}, timeout=0.3)
        assert not done, "quiet returned while an ingest waited for the store"
        bounded = time.monotonic()
        await asyncio.wait_for(queue.quiet(0.2), 5)
        assert time.monotonic() - bounded >= 0.15 and not ingesting.done(), "the limit"
        await admin.execute_command("CLIENT", "UNPAUSE")
        assert await asyncio.wait_for(ingesting, 10) == "queued"
        await asyncio.wait_for(quiet, 5)
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()


async def test_an_empty_complete_never_removes_an_item_that_just_arrived(
        queue: WorkQueue) -> None:
    # A holder that found the queue empty (a replica of an earlier version claimed one;
    # this version takes no lock on an empty queue).
    token = "an-earlier-replica"
    assert await queue.redis.set(queue.keys.lock(CID), token, nx=True, px=30_000)
    # A message arrives between the worker finding the queue empty and letting go. Its
    # JSON contains "-" (in the text), which an id of "-" must not match.
    late = message("a late-arriving message - with dashes")
    await queue.ingest(late, dedupe_key=None, placeholder=placeholder(late))

    left, head = await queue.complete(CID, token, "-")
    assert left == 1
    assert head is not None and head.item.id == late.id
    assert await queue.length(CID) == 1


async def test_a_lost_lease_completes_nothing(queue: WorkQueue) -> None:
    item = message("one")
    await queue.ingest(item, dedupe_key=None, placeholder=placeholder(item))
    await claim(queue)
    assert await queue.complete(CID, "someone else's token", item.id) == (-1, None)
    assert await queue.length(CID) == 1


async def test_releasing_an_unstarted_head_does_not_count_it_as_started(
        queue: WorkQueue) -> None:
    item = message("one")
    await queue.ingest(item, dedupe_key=None, placeholder=placeholder(item))
    taken = await claim(queue)
    assert taken.head is not None and taken.head.attempts == 1
    await queue.release(CID, taken.token, unstarted=item.id)
    taken = await claim(queue)
    assert taken.head is not None
    assert taken.head.attempts == 1, "the released read was not a start"
    await queue.release(CID, taken.token)
    taken = await claim(queue)
    assert taken.head is not None and taken.head.attempts == 2


async def test_the_head_comes_with_the_conversation_its_task_will_read(
        redis_url: str) -> None:
    redis = connect(redis_url)
    prefix = f"t{uuid.uuid4().hex[:12]}"
    store = RedisConversationStore(redis, prefix=prefix)
    queue = WorkQueue(redis, prefix, conversations=store.parse_snapshot)
    try:
        earlier = [Message(role="user", content="hello", kind="instruction", tokens=3),
                   Message(role="assistant", content="hi there", kind="answer", tokens=4)]
        await store.append(CID, earlier)
        await store.set_plan(CID, "greet, then help")
        first, second = message("one"), message("two")
        for item in (first, second):
            await queue.ingest(item, dedupe_key=None, placeholder=placeholder(item))
        taken = await claim(queue)
        token, head = taken.token, taken.head
        assert head is not None and head.conversation is not None
        assert head.conversation == await store.snapshot(CID)
        assert [m.content for m in head.conversation.window] == ["hello", "hi there"]
        assert head.conversation.plan == "greet, then help"

        await store.append(CID, [Message(role="user", content="one", kind="instruction",
                                         tokens=1)])
        _, following = await queue.complete(CID, token, first.id)
        assert following is not None and following.conversation is not None
        assert [m.content for m in following.conversation.window] == \
            ["hello", "hi there", "one"], "the next head reads the window as it is now"
    finally:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.unlink(*keys)
        await redis.aclose()


class Taker:
    """A process with one free worker (the queue's side of ``WorkerPool``)."""

    def __init__(self) -> None:
        self.reserved = 0
        self.adopted: asyncio.Queue[tuple[str, Claim]] = asyncio.Queue()

    async def reserve(self, cid: str) -> bool:
        self.reserved += 1
        return True

    def unreserve(self) -> None:
        self.reserved -= 1

    def adopt(self, cid: str, claim: Claim) -> None:
        self.reserved -= 1
        self.adopted.put_nowait((cid, claim))


async def test_a_conversation_taken_at_ingest_reaches_its_worker_if_the_request_is_cancelled(
        queue: WorkQueue) -> None:
    # The script takes the lock; if the request were cancelled before the claim reached
    # the worker, nobody would serve the conversation until the lease expired.
    queue.taker = taker = Taker()
    item = message("hello")
    ingesting = asyncio.create_task(queue.ingest(item, dedupe_key=None, start_here=True))
    await asyncio.sleep(0)  # up to the script's round trip
    ingesting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ingesting
    cid, claim = await asyncio.wait_for(taker.adopted.get(), 10)
    assert cid == CID and claim.head.item.id == item.id
    assert await queue.redis.get(queue.keys.lock(CID)) == claim.token.encode()
    assert await queue.redis.llen(queue.keys.wake(CID)) == 0, "taken, so nobody is woken"
    assert taker.reserved == 0


async def test_only_a_caller_waiting_here_has_its_conversation_taken_at_ingest(
        queue: WorkQueue) -> None:
    # A platform's message is woken, whoever has a free worker: the workers take a burst in
    # batches, after its acknowledgements.
    queue.taker = taker = Taker()
    items = [message("one"), message("two")]
    items[1].inbound.conversation_id = "webhook:test:c2"
    assert await queue.ingest(items[0], dedupe_key=None) == "queued"
    assert taker.adopted.empty() and taker.reserved == 0
    assert await queue.ingest(items[1], dedupe_key=None, start_here=True) == "taken"
    cid, claim = taker.adopted.get_nowait()
    assert cid == "webhook:test:c2"
    assert claim.head.item.id == items[1].id and taker.reserved == 0
    assert await queue.redis.lrange(queue.keys.wake(CID), 0, -1) == [CID.encode()]
    # Held now: queued behind its running task, for its holder; the worker given back.
    third = message("three")
    third.inbound.conversation_id = "webhook:test:c2"
    assert await queue.ingest(third, dedupe_key=None, start_here=True) == "queued"
    assert taker.adopted.empty() and taker.reserved == 0
    assert await queue.redis.lrange(queue.keys.wake(CID), 0, -1) == [CID.encode()]


async def test_a_store_error_at_ingest_gives_the_held_worker_back() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    redis = connect(f"redis://127.0.0.1:{port}")
    queue = WorkQueue(redis, "t-unreachable")
    queue.taker = taker = Taker()
    try:
        with pytest.raises(StoreUnavailableError):
            await queue.ingest(message("hello"), dedupe_key=None, start_here=True)
        assert taker.reserved == 0 and taker.adopted.empty()
    finally:
        await redis.aclose()


async def test_a_conversation_taken_at_ingest_starts_with_the_objects_just_queued(
        queue: WorkQueue) -> None:
    queue.taker = taker = Taker()
    item = message("hello")
    state = placeholder(item)
    assert await queue.ingest(item, dedupe_key=None, placeholder=state,
                              start_here=True) == "taken"
    _, claim = taker.adopted.get_nowait()
    assert claim.head.item is item and claim.head.task is state, "not validated again"
    assert claim.head.attempts == 1


async def test_an_older_item_left_at_the_head_is_read_not_taken_for_the_new_one(
        queue: WorkQueue) -> None:
    # A worker died holding the conversation: its lease expired, its item is still first.
    older = message("from before the crash")
    await queue.redis.rpush(queue.keys.queue(CID), older.model_dump_json())
    await queue.redis.set(queue.store_keys.task(older.task_id),
                          placeholder(older, "running").model_dump_json())
    queue.taker = taker = Taker()
    item = message("hello")
    assert await queue.ingest(item, dedupe_key=None, placeholder=placeholder(item),
                              start_here=True) == "taken"
    _, claim = taker.adopted.get_nowait()
    assert claim.head.item == older
    assert claim.head.task is not None and claim.head.task.task_id == older.task_id
    assert claim.head.task.status == "running"

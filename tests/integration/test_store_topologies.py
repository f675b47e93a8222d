"""The store past one node, on real servers started on loopback (tests/clusters.py): a Redis
Cluster of three primaries with a replica each, a primary with a replica behind three
sentinels, and a primary with a replica at a fixed address. The gateway's steps run on
each with nothing above the store knowing which (every script keeps to one slot on the
cluster), a write waits for a replica, and a store that refuses writes is an outage."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.base import InboundMessage
from adapters.webhook import signed_headers
from agent_core import Event, StoreUnavailableError
from agent_core.errors import ConfigError
from agent_core.messages import Message
from agent_core.store import OpenStore, open_store
from agent_core.store.slots import key_slot
from agent_core.task import TaskState
from gateway.eventlog import EventLog
from gateway.queue import WorkItem, WorkQueue
from gateway.settings import GatewaySettings
from tests.clusters import (
    SENTINEL_PASSWORD,
    LocalCluster,
    LocalPair,
    LocalSentinel,
    start_cluster,
    start_pair,
    start_sentinel,
    until,
)
from tests.integration.conftest import WEBHOOK_SECRET, GatewayFactory, answer_echo

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = asyncio.run(start_cluster(tmp_path_factory.mktemp("cluster")))
    yield started
    started.close()


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSentinel]:
    started = asyncio.run(start_sentinel(tmp_path_factory.mktemp("sentinel")))
    yield started
    started.close()


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[LocalPair]:
    started = await start_pair(tmp_path / "pair")
    yield started
    started.close()


def on_cluster(cluster: LocalCluster, **values: Any) -> dict[str, Any]:
    return {"redis_cluster_nodes": cluster.seeds, "redis_url": cluster.url, **values}


def behind_sentinel(sentinel: LocalSentinel, **values: Any) -> dict[str, Any]:
    return {"redis_sentinels": sentinel.addresses, "redis_sentinel_master": sentinel.master,
            "redis_url": sentinel.url, "redis_sentinel_password": SENTINEL_PASSWORD,
            **values}


async def opened(tmp_path: Path, **values: Any) -> OpenStore:
    values.setdefault("redis_prefix", f"t{uuid.uuid4().hex[:10]}")
    settings = GatewaySettings(_env_file=None, hermes_data_dir=tmp_path,  # type: ignore[call-arg]
                               **values)
    return await open_store(settings)


def item(cid: str, text: str, task_id: str) -> WorkItem:
    inbound = InboundMessage(channel="webhook", conversation_id=cid, user_id="crm:u1",
                             text=text, platform_message_id=uuid.uuid4().hex, reply_target={})
    return WorkItem(inbound=inbound, task_id=task_id)


def state(cid: str, task_id: str, status: str = "queued") -> TaskState:
    return TaskState(task_id=task_id, trace_id=task_id, conversation_id=cid, user_id="crm:u1",
                     role="", permissions=[], instruction="x", status=status)  # type: ignore[arg-type]


# --- a Redis Cluster -------------------------------------------------------------------


async def test_the_queues_steps_run_on_a_cluster_for_conversations_of_every_shard(
        cluster: LocalCluster, tmp_path: Path) -> None:
    store = await opened(tmp_path, **on_cluster(cluster))
    queue = WorkQueue(store.store.redis, store.store.keys.prefix, blocking=store.blocking,
                      conversations=store.store.parse_snapshot)
    try:
        keys = queue.store_keys
        cids = [f"webhook:crm:c{n}" for n in range(24)]
        assert len({keys.layout.of(c) for c in cids}) > 8, "spread over many shards"
        first: dict[str, str] = {}
        for cid in cids:
            for text in ("one", "two"):
                task_id = keys.new_task_id(cid)
                first.setdefault(cid, task_id)
                assert await queue.ingest(item(cid, text, task_id), dedupe_key=f"k:{cid}:{text}",
                                          placeholder=state(cid, task_id),
                                          message_key=f"m:{cid}:{text}") == "queued"
        again = item(cids[0], "one", keys.new_task_id(cids[0]))
        assert await queue.ingest(again, dedupe_key=f"k:{cids[0]}:one") == "duplicate"
        assert await queue.waiting() == len(cids)
        oldest = await queue.oldest()
        assert oldest is not None and oldest[0] == cids[0]
        assert set(await queue.stale_candidates()) == set(cids)
        woken: list[str] = []
        async with asyncio.timeout(20):
            while len(set(woken)) < len(cids):  # from every shard's wake list
                woken += await queue.wait_for_work(1.0)
        assert sorted(set(woken)) == sorted(cids)
        claims = await queue.claim(cids)
        assert set(claims) == set(cids)
        for cid, taken in claims.items():
            assert taken.head.item.task_id == first[cid] and taken.head.attempts == 1
            assert taken.head.task is not None and taken.head.task.status == "queued"
            left, following = await queue.complete(cid, taken.token, taken.head.item.id)
            assert left == 1 and following is not None
            assert following.item.inbound.text == "two"
            assert await queue.complete(cid, taken.token, following.item.id) == (0, None)
        assert await queue.waiting() == 0 and await queue.oldest() is None
        # Each conversation's keys, its tasks' and its markers', in its shard's slot.
        for cid in cids[:4]:
            slot = key_slot(keys.queue.queue(cid))
            assert key_slot(keys.task(first[cid])) == slot
            assert await store.store.redis.get(keys.dedupe(f"m:{cid}:one", cid)) == \
                first[cid].encode()
            assert await store.store.load_task(first[cid]) is not None
    finally:
        await queue.stop_waiting()
        await store.close()


async def test_the_conversation_store_and_its_scripts_run_on_a_cluster(
        cluster: LocalCluster, tmp_path: Path) -> None:
    store = await opened(tmp_path, **on_cluster(cluster))
    conversations = store.store
    try:
        cids = ["slack:T1:C1:1.1", "telegram:-100:42", "webhook:crm:ticket-9"]
        for cid in cids:
            task_id = conversations.keys.new_task_id(cid)
            window = [Message(role="user", content=f"invoice {n} for {cid}") for n in range(6)]
            await conversations.append(cid, window, task=state(cid, task_id, "answered"))
            snapshot = await conversations.snapshot(cid)
            assert len(snapshot.window) == 6
            # WATCH, MULTI and the archive's script in it: one slot.
            assert await conversations.rewrite_window(cid, window[4:], window[:4])
            hits = await conversations.recall(cid, "invoice 2")
            assert hits and "invoice 2" in hits[0].content
            assert [t.task_id for t in await conversations.recent_tasks(cid, 5)] == [task_id]
        # Reading tasks of several conversations at once (several slots).
        ids = [t.task_id for cid in cids for t in await conversations.recent_tasks(cid, 5)]
        assert all(await conversations.redis.mget([conversations.keys.task(t) for t in ids]))
        assert await conversations.forget(cids[0]) > 0
        assert (await conversations.snapshot(cids[0])).window == []
        stale = await conversations.sweep_idle(-1.0)
        assert set(stale) == set(cids[1:])
        await conversations.writable()
    finally:
        await store.close()


async def test_followers_of_tasks_in_several_slots_each_get_their_events(
        cluster: LocalCluster, tmp_path: Path) -> None:
    store = await opened(tmp_path, **on_cluster(cluster))
    keys = store.store.keys
    log = EventLog(store.store.redis, keys, retention=60, blocking=store.blocking)
    log.start()
    try:
        tasks = [keys.new_task_id(f"webhook:crm:f{n}") for n in range(4)]
        assert len({key_slot(keys.task_events(t)) for t in tasks}) > 1

        async def first_event(task_id: str) -> dict[str, Any]:
            async with contextlib.aclosing(log.follow(task_id, poll=0.5)) as events:
                async for event in events:
                    if event.get("type") == "AGENT_STARTED":
                        return event
            raise AssertionError("the follow ended")

        followers = [asyncio.create_task(first_event(t)) for t in tasks]
        async with asyncio.timeout(20):
            while log._followers.followed < len(tasks):
                await asyncio.sleep(0.01)
            for task_id in tasks:
                log(Event(type="AGENT_STARTED", trace_id=task_id, conversation_id="c", round=0,
                          payload={"n": task_id}, task_id=task_id))
            found = await asyncio.gather(*followers)
        assert [e["payload"]["n"] for e in found] == tasks
    finally:
        log.close_followers()
        await log.stop()
        await store.close()


async def test_a_gateway_on_a_cluster_answers_each_message_once_and_in_order(
        cluster: LocalCluster, make_gateway: GatewayFactory,
        callback_server: dict[str, Any]) -> None:
    h = await make_gateway(**on_cluster(cluster))
    h.model.responder = answer_echo
    sent: list[tuple[str, str]] = []

    async def talk(conversation: str) -> None:
        for n in range(3):
            text = f"{conversation}/{n}"
            body = json.dumps({"conversation_id": conversation, "user_id": "u1",
                               "text": text, "idempotency_key": text,
                               "callback_url": callback_server["url"]}).encode()
            for _ in range(2):  # the second delivery is a platform's retry
                response = await h.client.post("/webhook/crm", data=body,
                                               headers=signed_headers(WEBHOOK_SECRET, body))
                assert response.status in (200, 202), await response.text()
            sent.append((conversation, f"{conversation}/{n}"))

    await asyncio.gather(*(talk(f"order-{n}") for n in range(8)))
    await h.wait_for(lambda: len(callback_server["received"]) >= 24, timeout=30)
    await h.wait_idle()
    answers = [p["text"] for _, _, p in callback_server["received"]]
    assert sorted(answers) == sorted(f"answer to: {text}" for _, text in sent)
    for conversation in {c for c, _ in sent}:
        mine = [a for a in answers if a.startswith(f"answer to: {conversation}/")]
        assert mine == [f"answer to: {conversation}/{n}" for n in range(3)]
    # A synchronous run starts here with a task id minted for its conversation's shard.
    response = await h.client.post("/agent/run", json={"text": "sync?", "conversation_id": "s1"})
    assert response.status == 200, await response.text()
    assert (await response.json())["text"] == "answer to: sync?"
    assert (await h.client.get("/readyz")).status == 200


async def test_a_process_with_another_number_of_shards_refuses_the_store(
        cluster: LocalCluster, tmp_path: Path) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    first = await opened(tmp_path, **on_cluster(cluster, redis_prefix=prefix))
    await first.close()
    with pytest.raises(ConfigError, match=r"HERMES_STORE_SHARDS=8.*shards=16"):
        await opened(tmp_path, **on_cluster(cluster, redis_prefix=prefix,
                                            hermes_store_shards=8))


# --- behind Sentinel ---------------------------------------------------------------------


async def test_a_gateway_behind_sentinel_answers(
        sentinel: LocalSentinel, make_gateway: GatewayFactory,
        callback_server: dict[str, Any]) -> None:
    h = await make_gateway(**behind_sentinel(sentinel))
    h.model.responder = answer_echo
    body = json.dumps({"conversation_id": "s", "user_id": "u1", "text": "through sentinel",
                       "callback_url": callback_server["url"]}).encode()
    response = await h.client.post("/webhook/crm", data=body,
                                   headers=signed_headers(WEBHOOK_SECRET, body))
    assert response.status == 202
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    assert callback_server["received"][0][2]["text"] == "answer to: through sentinel"
    status = await h.client.get("/agent/status")
    assert "sentinel 'hermes'" in (await status.json())["store"]


async def test_a_write_counts_once_a_replica_has_it_and_fails_without_one(
        sentinel: LocalSentinel, tmp_path: Path) -> None:
    store = await opened(tmp_path, **behind_sentinel(
        sentinel, hermes_store_replica_timeout_ms=300))
    primary = await sentinel.primary()
    replica = next(n for n in sentinel.data if n is not primary)
    try:
        await store.store.writable()
        replica.kill()
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="ReplicaAckError"):
            await store.store.writable()
        assert time.monotonic() - started < 3
        assert await store.store.ping(), "it still answers: reads are not refused"
        replica.start()
        await until(lambda: writes(store), "the replica to acknowledge again", timeout=30)
    finally:
        if not replica.running:
            replica.start()
        await store.close()
        await until(sentinel.settled, "the sentinels to settle again")


# --- a primary demoted at a fixed address --------------------------------------------------


async def test_a_demoted_primary_at_a_fixed_url_is_an_outage_until_it_is_primary_again(
        pair: LocalPair, make_gateway: GatewayFactory, callback_server: dict[str, Any]
        ) -> None:
    h = await make_gateway(redis_url=pair.url(pair.primary), hermes_store_replica_acks=1)
    h.model.responder = answer_echo

    async def send(text: str) -> int:
        body = json.dumps({"conversation_id": "fixed", "user_id": "u1", "text": text,
                           "idempotency_key": text,
                           "callback_url": callback_server["url"]}).encode()
        response = await h.client.post("/webhook/crm", data=body,
                                       headers=signed_headers(WEBHOOK_SECRET, body))
        return response.status

    assert await send("before") == 202
    await h.wait_for(lambda: len(callback_server["received"]) == 1)
    await pair.swap()  # the gateway's address now answers READONLY
    assert (await h.client.get("/readyz")).status == 503
    assert await send("while demoted") == 503, "refused, so the sender keeps it"
    await pair.swap()  # a primary again
    await until(lambda: _ready(h), "the gateway to be ready again")
    assert await send("while demoted") == 202
    await h.wait_for(lambda: len(callback_server["received"]) == 2, timeout=30)
    assert [p["text"] for _, _, p in callback_server["received"]] == [
        "answer to: before", "answer to: while demoted"]


async def writes(store: OpenStore) -> bool:
    await store.store.writable()
    return True


async def _ready(h: Any) -> bool:
    return bool((await h.client.get("/readyz")).status == 200)

"""Where keys live: on one node the historical names, on a cluster every key a step touches
in the slot of its conversation's shard (agent_core/store/keys.py, slots.py)."""

from __future__ import annotations

import random

import pytest

from agent_core.errors import ConfigError
from agent_core.store import Keys
from agent_core.store.slots import (
    SLOTS,
    key_slot,
    mint_task_id,
    shard_of,
    shard_tags,
    task_shard,
)
from agent_core.store.topology import topology
from gateway.settings import GatewaySettings

CIDS = ["slack:T1:C9:1712.33", "telegram:-100123:42", "webhook:crm:ticket-7", "api:local:x",
        *(f"webhook:crm:c{n}" for n in range(40))]


def test_one_node_keeps_the_names_it_always_had() -> None:
    keys, cid = Keys("hermes"), "slack:T1:C9"
    assert [keys.queue.queue(cid), keys.queue.pending(cid), keys.queue.wake(cid),
            keys.queue.attempts(cid), keys.window(cid), keys.task("abc"),
            keys.task_events("abc"), keys.dedupe("webhook:k", cid), keys.conversations(cid),
            keys.approvals.approval("a1"), keys.schedules.jobs(), keys.task_prefix(cid)] == [
        "hermes:q:{slack:T1:C9}:items", "hermes:q:pending", "hermes:q:wake",
        "hermes:q:attempts", "hermes:conv:{slack:T1:C9}:window", "hermes:task:abc",
        "hermes:task:abc:events", "hermes:dedupe:webhook:k", "hermes:conversations",
        "hermes:approval:a1", "hermes:jobs", "hermes:task:"]
    assert keys.queue.pendings() == ["hermes:q:pending"] and len(keys.new_task_id(cid)) == 32


@pytest.mark.parametrize("cid", CIDS)
def test_every_key_a_step_of_a_conversation_touches_is_in_its_shards_slot(cid: str) -> None:
    keys = Keys("hermes", shards=16)
    task_id = keys.new_task_id(cid)
    touched = [keys.queue.queue(cid), keys.queue.lock(cid), keys.queue.steer(cid),
               keys.queue.control(cid), keys.queue.pending(cid), keys.queue.wake(cid),
               keys.queue.attempts(cid), keys.window(cid), keys.meta(cid),
               keys.archive(cid), keys.postings(cid, "word"), keys.conv_tasks(cid),
               keys.conversations(cid), keys.dedupe("webhook:crm:k1", cid),
               keys.task(task_id), keys.task_events(task_id), keys.delivered(task_id),
               keys.task_prefix(cid) + task_id]
    assert len({key_slot(k) for k in touched}) == 1, touched
    assert keys.task_prefix(cid) + task_id == keys.task(task_id)
    assert len(task_id) == 32 and int(task_id, 16) >= 0  # still a W3C trace id


def test_a_conversations_keys_name_it_unambiguously_on_a_cluster() -> None:
    keys = Keys("hermes", shards=16)
    # "a" and "a:b" may share a shard: the pattern of one never matches the other's keys.
    pattern = keys.conv_pattern("a").removesuffix("*")
    assert not keys.window("a:b").startswith(pattern)
    assert keys.window("a").startswith(pattern)


def test_sections_with_scripts_of_their_own_keep_to_one_slot() -> None:
    keys = Keys("hermes", shards=16)
    approvals = [keys.approvals.approval("a1"), keys.approvals.approval("zz"),
                 keys.approvals.expiry(), keys.approvals.recent()]
    schedules = [keys.schedules.jobs(), keys.schedules.due(), keys.schedules.claim("j", 1.0)]
    budgets = [keys.budgets.counter("r", "w", "s"), keys.budgets.holds("r2", "w", "t")]
    console = [keys.console.feed(), keys.console.tasks(), keys.console.minute(3)]
    for group in (approvals, schedules, budgets, console):
        assert len({key_slot(k) for k in group}) == 1, group


@pytest.mark.parametrize("shards", [1, 3, 16, 100, 1024])
def test_shard_tags_spread_evenly_over_the_slot_space(shards: int) -> None:
    slots = [key_slot("{" + tag + "}") for tag in shard_tags(shards)]
    assert all(n * SLOTS // shards <= slot < (n + 1) * SLOTS // shards
               for n, slot in enumerate(slots)), slots


def test_conversations_spread_over_the_shards_and_minted_ids_name_theirs() -> None:
    rng = random.Random(7)
    counts = [0] * 16
    for _ in range(4000):
        counts[shard_of(f"slack:T{rng.randrange(10**6)}:C1", 16)] += 1
    assert min(counts) > 150, counts
    for shard in range(7):
        minted = mint_task_id(shard, 7)
        assert task_shard(minted, 7) == shard and len(minted) == 32


def test_key_slots_are_redis_cluster_slots() -> None:
    # The examples of the Redis Cluster specification.
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert key_slot("foo{}{bar}") == key_slot("foo{}{bar}") != key_slot("bar")
    assert key_slot("foo{{bar}}zap") == key_slot("{bar")
    assert key_slot("123456789") == 0x31C3 % SLOTS


def test_a_store_named_two_ways_or_by_halves_is_refused() -> None:
    def settings(**values: object) -> GatewaySettings:
        return GatewaySettings(_env_file=None, **values)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match="both set"):
        topology(settings(redis_cluster_nodes="a:1", redis_sentinels="b:2",
                          redis_sentinel_master="m"))
    with pytest.raises(ConfigError, match="REDIS_SENTINEL_MASTER"):
        topology(settings(redis_sentinels="b:2"))
    with pytest.raises(ConfigError, match="not host:port"):
        topology(settings(redis_cluster_nodes="just-a-host"))
    with pytest.raises(ConfigError, match="sentinels say where the primary is"):
        topology(settings(redis_sentinels="b:2", redis_sentinel_master="m",
                          redis_url="redis://:pw@primary:6379/0"))
    plan = topology(settings(redis_cluster_nodes="n1:7000, n2:7001",
                             redis_url="rediss://app:secret@n3:7002"))
    assert plan is not None and plan.kind == "cluster" and plan.acks == 1
    assert plan.nodes == (("n1", 7000), ("n2", 7001), ("n3", 7002))
    assert plan.options["ssl"] and plan.options["password"] == "secret"
    assert "secret" not in plan.location and plan.location.startswith("redis cluster rediss")
    single = topology(settings(redis_url="redis://:pw@h:1/0"))
    assert single is not None and single.kind == "single" and single.acks == 0
    assert topology(settings()) is None

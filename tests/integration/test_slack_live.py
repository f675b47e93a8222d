"""Slack answers shown as they are written, and delivered exactly once whatever fails: the
real slack-bolt / slack_sdk against the stand-in, which keeps the messages a person sees
and fails chosen calls (429, a timeout, a request carried out whose answer is lost)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.models.replay import Reply
from tests.integration.conftest import GatewayFactory, Harness
from tests.integration.test_slack import event_body, mention, send, ts
from tests.standins.slack_api import Message

ANSWER = ("Sales grew **12%** in Q3, led by the north region. Margins held at 41%, and the "
          "new product line sold 3,200 units in its first month.")


def streamed(h: Harness, **settings: Any) -> None:
    """The model writes ANSWER in pieces, 20 ms apart."""
    h.model.add(Reply(ANSWER, pace=0.02))


def visible(h: Harness, thread: str, channel: str = "C9") -> list[Message]:
    assert h.slack is not None
    return h.slack.thread(channel, thread)


def with_answer(h: Harness, thread: str, text: str = ANSWER) -> list[Message]:
    """The messages of the thread that show the answer (however rendered)."""
    key = text.split("**", maxsplit=1)[0][:30]
    return [m for m in visible(h, thread) if key in m.shown()]


async def answered(h: Harness, thread: str) -> Message:
    """Once the gateway is idle: the one message showing the answer, complete."""
    await h.wait_for(lambda: bool(with_answer(h, thread)) and
                     not any(m.streaming for m in visible(h, thread)))
    await h.wait_idle()
    [message] = with_answer(h, thread)
    return message


async def test_an_answer_is_streamed_into_the_thread_as_it_is_written(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    streamed(h)
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    message = await answered(h, event["ts"])
    assert message.text == ANSWER, "the stream holds the answer once, in order"
    [start] = h.slack.of("chat.startStream")
    appends = h.slack.of("chat.appendStream")
    assert appends, "written in several pieces"
    pieces = [start.get("markdown_text") or ""] + [a.get("markdown_text") or ""
                                                   for a in appends]
    [stop] = h.slack.of("chat.stopStream")
    assert "".join(pieces) + (stop.get("markdown_text") or "") == ANSWER
    assert message.tag() == {"delivery": message.tag()["delivery"], "part": 0}
    statuses = [s for _, thread, s in h.slack.statuses if thread == event["ts"]]
    assert statuses[0] == "is thinking…" and statuses[-1] == ""
    assert h.slack.of("chat.postMessage") == []


async def test_the_first_streamed_text_shows_within_300_ms_of_the_first_token(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    h.model.add(Reply(ANSWER, pace=0.05))
    event = mention("quick")
    await send(h, event_body(event))
    await answered(h, event["ts"])
    first_token = h.model.first_token_at
    first_text = next(a.at for a in h.slack.attempts if a.method == "chat.startStream")
    assert first_text - first_token < 0.3


@pytest.mark.parametrize("failure", ["429", "timeout", "lost"])
async def test_a_posted_answer_shows_once_whatever_the_post_met(
        make_gateway: GatewayFactory, failure: str) -> None:
    """No stream (nothing was streamed), so the answer is posted: after a 429 it is posted
    again (Slack did not take it), after a timeout or a lost answer it is looked for by its
    delivery id first (conversations.replies) and posted only if it is not there."""
    h = await make_gateway(slack=True, llm_stream=False, slack_progress="off", slack_timeout=1)
    assert h.slack is not None
    h.model.add(Reply(ANSWER))
    h.slack.inject("chat.postMessage", failure, retry_after=1)  # type: ignore[arg-type]
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    message = await answered(h, event["ts"])
    assert "(This may repeat" not in message.text
    attempts = [a.outcome for a in h.slack.attempts if a.method == "chat.postMessage"]
    assert attempts == [failure, "ok"] if failure != "lost" else attempts == ["lost"]
    if failure != "429":
        [lookup] = h.slack.of("conversations.replies")
        assert lookup["ts"] == event["ts"] and lookup["include_all_metadata"] in (True, "1",
                                                                                 "true")


async def test_where_history_cannot_be_read_a_second_copy_says_it_may_repeat(
        make_gateway: GatewayFactory) -> None:
    """Without the history scope the gateway cannot rule a copy out: it posts again, and
    that copy says it may repeat an earlier message."""
    h = await make_gateway(slack=True, llm_stream=False, slack_progress="off")
    assert h.slack is not None
    h.model.add(Reply(ANSWER))
    h.slack.refuse("conversations.replies", "missing_scope")
    h.slack.inject("chat.postMessage", "lost")
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    await h.wait_for(lambda: len(with_answer(h, event["ts"])) == 2)
    await h.wait_idle()
    first, second = with_answer(h, event["ts"])
    assert "may repeat" not in first.shown() and "may repeat" in second.shown()


async def test_a_stream_started_whose_answer_was_lost_is_not_started_twice(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    streamed(h)
    h.slack.inject("chat.startStream", "lost")
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    message = await answered(h, event["ts"])
    assert message.text.replace("\n", "") == ANSWER or message.shown() == ANSWER
    assert len(visible(h, event["ts"])) == 1
    assert [a.outcome for a in h.slack.attempts if a.method == "chat.startStream"] == ["lost"]


@pytest.mark.parametrize("failure", ["429", "lost"])
async def test_an_append_that_failed_never_leaves_the_answer_wrong(
        make_gateway: GatewayFactory, failure: str) -> None:
    """A 429 drops that piece (the next append carries it); a lost append may or may not
    have gone in, so the answer replaces the stream's text when it ends."""
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    h.model.add(Reply(ANSWER, pace=0.03))
    h.slack.inject("chat.appendStream", failure, retry_after=1)  # type: ignore[arg-type]
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    message = await answered(h, event["ts"])
    assert message.shown() == ANSWER
    assert len(visible(h, event["ts"])) == 1


@pytest.mark.parametrize("failure", ["429", "timeout", "lost"])
async def test_a_stop_that_failed_is_made_good_by_an_edit(
        make_gateway: GatewayFactory, failure: str) -> None:
    h = await make_gateway(slack=True, llm_stream=True, slack_timeout=1)
    assert h.slack is not None
    streamed(h)
    h.slack.inject("chat.stopStream", failure, retry_after=1)  # type: ignore[arg-type]
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    await h.wait_for(lambda: any(m.shown() == ANSWER and not m.streaming
                                 for m in visible(h, event["ts"])), timeout=20)
    await h.wait_idle()
    [message] = visible(h, event["ts"])
    assert message.shown() == ANSWER


async def test_where_streams_are_refused_one_message_is_edited_in_place(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    h.model.add(Reply(ANSWER, pace=0.12), Reply("Second answer."))
    h.slack.refuse("chat.startStream", "missing_scope")
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    message = await answered(h, event["ts"])
    [working] = h.slack.of("chat.postMessage")
    assert working["ts"] == message.ts, "the working message became the answer"
    updates = h.slack.of("chat.update")
    assert len(updates) >= 2, "edited as the answer was written, then with the answer"
    # The channel is remembered: the next reply there does not try a stream again.
    again = mention("and then?", thread_ts=event["ts"], message_ts=ts())
    await send(h, event_body(again))
    await h.wait_for(lambda: any(m.shown() == "Second answer." for m in visible(
        h, event["ts"])))
    assert len([a for a in h.slack.attempts if a.method == "chat.startStream"]) == 1


async def test_feedback_is_recorded_in_the_audit_log_and_counted(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    streamed(h)
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    message = await answered(h, event["ts"])
    [buttons] = message.blocks[-1]["elements"]
    value = buttons["negative_button"]["value"]
    payload = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U1"},
               "channel": {"id": "C9"}, "container": {"type": "message"},
               "message": {"ts": message.ts, "thread_ts": event["ts"], "text": ""},
               "actions": [{"type": "feedback_buttons", "action_id": buttons["action_id"],
                            "value": value, "block_id": "b"}],
               "trigger_id": "1", "api_app_id": "A1", "token": "t"}
    body = f"payload={json.dumps(payload)}".encode()
    from tests.integration.conftest import slack_headers

    headers = {**slack_headers(body), "Content-Type": "application/x-www-form-urlencoded"}
    response = await h.client.post("/slack/events", data=body, headers=headers)
    assert response.status == 200
    entries = await h.gateway.parts.audit.query()
    [entry] = [e for e in entries if e.get("event") == "feedback"]
    assert entry["rating"] == "bad" and entry["user"] == "slack:U1"
    assert entry["model"] == "openai:scripted" and entry["task_id"]
    metrics = (await (await h.client.get("/metrics")).read()).decode()
    assert ('hermes_feedback_total{channel="slack",model="openai:scripted",rating="bad"} 1.0'
            in metrics)
    assert h.slack.of("chat.postEphemeral") == [], "nothing else happens"


async def test_an_assistant_thread_gets_its_prompts_and_a_title(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_suggested_prompts=[
        "Weekly sales|How did sales go last week?", "Who are our top customers?"])
    assert h.slack is not None
    h.model.add(Reply("Fine."))
    thread = ts()
    started = {"type": "assistant_thread_started", "assistant_thread": {
        "user_id": "U1", "channel_id": "D42", "thread_ts": thread, "context": {}},
        "event_ts": ts()}
    assert (await send(h, event_body(started))).status == 200
    [prompts] = h.slack.of("assistant.threads.setSuggestedPrompts")
    assert prompts["thread_ts"] == thread and prompts["prompts"] == [
        {"title": "Weekly sales", "message": "How did sales go last week?"},
        {"title": "Who are our top customers?", "message": "Who are our top customers?"}]
    question = {"type": "message", "channel_type": "im", "channel": "D42", "user": "U1",
                "text": "How did sales go last week?", "ts": ts(), "thread_ts": thread,
                "event_ts": ts()}
    await send(h, event_body(question))
    await h.wait_for(lambda: any(m.shown() == "Fine." for m in visible(h, thread, "D42")))
    await h.wait_idle()
    [title] = h.slack.of("assistant.threads.setTitle")
    assert title["title"] == "How did sales go last week?"
    statuses = [s for _, t, s in h.slack.statuses if t == thread]
    assert statuses[0] == "is thinking…" and statuses[-1] == ""


async def test_a_stream_slack_ended_goes_on_as_a_message_edited_in_place(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    h.model.add(Reply(ANSWER, pace=0.08))
    event = mention("how did Q3 go?")
    await send(h, event_body(event))
    await h.wait_for(lambda: len(h.slack.of("chat.appendStream")) >= 1)  # type: ignore[union-attr]
    h.slack.end_streams()  # its five minutes are up
    message = await answered(h, event["ts"])
    assert message.shown() == ANSWER and len(visible(h, event["ts"])) == 1
    edits = h.slack.of("chat.update")
    assert len(edits) >= 2, "edited as it was written after the stream ended, then answered"


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_mention_a_model_writes_is_never_live(make_gateway: GatewayFactory,
                                                      streaming: bool) -> None:
    """Text a model was led to write (a page it read said to) that Slack would read as a
    mention or a masked link reaches Slack as text, streamed or posted."""
    h = await make_gateway(slack=True, llm_stream=streaming, slack_progress="off")
    assert h.slack is not None
    h.model.add(Reply("Done. <!channel> see <https://evil.example|the report> & more",
                      pace=0.02))
    event = mention("summarise that page")
    await send(h, event_body(event))
    await h.wait_for(lambda: any("Done." in m.shown() and not m.streaming
                                 for m in visible(h, event["ts"])))
    await h.wait_idle()
    sent = json.dumps([p for m, p in h.slack.calls if m.startswith("chat.")])
    assert "<!channel>" not in sent and "<https://evil" not in sent
    assert "&lt;!channel&gt;" in sent


async def test_a_stream_interrupted_by_the_next_message_is_taken_away(
        make_gateway: GatewayFactory) -> None:
    """HERMES_BUSY_MODE=interrupt: the first task stops at its tool call; what it had
    streamed goes (no cut-off answer stays) and the next message's answer is the one."""
    h = await make_gateway(slack=True, llm_stream=True, hermes_busy_mode="interrupt")
    assert h.slack is not None
    h.model.add(Reply("Let me look that up for you, one moment please.", pace=0.1,
                      tool_calls=[{"name": "calc_growth_rate",
                                   "arguments": {"current": 2, "previous": 1}}]),
                Reply("Second answer."))
    root = mention("first question")
    await send(h, event_body(root))
    await h.wait_for(lambda: bool(h.slack.of("chat.startStream")))  # type: ignore[union-attr]
    await send(h, event_body(mention("never mind, this instead", thread_ts=root["ts"])))
    await h.wait_for(lambda: any(m.shown() == "Second answer." and not m.streaming
                                 for m in visible(h, root["ts"])))
    await h.wait_idle()
    assert [m.shown() for m in visible(h, root["ts"])] == ["Second answer."]
    assert h.slack.of("chat.delete"), "the first stream was taken away"


async def test_reaction_progress_is_added_once_and_taken_off(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(slack=True, slack_progress="reaction")
    assert h.slack is not None
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}, delay=0.2),
                Reply("Grew 100%.", delay=0.2))
    event = mention("growth?")
    await send(h, event_body(event))
    await h.wait_for(lambda: any(m.shown() == "Grew 100%." for m in visible(h, event["ts"])))
    await h.wait_idle()
    added, removed = h.slack.of("reactions.add"), h.slack.of("reactions.remove")
    assert len(added) == 1 and len(removed) == 1
    assert added[0]["timestamp"] == removed[0]["timestamp"] == event["ts"]



def stream_steps(h: Harness) -> dict[str, str]:
    """Each step's status as the stream's calls leave it."""
    assert h.slack is not None
    calls = [p for m, p in h.slack.calls
             if m in ("chat.startStream", "chat.appendStream", "chat.stopStream")]
    return {c["id"]: c["status"] for p in calls for c in p.get("chunks") or []
            if c.get("type") == "task_update"}


@pytest.mark.parametrize("says_first", [False, True])
async def test_a_streamed_answer_ends_with_every_step_it_showed_finished(
        make_gateway: GatewayFactory, says_first: bool) -> None:
    """A task that begins with a tool shows its steps as a plan, one that begins writing as
    a timeline; either way a tool that finished just before the answer came is shown
    finished by the time the stream stops (the answer came whole, so only the stop can
    carry it)."""
    h = await make_gateway(slack=True, llm_stream=True)
    assert h.slack is not None
    call = [{"name": "calc_growth_rate", "arguments": {"current": 112, "previous": 100}}]
    h.model.add(Reply("Let me work that out." if says_first else "", tool_calls=call),
                Reply("Growth was 12%."))
    event = mention("how much did we grow?")
    await send(h, event_body(event))
    await h.wait_for(lambda: any(m.shown() == "Growth was 12%." and not m.streaming
                                 for m in visible(h, event["ts"])))
    await h.wait_idle()
    [start] = h.slack.of("chat.startStream")
    assert start["task_display_mode"] == ("timeline" if says_first else "plan")
    steps = stream_steps(h)
    assert steps and set(steps.values()) == {"complete"}, h.slack.calls
    assert len(visible(h, event["ts"])) == 1
    if says_first:  # while it streamed, the answer began a paragraph of its own
        streamed = "".join(p.get("markdown_text") or "" for m, p in h.slack.calls
                           if m in ("chat.startStream", "chat.appendStream"))
        assert streamed in ("Let me work that out.",  # the answer came whole, at the end
                            "Let me work that out.\n\nGrowth was 12%.")


async def test_a_plan_the_agent_pins_is_the_streams_title(
        make_gateway: GatewayFactory) -> None:
    """A task long enough to be replanned shows the plan's first line as the stream's plan
    title, beside its steps."""
    h = await make_gateway(slack=True, llm_stream=True, agent_replan_every=2)
    assert h.slack is not None

    def growth(now: int) -> Reply:
        return Reply.call("calc_growth_rate", {"current": now, "previous": 100})

    h.model.add(growth(112), growth(120),
                Reply("Goal: <!here> growth of two quarters\nDone: Q2, Q3\nRemaining: answer"),
                Reply("Q2 grew 12%, Q3 20%."))
    event = mention("growth in Q2 and Q3?")
    await send(h, event_body(event))
    await h.wait_for(lambda: any(m.shown() == "Q2 grew 12%, Q3 20%." and not m.streaming
                                 for m in visible(h, event["ts"])))
    await h.wait_idle()
    calls = [p for m, p in h.slack.calls
             if m in ("chat.startStream", "chat.appendStream", "chat.stopStream")]
    plans = [c["title"] for p in calls for c in p.get("chunks") or []
             if c.get("type") == "plan_update"]
    assert plans == ["Goal: &lt;!here&gt; growth of two quarters"]
    assert len(stream_steps(h)) == 2 and calls[0]["task_display_mode"] == "plan"

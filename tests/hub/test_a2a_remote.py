"""Remote A2A agents (HUB_A2A_AGENTS) as hub agents, against the a2a-sdk's own server on
loopback: one as a workflow step, a question back continued, the SSRF guard (an internal
address needs HUB_A2A_INTERNAL_HOSTS), and credentials sent to their own host only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from a2a.helpers import new_text_message
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb

from hub import AgentRunner, LogEvent, TaskRequest
from hub.bridges.a2a_remote import RemoteA2A
from hub.discovery import discover
from hub.settings import A2ARemote
from hub.workflows.executor import WorkflowExecutor
from hub.workflows.store import WorkflowStore
from tests.hub.a2a_server import remote_agent
from tests.hub.conftest import unique
from tests.hub.protocol_fixtures import BridgedHub, bridged, until_discovered
from tests.hub.test_bus import until

__all__ = ["bridged"]


def entry(url: str, name: str, token: str = "remote-key") -> A2ARemote:
    return A2ARemote.model_validate({"url": url, "name": name, "bearer": token})


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_remote_a2a_agent_is_a_workflow_step(bridged: BridgedHub, streaming: bool
                                                     ) -> None:
    async with remote_agent(streaming=streaming) as remote:
        name = unique("oracle")
        await bridged.start_bridges(hub_agent_protocol=False,
                                    hub_a2a_agents=[entry(remote.url, name)],
                                    hub_a2a_internal_hosts=["127.0.0.1"])
        agent_id = f"a2a-{name}"
        await until_discovered(bridged.bus, agent_id, "lookup_claim")
        [listed] = [c for c in await discover(bridged.bus, "*") if c.agent_id == agent_id]
        assert listed.capabilities == ("lookup_claim", name.replace("-", "_"))
        assert listed.version == "2.1"
        notes: list[LogEvent] = []

        async def on_note(msg: Any) -> None:
            note = bridged.bus.parse(msg.data)
            if isinstance(note, LogEvent) and note.sender_id == agent_id:
                notes.append(note)

        await bridged.bus.nc.subscribe("log.>", cb=on_note)
        store = WorkflowStore(bridged.bus)
        workflow_id = unique("remote")
        await store.put({"workflow_id": workflow_id, "steps": [
            {"id": "lookup", "capability": "lookup_claim",
             "input": {"text": "$.input.text", "claim": "C-7"}}]})
        executor_id = unique("executor")
        executor = WorkflowExecutor(bridged.bus, store, agent_id=executor_id)
        await executor.start()
        bridged.stack.push_async_callback(executor.stop)
        runner = AgentRunner(bridged.bus, executor)
        await runner.start()
        bridged.runners.append(runner)
        response = await bridged.bus.request(executor_id, TaskRequest(
            sender_id=unique("caller"), intent="run_workflow", deadline_ms=20_000,
            arguments={"workflow_id": workflow_id, "input": {"text": "windscreen"}}))
        assert response.status == "success", response
        output = response.result["output"]
        assert output["answer"] == "remote says: windscreen"
        assert output["artifacts"][0]["name"] == "answer"
        # The skill was named, the other arguments sent as data, with its own credentials.
        [(text, metadata, _)] = remote.seen
        assert text == "windscreen" and metadata == {"skill": "lookup_claim"}
        assert set(remote.authorizations) == {"Bearer remote-key"}
        if streaming:  # its working update was a progress note of the step
            await until(lambda: any(n.details == {"status": "looking it up"} for n in notes))


async def test_a_question_back_is_partial_and_the_next_step_continues_it(
        bridged: BridgedHub) -> None:
    async def asks(updater: TaskUpdater, text: str, metadata: dict[str, Any],
                   task: pb.Task) -> None:
        if text != "P-1":
            await updater.requires_input(new_text_message(
                "Which policy?", task_id=task.id, context_id=task.context_id))
            return
        await updater.add_artifact([pb.Part(text="covered")], name="answer")
        await updater.complete()

    async with remote_agent(asks) as remote:
        name = unique("oracle")
        await bridged.start_bridges(hub_agent_protocol=False,
                                    hub_a2a_agents=[entry(remote.url, name)],
                                    hub_a2a_internal_hosts=["127.0.0.1"])
        agent_id = f"a2a-{name}"
        await until_discovered(bridged.bus, agent_id)
        first = await bridged.bus.request(agent_id, TaskRequest(
            sender_id=unique("caller"), intent="lookup_claim", deadline_ms=10_000,
            arguments={"text": "is C-7 covered?"}))
        assert first.status == "partial" and first.result["question"] == "Which policy?"
        [step] = first.result["next_steps"]
        assert step["agent"] == agent_id
        second = await bridged.bus.request(agent_id, TaskRequest(
            sender_id=unique("caller"), intent=step["intent"], deadline_ms=10_000,
            arguments={**step["arguments"], "text": "P-1"}))
        assert second.status == "success" and second.result["answer"] == "covered", second
        assert remote.seen[0][2] == remote.seen[1][2]  # the same remote task


async def test_an_agent_on_an_internal_address_needs_the_setting(bridged: BridgedHub
                                                                 ) -> None:
    """The attack: HUB_A2A_AGENTS (or a card) naming loopback, a private address or the
    cloud metadata address is refused by the SSRF guard; nothing connects there."""
    async with remote_agent() as remote:
        name = unique("oracle")
        bridges = await bridged.start_bridges(hub_agent_protocol=False,
                                              hub_a2a_agents=[entry(remote.url, name)])
        [part] = [p for p in bridges.parts if isinstance(p, RemoteA2A)]
        await part.refresh()
        assert part.agents == {}
        assert remote.seen == [] and remote.authorizations == []


@pytest.mark.parametrize("elsewhere", ["another host", "another port"])
async def test_credentials_go_to_the_configured_host_only(bridged: BridgedHub,
                                                          elsewhere: str) -> None:
    """The attack: a card names an interface on another host, or on another port of the
    same host (another service there); the call goes there without the entry's key (the
    remote refuses it, the task fails)."""
    async with remote_agent() as remote, remote_agent() as other:
        moved = remote.url.replace("127.0.0.1", "localhost") if elsewhere == "another host" \
            else other.url
        receiver = remote if elsewhere == "another host" else other
        name = unique("oracle")
        bridges = await bridged.start_bridges(
            hub_agent_protocol=False, hub_a2a_agents=[entry(remote.url, name)],
            hub_a2a_internal_hosts=["127.0.0.1", "localhost"])
        [part] = [p for p in bridges.parts if isinstance(p, RemoteA2A)]
        agent = part.agents[f"a2a-{name}"]
        card = pb.AgentCard()
        card.CopyFrom(agent.card)
        card.supported_interfaces[0].url = f"{moved}/"
        agent.use(card)
        response = await bridged.bus.request(agent.agent_id, TaskRequest(
            sender_id=unique("caller"), intent="lookup_claim", deadline_ms=10_000,
            arguments={"text": "hi"}))
        assert (response.status, response.error_code) == ("failed", "AGENT_ERROR")
        assert receiver.authorizations == [None]


def test_the_setting_takes_urls_or_a_yaml_list_with_credentials(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from hub.settings import HubSettings

    def parsed(value: str) -> list[A2ARemote]:
        monkeypatch.setenv("HUB_A2A_AGENTS", value)
        return HubSettings(_env_file=None).hub_a2a_agents  # type: ignore[call-arg]

    assert [r.url for r in parsed("https://a.example/card.json, https://b.example")] == [
        "https://a.example/card.json", "https://b.example"]
    [remote] = parsed("- url: https://a.example\n  name: oracle\n  bearer: tok-1\n"
                      "  headers: {X-Api-Key: key-2}\n")
    assert (remote.name, remote.bearer and remote.bearer.get_secret_value()) == (
        "oracle", "tok-1")
    assert remote.headers["X-Api-Key"].get_secret_value() == "key-2"
    assert "tok-1" not in repr(remote) and "key-2" not in repr(remote)
    for bad in ("- url: https://a.example\n  token: x\n", "- url: https://a.example\n"
                "  name: Bad Name\n", "{url: https://a.example}", "[unclosed"):
        with pytest.raises(ValidationError):
            parsed(bad)
    assert parsed("") == []



def test_the_setting_is_read_from_a_secret_file(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """As the chart mounts it (hub.a2aAgentsSecret): a file HUB_A2A_AGENTS in a directory
    of HERMES_SECRETS_DIR."""
    from hub.settings import HubSettings

    (tmp_path / "HUB_A2A_AGENTS").write_text(
        "- url: https://agents.example.com/claims\n  bearer: tok-1\n")
    monkeypatch.delenv("HUB_A2A_AGENTS", raising=False)
    monkeypatch.setenv("HERMES_SECRETS_DIR", str(tmp_path))
    [remote] = HubSettings(_env_file=None).hub_a2a_agents  # type: ignore[call-arg]
    assert remote.url == "https://agents.example.com/claims"
    assert remote.bearer is not None and remote.bearer.get_secret_value() == "tok-1"

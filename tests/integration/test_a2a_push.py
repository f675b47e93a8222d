"""The A2A edge for a client that went away, against the real a2a-sdk client over real HTTP
and a real nats-server: push notifications to a webhook of its own, SubscribeToTask and
ListTasks, each scoped to the principal whose key made the task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from aiohttp import web
from aiohttp.test_utils import TestServer

from hub import AgentRunner, Bus, HubSettings
from tests.conftest import NatsServer
from tests.integration.conftest import GatewayFactory, Harness, api_key, bearer
from tests.integration.test_a2a import Claims, message


@dataclass
class Webhook:
    """A client's webhook on loopback: every POST it got (headers, body)."""

    url: str
    got: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    def states(self) -> list[str]:
        return [b["statusUpdate"]["status"]["state"] for _, b in self.got
                if "statusUpdate" in b]


@dataclass
class Edge:
    h: Harness
    base: str
    agent: Claims
    webhook: Webhook
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    async def client(self, user: str, *, streaming: bool = False) -> Any:
        http = httpx.AsyncClient(headers=bearer(user), timeout=60)
        self.clients.append(http)
        card = await A2ACardResolver(http, f"{self.base}/a2a/{self.agent.agent_id}"
                                     ).get_agent_card()
        return ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)
                             ).create(card)


@pytest.fixture
async def edge(make_gateway: GatewayFactory, nats: NatsServer, tmp_path: Path,
               aiohttp_server: Callable[..., Awaitable[TestServer]]) -> AsyncIterator[Edge]:
    got: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def hook(request: web.Request) -> web.Response:
        got.append((dict(request.headers), await request.json()))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app)
    h = await make_gateway(hermes_hub=True, **nats.settings(),
                           hermes_api_keys=[api_key("alice"), api_key("mallory")])
    agent = Claims()
    bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=tmp_path, **nats.settings(agent.agent_id)),
        identity=agent.agent_id)
    runner = AgentRunner(bus, agent)
    await runner.start()
    found = Edge(h, str(h.client.make_url("")).rstrip("/"), agent,
                 Webhook(f"http://127.0.0.1:{server.port}/hook", got))
    async with httpx.AsyncClient(headers=bearer("alice")) as http:
        async with asyncio.timeout(20):
            while (await http.get(f"{found.base}/a2a/{agent.agent_id}/.well-known/"
                                  "agent-card.json")).status_code != 200:
                await asyncio.sleep(0.05)
    try:
        yield found
    finally:
        agent.release.set()
        for http in found.clients:
            await http.aclose()
        await runner.stop()
        await bus.close()


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.02)


def slow(text: str = "slow claim", *, context_id: str = "", **config: Any
         ) -> pb.SendMessageRequest:
    """A message the agent holds until released, sent without waiting (with a push
    notification config when ``config`` has one)."""
    request = message(text, context_id=context_id)
    request.configuration.return_immediately = True
    if config:
        request.configuration.task_push_notification_config.CopyFrom(
            pb.TaskPushNotificationConfig(**config))
    return request


async def start(client: Any, request: pb.SendMessageRequest) -> pb.Task:
    [event] = [e async for e in client.send_message(request)]
    return event.task


async def test_a_push_notification_reaches_the_webhook_after_the_client_is_gone(
        edge: Edge) -> None:
    client = await edge.client("alice")
    task = await start(client, slow(url=edge.webhook.url, token="tok-123"))
    await client.close()
    await edge.clients.pop().aclose()  # the client is gone
    edge.agent.release.set()
    await until(lambda: "TASK_STATE_COMPLETED" in edge.webhook.states())
    headers, body = edge.webhook.got[0]
    assert headers["X-A2A-Notification-Token"] == "tok-123"
    assert body["artifactUpdate"]["taskId"] == task.id
    text = body["artifactUpdate"]["artifact"]["parts"][0]["text"]
    assert text == "claim slow claim is valid"


async def test_push_configs_are_made_read_listed_and_deleted(edge: Edge) -> None:
    client = await edge.client("alice")
    task = await start(client, slow())
    made = await client.create_task_push_notification_config(pb.TaskPushNotificationConfig(
        task_id=task.id, url=edge.webhook.url, token="t-1",
        authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="hook-secret")))
    assert made.id and made.task_id == task.id
    read = await client.get_task_push_notification_config(
        pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id))
    assert read.url == edge.webhook.url
    listed = await client.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id))
    assert [c.id for c in listed.configs] == [made.id]
    edge.agent.release.set()
    await until(lambda: "TASK_STATE_COMPLETED" in edge.webhook.states())
    assert edge.webhook.got[0][0]["Authorization"] == "Bearer hook-secret"
    await client.delete_task_push_notification_config(
        pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=made.id))
    listed = await client.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id))
    assert list(listed.configs) == []


@pytest.mark.parametrize("url", ["http://10.1.2.3/hook", "http://169.254.169.254/latest",
                                 "http://localhost:1/hook", "ftp://127.0.0.1/hook"])
async def test_a_push_url_this_deployment_may_not_call_is_refused(edge: Edge, url: str
                                                                  ) -> None:
    """The attack: a push URL pointed inside the network (the cloud metadata address, a
    private host, a loopback name the deployment did not name) is refused when given."""
    client = await edge.client("alice")
    with pytest.raises(InvalidParamsError, match="not allowed"):
        await start(client, slow(url=url))
    task = await start(client, slow())
    with pytest.raises(InvalidParamsError, match="not allowed"):
        await client.create_task_push_notification_config(pb.TaskPushNotificationConfig(
            task_id=task.id, url=url))


async def test_another_principal_never_sees_or_follows_a_task(edge: Edge) -> None:
    """The attack: mallory, with a key of his own and alice's task id, lists, reads,
    follows, cancels and subscribes a webhook to alice's task. Each is "not found"."""
    alice, mallory = await edge.client("alice"), await edge.client("mallory")
    mine = [await start(alice, slow(context_id="case-1")) for _ in range(2)]
    his = await start(mallory, slow("slow his"))
    listed = await alice.list_tasks(pb.ListTasksRequest())
    assert {t.id for t in listed.tasks} == {t.id for t in mine}
    listed = await mallory.list_tasks(pb.ListTasksRequest())
    assert [t.id for t in listed.tasks] == [his.id]
    target = mine[0].id
    for attempt in (
            mallory.get_task(pb.GetTaskRequest(id=target)),
            mallory.cancel_task(pb.CancelTaskRequest(id=target)),
            mallory.create_task_push_notification_config(pb.TaskPushNotificationConfig(
                task_id=target, url=edge.webhook.url)),
            mallory.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=target))):
        with pytest.raises(TaskNotFoundError):
            await attempt
    following = await edge.client("mallory", streaming=True)
    with pytest.raises(TaskNotFoundError):
        [e async for e in following.subscribe(pb.SubscribeToTaskRequest(id=target))]
    # A continuation naming alice's task is refused too.
    with pytest.raises(TaskNotFoundError):
        [e async for e in mallory.send_message(message("more", task_id=target))]


async def test_list_tasks_filters_and_pages(edge: Edge) -> None:
    client = await edge.client("alice")
    first = await start(client, slow(context_id="case-1"))
    second = await start(client, slow(context_id="case-2"))
    page = await client.list_tasks(pb.ListTasksRequest(page_size=1))
    assert [t.id for t in page.tasks] == [second.id] and page.total_size == 2
    assert page.next_page_token
    rest = await client.list_tasks(pb.ListTasksRequest(page_size=1,
                                                       page_token=page.next_page_token))
    assert [t.id for t in rest.tasks] == [first.id] and not rest.next_page_token
    by_context = await client.list_tasks(pb.ListTasksRequest(context_id="case-1"))
    assert [t.id for t in by_context.tasks] == [first.id]
    edge.agent.release.set()
    async with asyncio.timeout(20):
        while True:
            done = await client.list_tasks(pb.ListTasksRequest(
                status=pb.TASK_STATE_COMPLETED, include_artifacts=True))
            if len(done.tasks) == 2:
                break
            await asyncio.sleep(0.05)
    assert all(t.artifacts for t in done.tasks)
    without = await client.list_tasks(pb.ListTasksRequest())
    assert not any(t.artifacts for t in without.tasks)


async def test_subscribe_to_a_task_follows_it_to_its_end(edge: Edge) -> None:
    task = await start(await edge.client("alice"), slow())
    client = await edge.client("alice", streaming=True)
    stream = client.subscribe(pb.SubscribeToTaskRequest(id=task.id))
    first = await anext(stream)
    assert first.task.id == task.id
    edge.agent.release.set()
    rest = [e async for e in stream]
    states = [e.status_update.status.state for e in rest if e.HasField("status_update")]
    assert states[-1] == pb.TASK_STATE_COMPLETED
    assert any(e.HasField("artifact_update") for e in rest)
    with pytest.raises(UnsupportedOperationError):
        [e async for e in client.subscribe(pb.SubscribeToTaskRequest(id=task.id))]


async def test_a_push_url_is_checked_again_when_delivered(
        edge: Edge, caplog: pytest.LogCaptureFixture) -> None:
    """The attack: a webhook allowed when the config was made points inside by the time
    the task ends (its name resolves elsewhere now, or the deployment no longer names its
    host). Each delivery is vetted again: nothing is sent."""
    from gateway.api.a2a import _EDGE

    client = await edge.client("alice")
    task = await start(client, slow(url=edge.webhook.url, token="tok-1"))
    [a2a_edge] = edge.h.client.app[_EDGE]
    a2a_edge.push.hosts = []  # the deployment's HERMES_WEBHOOK_CALLBACK_HOSTS, now empty
    caplog.set_level("WARNING", logger="gateway.a2a_push")
    edge.agent.release.set()
    said = f"push notification of {task.id} not sent"
    await until(lambda: any(said in r.getMessage() for r in caplog.records))
    assert edge.webhook.got == []

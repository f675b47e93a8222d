"""The bundled NATS as a 3-server JetStream cluster (nats.replicas=3): rendered, refused
when incoherent, and run for real: three nats-server processes on the chart's nats.conf
(each pod's name as the server's, the routes' per-pod names made 127.0.0.1 and the test's
ports) and the accounts.conf the issuer Job wrote; the hub's streams created with a copy on
each server, and a server SIGKILLed while task requests are published: every request the
cluster acknowledged is still there."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.store.embedded import free_port
from hub import Bus, HubSettings
from hub.bus import REPLIES, TASKS
from hub.server import binary_path as nats_binary
from tests.standins.kubernetes_api import KubernetesAPI

from .chart import ISSUER, by_kind, env_of, mounted_files, pod_spec, pods, refusal, render
from .test_rendered_servers import HUB, YOURS, _made, _run_issuer, _started, _stop

CLUSTER = [*HUB, "--set", "nats.replicas=3", "--set", "networkPolicy.enabled=true"]
FULL = "rel-hermes-gateway"


def test_three_nats_replicas_render_a_cluster(helm: Path) -> None:
    docs = render(helm, *CLUSTER)
    nats = by_kind(docs, "StatefulSet")[f"{FULL}-nats"]
    spec = nats["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == f"{FULL}-nats-cluster"
    headless = by_kind(docs, "Service")[f"{FULL}-nats-cluster"]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"]
    anti = pod_spec(nats)["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "topologyKey"] == "kubernetes.io/hostname"
    assert by_kind(docs, "PodDisruptionBudget")[f"{FULL}-nats"]["spec"]["maxUnavailable"] == 1
    urls = ",".join(f"nats://{FULL}-nats-{i}.{FULL}-nats-cluster:4222" for i in range(3))
    for name in (FULL, f"{FULL}-hub", f"{FULL}-agent-validator"):
        env = env_of(pod_spec(pods(docs)[name])["containers"][0])
        assert env["NATS_URL"]["value"] == urls and env["HUB_REPLICAS"]["value"] == "3"
    policy = by_kind(docs, "NetworkPolicy")[f"{FULL}-nats"]["spec"]
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == [4222, 6222]
    assert [p["port"] for rule in policy["egress"] for p in rule["ports"]] == [53, 53, 6222]
    required = render(helm, *CLUSTER, "--set", "nats.antiAffinity=required")
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pod_spec(by_kind(
        required, "StatefulSet")[f"{FULL}-nats"])["affinity"]["podAntiAffinity"]
    # One server: as before (no cluster block, the Service's name).
    single = render(helm, *HUB)
    assert by_kind(single, "StatefulSet")[f"{FULL}-nats"]["spec"]["serviceName"] == \
        f"{FULL}-nats"
    assert f"{FULL}-nats" not in by_kind(single, "PodDisruptionBudget")
    assert "HUB_REPLICAS" not in env_of(pod_spec(pods(single)[FULL])["containers"][0])


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "nats.replicas=2"], "nats.replicas=2"),
    (["--set", "nats.replicas=4"], "nats.replicas=4"),
    (["--set", "nats.antiAffinity=sometimes"], "nats.antiAffinity"),
])
def test_an_incoherent_nats_cluster_is_refused(helm: Path, values: list[str],
                                               message: str) -> None:
    assert message in refusal(helm, *HUB, *values)


@pytest.fixture
async def nats_cluster(helm: Path, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The three servers, started on the rendered configuration, formed into a cluster."""
    docs = render(helm, *CLUSTER)
    role = by_kind(docs, "Role")[ISSUER]
    api = KubernetesAPI(token="the-issuers-projected-token", rules=role["rules"])
    account = tmp_path / "kubernetes"
    await api.start(account)
    try:
        code, _, err = await _run_issuer(docs, api, account, tmp_path / "issuer")
        assert code == 0, err[-2000:]
        yours = {**YOURS, **_made(api)}
    finally:
        await api.stop()
    files = mounted_files(docs, f"{FULL}-nats", yours)["/etc/nats/hermes"]
    conf = files["nats.conf"]
    assert "server_name: $POD_NAME" in conf and "cluster {" in conf
    routes = [free_port() for _ in range(3)]
    clients = [free_port() for _ in range(3)]
    servers: list[dict[str, Any]] = []
    for i in range(3):
        folder = tmp_path / f"nats-{i}"
        folder.mkdir()
        text = conf.replace('store_dir: "/data"', f'store_dir: "{folder / "js"}"')
        text = re.sub(r"(cluster \{[^}]*?port: )6222", rf"\g<1>{routes[i]}", text)
        for j in range(3):
            text = text.replace(f"{FULL}-nats-{j}.{FULL}-nats-cluster:6222",
                                f"127.0.0.1:{routes[j]}")
        (folder / "nats.conf").write_text(text)
        (folder / "accounts.conf").write_text(files["accounts.conf"])
        servers.append({"folder": folder, "port": clients[i], "log": []})
    # The pod's name, as the container's env gives it (server_name: $POD_NAME).
    env = env_of(pod_spec(by_kind(docs, "StatefulSet")[f"{FULL}-nats"])["containers"][0])
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"

    async def start(server: dict[str, Any], i: int) -> None:
        os.environ["POD_NAME"] = f"{FULL}-nats-{i}"
        try:
            server["process"] = await _started(
                str(nats_binary()), "-c", str(server["folder"] / "nats.conf"),
                "-a", "127.0.0.1", "-p", str(server["port"]), "-m", str(free_port()),
                ready="Server is ready", stderr_log=server["log"])
        finally:
            del os.environ["POD_NAME"]

    try:
        for i, server in enumerate(servers):
            await start(server, i)
        creds = tmp_path / "gateway.creds"
        creds.write_text(mounted_files(docs, FULL, yours)["/etc/hermes/secrets/chart"][
            "nats.creds"])
        yield {"servers": servers, "creds": creds, "docs": docs, "made": _made(api)}
    finally:
        for server in servers:
            if "process" in server:
                await _stop(server["process"])


async def test_the_rendered_cluster_keeps_every_acknowledged_request_when_a_server_dies(
        nats_cluster: dict[str, Any], tmp_path: Path) -> None:
    servers = nats_cluster["servers"]
    urls = ",".join(f"nats://127.0.0.1:{s['port']}" for s in servers)
    settings = HubSettings(_env_file=None, nats_url=urls,  # type: ignore[call-arg]
                           nats_creds_file=str(nats_cluster["creds"]), hub_replicas=3,
                           hermes_data_dir=tmp_path)
    async with asyncio.timeout(60):
        while True:  # the cluster elects its meta leader a moment after the servers start
            try:
                bus = await Bus.connect(settings)
                break
            except Exception:
                await asyncio.sleep(0.2)
    try:
        info = await bus.js.stream_info(TASKS)
        assert info.config.num_replicas == 3
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2
        acked: list[int] = []
        subject = bus.request_subject("validator")
        victim = next(s for s in servers
                      if s["port"] == int(bus.nc.connected_url.port or 0))  # type: ignore[union-attr]
        for n in range(200):
            if n == 60:  # the server this client talks to, mid-traffic
                victim["process"].send_signal(signal.SIGKILL)
            for _ in range(100):  # a publish refused while the client moves on is retried
                try:
                    await bus.js.publish(subject, str(n).encode(), timeout=2,
                                         headers={"Nats-Msg-Id": f"r{n}"})
                    acked.append(n)
                    break
                except Exception:
                    await asyncio.sleep(0.1)
        assert acked == list(range(200))
        state = (await bus.js.stream_info(TASKS)).state
        assert state.messages == 200, "every acknowledged request kept, none twice"
    finally:
        await bus.close()


def test_hub_replicas_is_the_charts_with_its_nats_and_yours_with_yours(helm: Path) -> None:
    assert "HUB_REPLICAS is set by the chart" in refusal(
        helm, *CLUSTER, "--set", "hub.env.HUB_REPLICAS=3")
    docs = render(helm, *HUB, "--set", "nats.enabled=false", "--set-string",
                  r"externalNats.url=nats://a:4222\,nats://b:4222\,nats://c:4222",
                  "--set", "hub.env.HUB_REPLICAS=3")
    env = env_of(pod_spec(pods(docs)[f"{FULL}-hub"])["containers"][0])
    assert env["HUB_REPLICAS"]["value"] == "3"


async def test_hub_traffic_on_the_rendered_cluster_survives_a_server_killed(
        nats_cluster: dict[str, Any], tmp_path: Path) -> None:
    """An agent answering requests and two deadline watches (two copies of the hub's
    services) on the rendered cluster, each as its own identity; the server the agent is
    connected to is SIGKILLed mid-traffic: every request answered exactly once, and a
    request nobody serves answered TIMEOUT once. Without the agent publishing its answer
    again while its client moves to another server, an answer cut off waited for the
    request's redelivery after the ack wait (30 s), past its deadline: TIMEOUT."""
    from hub import AgentRunner, TaskRequest
    from hub.deadlines import DeadlineWatch
    from hub.services import hub_services
    from hub.subjects import replies_to
    from tests.hub.test_bus import Echo

    servers, docs = nats_cluster["servers"], nats_cluster["docs"]
    urls = ",".join(f"nats://127.0.0.1:{s['port']}" for s in servers)
    agent_creds = tmp_path / "validator.creds"
    agent_creds.write_text(mounted_files(docs, f"{FULL}-agent-validator", {
        **YOURS, **nats_cluster["made"]})["/etc/hermes/secrets/chart"]["nats.creds"])

    def settings(creds: Path) -> HubSettings:
        return HubSettings(_env_file=None, nats_url=urls,  # type: ignore[call-arg]
                           nats_creds_file=str(creds), hub_replicas=3,
                           hermes_data_dir=tmp_path)

    buses: list[Bus] = []
    services: list[Any] = []
    watches: list[DeadlineWatch] = []
    runner: AgentRunner | None = None
    try:
        async with asyncio.timeout(60):
            while True:  # the meta leader is elected a moment after the servers start
                try:
                    buses.append(await Bus.connect(settings(nats_cluster["creds"])))
                    break
                except Exception:
                    await asyncio.sleep(0.2)
        buses.append(await Bus.connect(settings(nats_cluster["creds"])))
        for bus in buses:  # two copies of the hub's services (enrolment, deadlines ...)
            for service in hub_services(bus, bus.settings):
                await service.start()
                services.append(service)
                if isinstance(service, DeadlineWatch):
                    watches.append(service)
        agent_bus = await Bus.connect(settings(agent_creds), identity="validator")
        buses.append(agent_bus)
        agent = Echo("validator")
        runner = AgentRunner(agent_bus, agent)
        await runner.start()
        caller = buses[0]
        timeouts: list[Any] = []

        async def keep(msg: Any) -> None:
            timeouts.append(msg)

        lonely = TaskRequest(sender_id="lonely-caller", intent="echo", deadline_ms=3000)
        await caller.nc.subscribe(replies_to(lonely.sender_id), cb=keep)
        unanswered = asyncio.ensure_future(caller.request("summarizer", lonely))

        async def ask(n: int) -> str:
            request = TaskRequest(sender_id=f"caller-{n}", intent="echo",
                                  arguments={"n": n}, deadline_ms=30_000)
            for _ in range(50):  # a publish refused while the client moves on: again
                try:
                    response = await caller.request("validator", request)
                    return str(response.status) if response.status == "success" else \
                        f"{response.status} {response.error_code} {response.result}"
                except Exception:
                    await asyncio.sleep(0.2)
            return "never sent"

        first = await asyncio.gather(*(ask(n) for n in range(20)))
        victim = next(s for s in servers
                      if s["port"] == int(agent_bus.nc.connected_url.port or 0))  # type: ignore[union-attr]
        rest = asyncio.gather(*(ask(n) for n in range(20, 60)))
        async with asyncio.timeout(30):  # requests on their way when the server dies
            while len(agent.seen) < 30:
                await asyncio.sleep(0.005)
        victim["process"].send_signal(signal.SIGKILL)
        answers = [*first, *await rest]
        assert answers == ["success"] * 60
        assert len(set(agent.seen)) == 60, "every request handled"
        assert len(agent.seen) == 60, "and once"
        response = await unanswered
        assert response.status == "failed" and response.error_code == "TIMEOUT"
        # Whichever watch sent it (while the cluster fails over, the hub's TIMEOUT can
        # come after the caller's own fallback answered: the caller is still told once),
        # never stored twice (the 60 answers and at most one TIMEOUT), and a live
        # subscriber sees it at most once (one reconnecting misses what passed meanwhile).
        assert response.sender_id in ("hub", "hub-client"), response
        assert (await caller.js.stream_info(REPLIES)).state.messages <= 61
        await asyncio.sleep(0.5)  # a second TIMEOUT would have come by now
        assert len(timeouts) <= 1, "TIMEOUT once, from one of the two watches"
        # (a copy whose publish lost its ack counts none, though its answer was stored)
        assert sum(w.timed_out for w in watches) <= 1
    finally:
        if runner is not None:
            await runner.stop()
        for service in reversed(services):
            await service.stop()
        for bus in buses:
            await bus.close()

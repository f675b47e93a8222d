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
from hub.bus import TASKS
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
        yield {"servers": servers, "creds": creds, "docs": docs}
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

"""The chart with a store of yours past one node: a Redis Cluster's seed nodes
(externalRedis.clusterNodes) or Sentinel (externalRedis.sentinels + sentinelMaster) given
to every workload that uses the store, in plain settings (no secret in them); the
credentials stay in the URL's Secret; incoherent values refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from .chart import env_of, pod_spec, pods, refusal, render, secret_data

BASE = ["--set", "image.repository=registry.example/hermes", "--set", "valkey.enabled=false",
        "--set", "replicaCount=2"]
FULL = "rel-hermes-gateway"


def test_a_redis_cluster_of_yours_reaches_the_gateway(helm: Path) -> None:
    docs = render(helm, *BASE, "--set-string", r"externalRedis.clusterNodes=a:6379\,b:6379",
                  "--set-string", "externalRedis.url=rediss://hermes:pw@/0")
    gateway = pod_spec(pods(docs)[FULL])
    env = env_of(gateway["containers"][0])
    assert env["REDIS_CLUSTER_NODES"]["value"] == "a:6379,b:6379"
    assert "REDIS_SENTINELS" not in env and "REDIS_URL" not in env
    creds = next(d for d in docs if d["kind"] == "Secret"
                 and d["metadata"]["name"] == f"{FULL}-creds")
    assert secret_data(creds)["REDIS_URL"] == "rediss://hermes:pw@/0"
    deployment = next(d for d in docs if d["kind"] == "Deployment"
                      and d["metadata"]["name"] == FULL)
    assert "strategy" not in deployment["spec"], "a shared store: rolling updates"
    # Without credentials (a cluster with no password): the seed nodes alone will do.
    bare = render(helm, *BASE, "--set", "externalRedis.clusterNodes=a:6379")
    assert env_of(pod_spec(pods(bare)[FULL])["containers"][0])[
        "REDIS_CLUSTER_NODES"]["value"] == "a:6379"


def test_a_primary_behind_sentinel_of_yours_reaches_the_gateway(helm: Path) -> None:
    docs = render(helm, *BASE, "--set", "externalRedis.sentinels=s0:26379",
                  "--set", "externalRedis.sentinelMaster=mymaster")
    env = env_of(pod_spec(pods(docs)[FULL])["containers"][0])
    assert env["REDIS_SENTINELS"]["value"] == "s0:26379"
    assert env["REDIS_SENTINEL_MASTER"]["value"] == "mymaster"
    assert "REDIS_CLUSTER_NODES" not in env


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "externalRedis.sentinels=s:1"], "sentinelMaster go together"),
    (["--set", "externalRedis.sentinelMaster=m"], "sentinelMaster go together"),
    (["--set", "externalRedis.sentinels=s:1", "--set", "externalRedis.sentinelMaster=m",
      "--set", "externalRedis.clusterNodes=a:1"], "not both"),
    (["--set", "env.REDIS_CLUSTER_NODES=a:1"], "REDIS_CLUSTER_NODES is set by the chart"),
    (["--set", "valkey.enabled=true", "--set", "externalRedis.clusterNodes=a:1"],
     "valkey.enabled and externalRedis"),
])
def test_an_incoherent_store_of_yours_is_refused(helm: Path, values: list[str],
                                                 message: str) -> None:
    assert message in refusal(helm, *BASE, *values)

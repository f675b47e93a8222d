"""The Helm chart: lint, render and validate against the Kubernetes schemas, for the
defaults and every documented variant (helm/hermes-gateway/examples); what an install
runs (one shared store, the hub's bus, agents) and what it refuses at render time."""

from __future__ import annotations

import base64
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from .conftest import CACHE, CHART

#: The oldest Kubernetes the chart supports, and the newest the validator knows.
KUBERNETES = ["1.29.0", kubernetes_validate.latest_version()]
IMAGE = ["--set", "image.repository=registry.example.com/hermes-gateway"]
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
#: Variants: the defaults (plus the one required value) and every documented example.
VARIANTS = {"defaults": IMAGE, **{p.stem: ["-f", str(p)] for p in EXAMPLES}}
#: Kinds of the Prometheus Operator, not in the Kubernetes schemas: checked by hand below.
CUSTOM_KINDS = {"ServiceMonitor"}


def _helm(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    home = CACHE / "home"
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env,
                            timeout=120, check=False)
    if check and result.returncode:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    out = _helm(helm, "template", "rel", str(CHART), "--namespace", "hermes", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def refusal(helm: Path, *args: str) -> str:
    result = _helm(helm, "template", "rel", str(CHART), *args, check=False)
    assert result.returncode != 0, "rendered values the chart must refuse"
    return result.stderr


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], c) for d in docs if d["kind"] in ("Deployment", "StatefulSet")
            for c in d["spec"]["template"]["spec"]["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def pod_labels(doc: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = doc["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("variant", VARIANTS)
def test_lint_passes(helm: Path, variant: str) -> None:
    result = _helm(helm, "lint", "--strict", str(CHART), *VARIANTS[variant])
    assert "0 chart(s) failed" in result.stdout, result.stdout


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_manifest_is_valid_and_consistent(helm: Path, variant: str) -> None:
    docs = render(helm, *VARIANTS[variant])
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        for version in KUBERNETES:
            kubernetes_validate.validate(doc, version, strict=True)
    secrets = set(by_kind(docs, "Secret"))
    workloads = by_kind(docs, "Deployment") | by_kind(docs, "StatefulSet")
    for name, container in containers(docs):
        # No setting given twice (the last would silently win).
        names = [e["name"] for e in container.get("env", [])]
        assert len(names) == len(set(names)), f"{name}: {names}"
        # $(VAR) refers to a variable defined before it in the same container.
        for i, e in enumerate(container.get("env", [])):
            for ref in re.findall(r"\$\((\w+)\)", e.get("value", "")):
                assert ref in names[:i], f"{name}: {e['name']} uses $({ref}) before it is set"
        for arg in container.get("args", []):
            for ref in re.findall(r"\$\((\w+)\)", arg):
                assert ref in names, f"{name}: an argument uses $({ref}), which is not set"
        # Secrets the chart names are rendered, unless the values name a Secret of yours.
        for e in container.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["name"].startswith("rel-"):
                assert ref["name"] in secrets, f"{name}: {ref['name']} is not rendered"
    # Each Service and PodDisruptionBudget selects the pods of one workload, and only them.
    selecting = [*by_kind(docs, "Service").values(),
                 *by_kind(docs, "PodDisruptionBudget").values()]
    for svc in selecting:
        selector = svc["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        chosen = [w for w, d in workloads.items()
                  if selector.items() <= pod_labels(d).items()]
        assert len(chosen) == 1, f"{svc['kind']} {svc['metadata']['name']} selects {chosen}"


def test_the_default_install_shares_one_valkey_with_a_generated_password(helm: Path) -> None:
    docs = render(helm, *IMAGE)
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    assert gateway["spec"]["replicas"] == 2
    valkey = by_kind(docs, "StatefulSet")["rel-hermes-gateway-valkey"]
    claim = valkey["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    mounted = valkey["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in mounted
    args = valkey["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--requirepass" in args and "$(VALKEY_PASSWORD)" in args
    assert args[args.index("--appendonly") + 1] == "yes"
    secret = by_kind(docs, "Secret")["rel-hermes-gateway-valkey"]
    password = base64.b64decode(secret["data"]["password"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password)
    # Another render (a fresh install) draws another password: it is not a constant.
    again = by_kind(render(helm, *IMAGE), "Secret")["rel-hermes-gateway-valkey"]
    assert again["data"]["password"] != secret["data"]["password"]
    env = env_of(gateway["spec"]["template"]["spec"]["containers"][0])
    assert env["VALKEY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "rel-hermes-gateway-valkey", "key": "password"}
    service = by_kind(docs, "Service")["rel-hermes-gateway-valkey"]
    assert env["REDIS_URL"]["value"] == (
        f"redis://:$(VALKEY_PASSWORD)@{service['metadata']['name']}:"
        f"{service['spec']['ports'][0]['port']}/0")
    assert "HERMES_HUB" not in env and "nats" not in " ".join(by_kind(docs, "StatefulSet"))
    pdb = by_kind(docs, "PodDisruptionBudget")["rel-hermes-gateway"]
    assert pdb["spec"]["minAvailable"] == 1
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert gateway["spec"]["template"]["spec"]["containers"][0]["image"] == \
        f"registry.example.com/hermes-gateway:{app_version}"


def test_a_single_replica_without_a_shared_store_never_runs_two_pods(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "single-replica.yaml"))
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    assert gateway["spec"]["replicas"] == 1
    assert gateway["spec"]["strategy"] == {"type": "Recreate"}
    assert "REDIS_URL" not in env_of(gateway["spec"]["template"]["spec"]["containers"][0])
    assert not by_kind(docs, "StatefulSet") and not by_kind(docs, "PodDisruptionBudget")
    claim = by_kind(docs, "PersistentVolumeClaim")["rel-hermes-gateway"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_an_external_store_from_a_secret_and_an_autoscaler(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "external-redis.yaml"))
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    assert "replicas" not in gateway["spec"]  # the autoscaler's
    assert "strategy" not in gateway["spec"]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert env_of(container)["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "hermes-redis", "key": "url"}
    assert container["envFrom"] == [{"secretRef": {"name": "hermes-settings"}}]
    assert not by_kind(docs, "StatefulSet")
    hpa = by_kind(docs, "HorizontalPodAutoscaler")["rel-hermes-gateway"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "rel-hermes-gateway"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    assert "rel-hermes-gateway" in by_kind(docs, "PodDisruptionBudget")
    monitor = by_kind(docs, "ServiceMonitor")["rel-hermes-gateway"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
    assert endpoint["bearerTokenSecret"] == {"name": "hermes-metrics", "key": "token"}
    service = by_kind(docs, "Service")["rel-hermes-gateway"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert "http" in [p["name"] for p in service["spec"]["ports"]]


def test_an_external_store_url_goes_into_a_secret_not_the_pod_spec(helm: Path) -> None:
    url = "rediss://:pw@redis.internal:6380/0"
    docs = render(helm, *IMAGE, "--set", "valkey.enabled=false",
                  "--set", f"externalRedis.url={url}")
    assert by_kind(docs, "Secret")["rel-hermes-gateway-redis"]["stringData"] == {
        "REDIS_URL": url}
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    assert url not in yaml.safe_dump(gateway)


def test_the_hub_runs_on_a_bundled_nats_with_its_agents(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "hub.yaml"))
    deployments = by_kind(docs, "Deployment")
    nats = by_kind(docs, "StatefulSet")["rel-hermes-gateway-nats"]
    nats_args = nats["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--jetstream" in nats_args and nats_args[nats_args.index("--store_dir") + 1] == "/data"
    assert nats["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    nats_image = nats["spec"]["template"]["spec"]["containers"][0]["image"]
    major, minor = (int(x) for x in re.search(r":(\d+)\.(\d+)", nats_image).groups())  # type: ignore[union-attr]
    assert (major, minor) >= (2, 11), "per-message TTL needs nats-server 2.11"
    for name in ("rel-hermes-gateway", "rel-hermes-gateway-hub",
                 "rel-hermes-gateway-agent-validator", "rel-hermes-gateway-agent-summarizer"):
        env = env_of(deployments[name]["spec"]["template"]["spec"]["containers"][0])
        assert env["HERMES_HUB"]["value"] == "true", name
        assert env["NATS_URL"]["value"] == "nats://$(NATS_TOKEN)@rel-hermes-gateway-nats:4222"
        assert "REDIS_URL" in env, name
    hub = deployments["rel-hermes-gateway-hub"]["spec"]["template"]["spec"]["containers"][0]
    assert hub["args"] == ["hub", "run"]
    validator = deployments["rel-hermes-gateway-agent-validator"]
    assert validator["spec"]["replicas"] == 2
    assert validator["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "agent", "--id", "validator", "--capabilities", "validate_claim", "--instructions",
        "You check insurance claims against the policy and say what is missing."]
    summarizer = deployments["rel-hermes-gateway-agent-summarizer"]["spec"]["template"][
        "spec"]["containers"][0]
    assert summarizer["args"] == ["agent", "--id", "summarizer", "--capabilities", "summary",
                                  "--tools", "tools.recall", "--model", "gpt-4o"]
    assert summarizer["envFrom"] == [{"secretRef": {"name": "rel-hermes-gateway"}},
                                     {"secretRef": {"name": "summarizer-model-key"}}]


def test_every_deployment_is_scheduled_by_the_same_values(helm: Path, tmp_path: Path) -> None:
    placement = {"nodeSelector": {"pool": "agents"},
                 "tolerations": [{"key": "spot", "operator": "Exists"}],
                 "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}
    values = tmp_path / "placement.yaml"
    values.write_text(yaml.safe_dump(placement))
    docs = render(helm, "-f", str(CHART / "examples" / "hub.yaml"), "-f", str(values))
    deployments = by_kind(docs, "Deployment")
    assert len(deployments) == 4  # the gateway, the hub and two agents
    for name, deployment in deployments.items():
        spec = deployment["spec"]["template"]["spec"]
        assert {k: spec.get(k) for k in placement} == placement, name


def test_an_external_nats(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "external-nats.yaml"))
    assert "rel-hermes-gateway-nats" not in by_kind(docs, "StatefulSet")
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    env = env_of(gateway["spec"]["template"]["spec"]["containers"][0])
    assert env["NATS_URL"]["value"].startswith("tls://nats-0.nats.internal:4222,")
    assert "NATS_TOKEN" not in env


@pytest.mark.parametrize(("values", "says"), [
    ([], "image.repository is not set"),
    ([*IMAGE, "--set", "valkey.enabled=false"], "no shared store"),
    ([*IMAGE, "--set", "valkey.enabled=false", "--set", "autoscaling.enabled=true"],
     "no shared store"),
    ([*IMAGE, "--set", "externalRedis.url=redis://r:6379"], "set valkey.enabled=false"),
    ([*IMAGE, "--set", "secrets.REDIS_URL=redis://r:6379"], "use externalRedis.url"),
    ([*IMAGE, "--set", "env.NATS_URL=nats://n:4222"], "use externalNats.url"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "nats.enabled=false"],
     "hub.enabled needs one NATS server"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "externalNats.url=nats://n:4222"],
     "set nats.enabled=false"),
    ([*IMAGE, "--set", "hub.agents[0].id=a", "--set", "hub.agents[0].capabilities={x}"],
     "set hub.enabled=true"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.agents[0].id=a"],
     "hub.agents[0] (a) has no capabilities"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.agents[0].id=Bad_Id",
      "--set", "hub.agents[0].capabilities={x}"], "hub.agents[0].id \"Bad_Id\""),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.agents[0].id=a", "--set",
      "hub.agents[0].capabilities={x}", "--set", "hub.agents[1].id=a", "--set",
      "hub.agents[1].capabilities={y}"], "the id \"a\" is used twice"),
    ([*IMAGE, "--set", "persistence.enabled=true", "--set",
      "persistence.accessMode=ReadWriteOnce"], "must be ReadWriteMany"),
    ([*IMAGE, "--set", "autoscaling.enabled=true", "--set", "autoscaling.minReplicas=5",
      "--set", "autoscaling.maxReplicas=3"], "minReplicas is above"),
    ([*IMAGE, "--set", "metrics.serviceMonitor.enabled=true"], "needs a bearer token"),
])
def test_unsafe_values_fail_at_render_time_saying_what_to_set(
        helm: Path, values: list[str], says: str) -> None:
    assert says in refusal(helm, *values)

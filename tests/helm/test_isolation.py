"""What each pod of an install can read and reach (issue 38, item 10). The attacker here
holds one pod: a hub agent whose model obeyed injected text and runs what it is told, or
any other workload of the cluster. From the rendered manifests, everything that pod's
processes can read (environment, arguments, mounted secret files) and every connection
the NetworkPolicies let it make is worked out, and must give it nothing beyond its job."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from .chart import (
    IMAGE,
    ISSUER,
    VARIANTS,
    by_kind,
    env_of,
    issued,
    issuer_args,
    mounted_files,
    pod_labels,
    pod_spec,
    pods,
    readable,
    render,
    secret_data,
    secret_sources,
)
from .conftest import CHART

HUB = ["-f", str(CHART / "examples" / "hub.yaml")]
#: The gateway's secret settings: what only the gateway may hold.
GATEWAY_ONLY = {
    "SLACK_BOT_TOKEN": "xoxb-gateway-only-1", "SLACK_SIGNING_SECRET": "slack-signing-only-2",
    "SLACK_APP_TOKEN": "xapp-gateway-only-3", "TELEGRAM_BOT_TOKEN": "123:telegram-only-4",
    "TELEGRAM_WEBHOOK_SECRET": "tg-webhook-only-5", "HERMES_API_KEYS": '["api-key-only-6"]',
    "HERMES_WEBHOOK_SECRETS": '{"crm": "webhook-only-7"}'}
MODEL_KEY = "sk-the-model-key-8"
#: The same, from a Secret of yours (existingSecret).
YOURS = {"hermes-settings": {**GATEWAY_ONLY, "LLM_API_KEY": MODEL_KEY},
         "summarizer-model-key": {"LLM_API_KEY": "sk-summarizer-9"}}
RAG = ["--set-string", "hub.env.HUB_RAG=true"]


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Values giving the gateway's secret settings in `secrets:` (the chart's Secret)."""
    path = tmp_path_factory.mktemp("values") / "secrets.yaml"
    path.write_text(yaml.safe_dump({"secrets": {**GATEWAY_ONLY, "LLM_API_KEY": MODEL_KEY}}))
    return ["-f", str(path)]


def _leaks(found: dict[str, str], secrets: dict[str, str]) -> list[str]:
    """Which of ``secrets`` (by name) the readable ``found`` holds, and where."""
    return [f"{where} holds {name}" for where, value in found.items()
            for name, secret in secrets.items() if secret in value]


def _holds(found: dict[str, str], secret: str) -> bool:
    return any(secret in value for value in found.values())


@pytest.mark.parametrize("rag", [False, True], ids=["no-rag", "rag"])
@pytest.mark.parametrize("existing", [False, True], ids=["secrets", "existing-secret"])
def test_a_hub_or_agent_pod_reads_no_secret_of_the_gateway(
        helm: Path, secrets: list[str], existing: bool, rag: bool) -> None:
    """Every hub and agent pod once had every gateway secret (envFrom) plus the store's
    password and the bus token: now one holds its own NATS credentials, the model's key if
    it calls the model, and the store's URL only if it reads the store."""
    docs = render(helm, *HUB, *(["--set", "existingSecret=hermes-settings"] if existing
                                else secrets), *(RAG if rag else []))
    hub_pods = ("rel-hermes-gateway-hub", "rel-hermes-gateway-agent-validator",
                "rel-hermes-gateway-agent-summarizer", "rel-hermes-gateway-schemas")
    # No channel token, API key or webhook secret of the gateway's, anywhere in them.
    for name in hub_pods:
        assert _leaks(readable(docs, name, YOURS), GATEWAY_ONLY) == [], name
    valkey = secret_data(by_kind(docs, "Secret")["rel-hermes-gateway-valkey"])["password"]
    creds = {secret: data["nats.creds"] for secret, data in issued(docs).items()
             if "nats.creds" in data}
    gateway = readable(docs, "rel-hermes-gateway", YOURS)
    # The gateway holds all it needs (so the checks below look in the right places).
    for secret in (*GATEWAY_ONLY.values(), MODEL_KEY, valkey,
                   creds["rel-hermes-gateway-nats-creds"]):
        assert _holds(gateway, secret)
    for name in hub_pods:
        found = readable(docs, name, YOURS)
        own = f"{name}-nats-creds"
        # The hub's pod runs the bridges too, as `bridge`, from a Secret of its own.
        mine = (own, f"{name}-bridge-nats-creds")
        others = {f"the NATS credentials in {s}": c for s, c in creds.items()
                  if s not in mine}
        assert _leaks(found, others) == [], name
        bridge = creds.get(mine[1])
        assert (bridge is not None and _holds(found, bridge)) == name.endswith("-hub"), \
            f"{name}: the bridge"
        assert _holds(found, creds[own]), f"{name}: its own NATS credentials"
        assert _holds(found, valkey) == (rag and name.endswith("-hub")), f"{name}: the store"
        if name.endswith("-summarizer"):  # its own model key (its existingSecret) only
            assert _holds(found, "sk-summarizer-9") and not _holds(found, MODEL_KEY)
        else:  # the gateway's model key, when it calls the model
            calls = name.endswith("-validator") or (rag and name.endswith("-hub"))
            assert _holds(found, MODEL_KEY) == calls, f"{name}: the model"
        # Nothing secret in the environment or the arguments: files only.
        container = pod_spec(pods(docs)[name])["containers"][0]
        assert "envFrom" not in container, name
        assert all("valueFrom" not in e for e in container["env"]), name


def test_only_the_issuer_job_holds_the_keys_that_sign_the_bus_credentials(
        helm: Path, secrets: list[str]) -> None:
    """Whoever holds the account's key can make any identity (the core's included), so no
    workload may read it: the issuer Job keeps it in a Secret that no pod mounts, and its
    Role reaches the Secrets it makes and nothing else."""
    docs = render(helm, *HUB, *secrets)
    made = issuer_args(docs)
    seeds = issued(docs)[made["authority"]]
    for name in pods(docs):
        assert _leaks(readable(docs, name, YOURS), seeds) == [], name
        assert made["authority"] not in [s["name"] for s in secret_sources(pods(docs)[name])]
    # The issuer itself mounts no Secret and has nothing secret in its spec: it reads and
    # writes its own through the API.
    assert secret_sources(by_kind(docs, "Job")[ISSUER]) == []
    [role] = by_kind(docs, "Role").values()
    assert role["metadata"]["name"] == ISSUER and not by_kind(docs, "ClusterRole")
    named = {made["authority"], made["accounts"], *made["grants"]}
    assert [{k: v for k, v in rule.items() if k != "resourceNames"}
            for rule in role["rules"]] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    # Reading or replacing by name only (RBAC cannot limit a create by name).
    assert set(role["rules"][0]["resourceNames"]) == named
    assert "resourceNames" not in role["rules"][1]
    assert "rel-hermes-gateway" not in named and "rel-hermes-gateway-valkey" not in named
    [binding] = by_kind(docs, "RoleBinding").values()
    assert binding["roleRef"]["name"] == ISSUER
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ISSUER,
                                    "namespace": "hermes"}]


def test_no_model_keys_shared_means_no_key_of_the_gateways_secret(
        helm: Path, secrets: list[str]) -> None:
    """An empty hub.sharedSecretKeys must not project the whole Secret (a projected
    Secret with no items is all of its keys)."""
    docs = render(helm, *HUB, *secrets, "--set", "hub.sharedSecretKeys=null")
    found = readable(docs, "rel-hermes-gateway-agent-validator")
    assert _leaks(found, {**GATEWAY_ONLY, "model": MODEL_KEY}) == []
    assert "/etc/hermes/secrets/settings" not in mounted_files(
        docs, "rel-hermes-gateway-agent-validator")


def _tokens(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes API tokens a pod's volumes project."""
    return [source["serviceAccountToken"] for volume in pod_spec(doc).get("volumes", [])
            for source in volume.get("projected", {}).get("sources", [])
            if "serviceAccountToken" in source]


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_pod_but_the_issuer_holds_a_kubernetes_api_token(helm: Path, variant: str) -> None:
    """No pod talks to the Kubernetes API but the bundled NATS's issuer Job, which holds a
    token of its own service account, projected and short-lived, while it runs."""
    for extra, account in ([], "rel-hermes-gateway"), \
            (["--set", "serviceAccount.create=false"], "default"):
        docs = render(helm, *VARIANTS[variant], *extra)
        issuer = ISSUER in by_kind(docs, "Job")
        accounts = by_kind(docs, "ServiceAccount")
        assert sorted(accounts) == sorted([*([account] if not extra else []),
                                           *([ISSUER] if issuer else [])])
        for name, doc in accounts.items():
            assert doc["automountServiceAccountToken"] is False, name
        assert pods(docs)
        for name, doc in pods(docs).items():
            spec = pod_spec(doc)
            assert spec["automountServiceAccountToken"] is False, name
            if name == ISSUER:
                assert spec["serviceAccountName"] == ISSUER
                [token] = _tokens(doc)
                assert token["expirationSeconds"] <= 600
            else:
                assert spec["serviceAccountName"] == account, name
                assert _tokens(doc) == [], name


def _expand(arg: str, env: dict[str, str]) -> str:
    """An argument as the kubelet passes it: $(VAR) replaced by the variable's value."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), arg)


def test_no_credential_is_an_argument_or_an_environment_value(
        helm: Path, secrets: list[str]) -> None:
    """The bus token was on nats-server's command line (`--auth $(NATS_TOKEN)`, expanded by
    the kubelet) and the store's password on Valkey's (`--requirepass`): in every process
    listing, and with the settings in every process's environment (/proc/<pid>/environ)."""
    docs = render(helm, *HUB, *secrets)
    generated = {f"{k} of {name}": v for name, doc in by_kind(docs, "Secret").items()
                 if name == "rel-hermes-gateway-valkey"
                 for k, v in secret_data(doc).items() if k == "password"}
    generated |= {f"{k} of {name}": v for name, data in issued(docs).items()
                  for k, v in data.items()}
    assert len(generated) > 5
    secrets_ = {**generated, **GATEWAY_ONLY, "model": MODEL_KEY}
    leaks = []
    for name, doc in pods(docs).items():
        found = readable(docs, name, YOURS)  # the environment with its references resolved
        for container in pod_spec(doc)["containers"]:
            env = {e["name"]: found[e["name"]] for e in container.get("env", [])}
            shown = {f"{name}: argument {a!r}": _expand(a, env)
                     for a in container.get("args", [])}
            shown |= {f"{name}: variable {k}": v for k, v in env.items()}
            leaks += _leaks(shown, secrets_)
    assert leaks == []
    nats = pod_spec(by_kind(docs, "StatefulSet")["rel-hermes-gateway-nats"])["containers"][0]
    assert nats["args"] == ["--config", "/etc/nats/hermes/nats.conf"] and "env" not in nats


def test_the_nats_monitoring_port_stays_inside_its_pod(helm: Path) -> None:
    """Monitoring (/connz lists every client, /varz the configuration) was open to the
    cluster on 8222: now it listens on the pod's loopback, probed from inside."""
    docs = render(helm, *HUB)
    nats = pod_spec(by_kind(docs, "StatefulSet")["rel-hermes-gateway-nats"])["containers"][0]
    assert [p["containerPort"] for p in nats["ports"]] == [4222]
    assert [p["port"] for p in by_kind(docs, "Service")["rel-hermes-gateway-nats"]["spec"][
        "ports"]] == [4222]
    config = mounted_files(docs, "rel-hermes-gateway-nats")["/etc/nats/hermes"]["nats.conf"]
    assert 'http: "127.0.0.1:8222"' in config
    for probe in ("readinessProbe", "livenessProbe"):
        command = nats[probe]["exec"]["command"]
        assert command[-1] == "http://127.0.0.1:8222/healthz?js-enabled-only=true"
    assert not _allowed_in(docs, "nats", _pod(docs, "gateway"), 8222)


# --- NetworkPolicy -------------------------------------------------------------------

Peer = dict[str, Any]


def _pod(docs: list[dict[str, Any]], component: str) -> Peer:
    """A pod of this release, by its component ("stranger": another workload's pod)."""
    if component == "stranger":
        return {"labels": {"app": "something-else"}}
    for doc in pods(docs).values():
        if pod_labels(doc).get("app.kubernetes.io/component") == component:
            return {"labels": pod_labels(doc)}
    raise AssertionError(f"no {component} pod")


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def _peer_matches(peer: dict[str, Any], target: Peer) -> bool:
    if "ipBlock" in peer:  # cluster pods are reached through selectors, not addresses
        if "ip" not in target:
            return False
        ip = ipaddress.ip_address(target["ip"])
        block = peer["ipBlock"]
        return (ip in ipaddress.ip_network(block["cidr"])
                and not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])))
    if "labels" not in target:
        return False
    return _matches(peer.get("podSelector", {}), target["labels"])


def _rule_allows(rule: dict[str, Any], key: str, target: Peer, port: int,
                 protocol: str) -> bool:
    ports = rule.get("ports")
    if ports is not None and not any(p["port"] == port and p.get("protocol", "TCP") ==
                                     protocol for p in ports):
        return False
    peers = rule.get(key)
    return peers is None or any(_peer_matches(p, target) for p in peers)


def _policies(docs: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    return [p for p in by_kind(docs, "NetworkPolicy").values()
            if _matches(p["spec"]["podSelector"], labels)]


def _allowed_in(docs: list[dict[str, Any]], component: str, source: Peer, port: int) -> bool:
    policies = _policies(docs, _pod(docs, component)["labels"])
    assert policies, f"no NetworkPolicy selects the {component} pods"
    return any(_rule_allows(r, "from", source, port, "TCP")
               for p in policies for r in p["spec"].get("ingress") or [])


def _allowed_out(docs: list[dict[str, Any]], component: str, target: Peer, port: int,
                 protocol: str = "TCP") -> bool:
    policies = _policies(docs, _pod(docs, component)["labels"])
    assert policies, f"no NetworkPolicy selects the {component} pods"
    return any(_rule_allows(r, "to", target, port, protocol)
               for p in policies for r in p["spec"].get("egress") or [])


INTERNET = {"ip": "203.0.113.7"}  # an address outside the cluster (model API, Slack)
CLUSTER = {"ip": "10.0.4.2"}  # the cluster's private range: another pod, the API server
METADATA = {"ip": "169.254.169.254"}  # the cloud's instance metadata


def test_a_network_policy_is_on_by_default_and_allows_only_each_workloads_job(
        helm: Path, tmp_path: Path) -> None:
    docs = render(helm, *HUB)
    for name, doc in pods(docs).items():
        chosen = _policies(docs, pod_labels(doc))
        assert len(chosen) == 1, f"{name}: {[p['metadata']['name'] for p in chosen]}"
        assert sorted(chosen[0]["spec"]["policyTypes"]) == ["Egress", "Ingress"], name
    stranger, gateway = _pod(docs, "stranger"), _pod(docs, "gateway")
    hub, agent = _pod(docs, "hub"), _pod(docs, "agent-validator")
    # Ingress: the gateway's HTTP port from anywhere; the store and NATS only from the
    # workloads that use them; the hub and agents from nobody.
    assert _allowed_in(docs, "gateway", stranger, 8080)
    assert _allowed_in(docs, "gateway", {"ip": "203.0.113.9"}, 8080)
    assert not _allowed_in(docs, "gateway", stranger, 9090)
    assert _allowed_in(docs, "valkey", gateway, 6379)
    for other in (stranger, agent, hub):
        assert not _allowed_in(docs, "valkey", other, 6379)
    for client in (gateway, hub, agent):
        assert _allowed_in(docs, "nats", client, 4222)
    assert not _allowed_in(docs, "nats", stranger, 4222)
    for component in ("hub", "agent-validator"):
        for port in (8080, 4222, 6379):
            assert not _allowed_in(docs, component, stranger, port)
            assert not _allowed_in(docs, component, gateway, port)
    # Egress: DNS everywhere; the store and NATS where used; outside for the gateway and
    # agents, never the cluster's private ranges or the cloud's metadata.
    for component in ("gateway", "hub", "agent-validator"):
        assert _allowed_out(docs, component, {"ip": "10.96.0.10"}, 53, "UDP"), component
        assert _allowed_out(docs, component, _pod(docs, "nats"), 4222), component
        assert not _allowed_out(docs, component, _pod(docs, "nats"), 8222), component
        assert not _allowed_out(docs, component, CLUSTER, 443), component
        assert not _allowed_out(docs, component, METADATA, 80), component
        assert not _allowed_out(docs, component, stranger, 8080), component
    assert _allowed_out(docs, "gateway", _pod(docs, "valkey"), 6379)
    assert not _allowed_out(docs, "agent-validator", _pod(docs, "valkey"), 6379)
    assert not _allowed_out(docs, "hub", _pod(docs, "valkey"), 6379)
    assert _allowed_out(docs, "gateway", INTERNET, 443)
    assert _allowed_out(docs, "agent-validator", INTERNET, 443)
    assert not _allowed_out(docs, "hub", INTERNET, 443)  # no model, no tools: no need
    for server in ("valkey", "nats"):
        assert not _allowed_out(docs, server, INTERNET, 443), server
        assert not _allowed_out(docs, server, stranger, 80), server
    # The Jobs: the schema admin's reaches NATS only; the issuer the Kubernetes API only
    # (ports 443 and 6443, wherever the API server is); neither takes a connection.
    schemas, issuer = _pod(docs, "schemas"), _pod(docs, "nats-issuer")
    assert _allowed_in(docs, "nats", schemas, 4222)
    assert not _allowed_in(docs, "nats", issuer, 4222)
    for component in ("schemas", "nats-issuer"):
        assert not _allowed_in(docs, component, gateway, 8080), component
        assert _allowed_out(docs, component, {"ip": "10.96.0.10"}, 53, "UDP"), component
        assert not _allowed_out(docs, component, _pod(docs, "valkey"), 6379), component
        assert not _allowed_out(docs, component, METADATA, 80), component
    assert _allowed_out(docs, "schemas", _pod(docs, "nats"), 4222)
    assert not _allowed_out(docs, "schemas", INTERNET, 443)
    assert not _allowed_out(docs, "schemas", CLUSTER, 443)
    assert not _allowed_out(docs, "nats-issuer", _pod(docs, "nats"), 4222)
    assert _allowed_out(docs, "nats-issuer", CLUSTER, 443)
    assert _allowed_out(docs, "nats-issuer", CLUSTER, 6443)
    # networkPolicy.apiServer.to narrows it to the API server's address.
    narrowed = render(helm, *HUB, "-f", str(_values(tmp_path, {"networkPolicy": {
        "apiServer": {"ports": [6443], "to": [{"ipBlock": {"cidr": "10.0.4.2/32"}}]}}})))
    assert _allowed_out(narrowed, "nats-issuer", CLUSTER, 6443)
    assert not _allowed_out(narrowed, "nats-issuer", CLUSTER, 443)
    assert not _allowed_out(narrowed, "nats-issuer", {"ip": "10.0.4.3"}, 6443)
    assert not _allowed_out(narrowed, "nats-issuer", INTERNET, 6443)


def _values(directory: Path, values: dict[str, Any]) -> Path:
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_a_hub_that_calls_a_model_reaches_out_and_the_internet_can_be_closed(
        helm: Path) -> None:
    docs = render(helm, *HUB, *RAG)
    assert _allowed_out(docs, "hub", INTERNET, 443)
    assert _allowed_out(docs, "hub", _pod(docs, "valkey"), 6379)
    assert _allowed_in(docs, "valkey", _pod(docs, "hub"), 6379)
    docs = render(helm, *HUB, "--set-string", "hub.env.HUB_TOOLS=http_fetch")
    assert _allowed_out(docs, "hub", INTERNET, 443)
    assert not _allowed_out(docs, "hub", _pod(docs, "valkey"), 6379)
    # Remote A2A agents: the hub's bridges call them; without any, the hub stays inside.
    assert not _allowed_out(render(helm, *HUB), "hub", INTERNET, 443)
    docs = render(helm, *HUB, "--set-string",
                  "hub.env.HUB_A2A_AGENTS=https://agents.example.com/card.json")
    assert _allowed_out(docs, "hub", INTERNET, 443)
    closed = render(helm, *HUB, *RAG, "--set", "networkPolicy.egress.internet=false")
    for component in ("gateway", "hub", "agent-validator"):
        assert not _allowed_out(closed, component, INTERNET, 443), component
        assert _allowed_out(closed, component, _pod(closed, "nats"), 4222), component


def test_the_network_policy_takes_your_peers_and_extra_rules(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "external-redis.yaml"))
    policy = by_kind(docs, "NetworkPolicy")["rel-hermes-gateway"]
    assert policy["spec"]["ingress"][0]["from"] == [{"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    assert _allowed_out(docs, "gateway", {"ip": "10.20.3.4"}, 6380)  # your Redis
    assert not _allowed_out(docs, "gateway", {"ip": "10.20.3.4"}, 22)
    off = render(helm, *IMAGE, "--set", "networkPolicy.enabled=false")
    assert not by_kind(off, "NetworkPolicy")


def test_the_gateway_alone_gets_environment_copies_it_asks_for(
        helm: Path, secrets: list[str]) -> None:
    """secretEnv: keys the gateway also needs as variables (software that reads only the
    environment); never given to hub pods."""
    docs = render(helm, *HUB, *secrets, "--set", "secretEnv={SLACK_BOT_TOKEN}")
    env = env_of(pod_spec(by_kind(docs, "Deployment")["rel-hermes-gateway"])["containers"][0])
    assert env["SLACK_BOT_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "rel-hermes-gateway", "key": "SLACK_BOT_TOKEN"}
    agent = readable(docs, "rel-hermes-gateway-agent-validator")
    assert _leaks(agent, GATEWAY_ONLY) == []


def test_remote_a2a_credentials_reach_the_bridges_only(helm: Path) -> None:
    """hub.a2aAgentsSecret: the remote A2A agents' list with their credentials is read by
    the gateway and the hub (whose bridges call them), as their setting HUB_A2A_AGENTS, and
    by no agent pod; the hub may then reach the internet."""
    listed = "- url: https://agents.example.com/claims\n  bearer: tok-remote-a2a-10\n"
    yours = {**YOURS, "remote-a2a": {"HUB_A2A_AGENTS": listed}}
    docs = render(helm, *HUB, "--set", "hub.a2aAgentsSecret=remote-a2a")
    for name in ("rel-hermes-gateway", "rel-hermes-gateway-hub"):
        files = mounted_files(docs, name, yours)["/etc/hermes/secrets/chart"]
        assert files["HUB_A2A_AGENTS"] == listed, name
        env = env_of(pod_spec(pods(docs)[name])["containers"][0])
        assert "/etc/hermes/secrets/chart" in env["HERMES_SECRETS_DIR"]["value"], name
    for name in ("rel-hermes-gateway-agent-validator", "rel-hermes-gateway-agent-summarizer"):
        assert not _holds(readable(docs, name, yours), "tok-remote-a2a-10"), name
    assert _allowed_out(docs, "hub", INTERNET, 443)

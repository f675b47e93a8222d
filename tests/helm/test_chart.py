"""The Helm chart: lint, render and validate against the Kubernetes schemas, for the
defaults and every documented variant (helm/hermes-gateway/examples); what an install
runs (one shared store, the hub's bus, agents) and what it refuses at render time."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from .chart import (
    CUSTOM_KINDS,
    IMAGE,
    KUBERNETES,
    VARIANTS,
    by_kind,
    containers,
    env_of,
    issued,
    issuer_args,
    mounted_files,
    pod_labels,
    pod_spec,
    pods,
    refusal,
    render,
    run_helm,
    secret_data,
    secret_sources,
)
from .conftest import CHART


@pytest.mark.parametrize("variant", VARIANTS)
def test_lint_passes(helm: Path, variant: str) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), *VARIANTS[variant])
    assert "0 chart(s) failed" in result.stdout, result.stdout


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_manifest_is_valid_and_consistent(helm: Path, variant: str) -> None:
    docs = render(helm, *VARIANTS[variant])
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        for version in KUBERNETES:
            kubernetes_validate.validate(doc, version, strict=True)
    # Secrets the chart renders, and those its issuer Job makes (Helm cannot sign them).
    secrets = set(by_kind(docs, "Secret")) | set(issued(docs))
    workloads = pods(docs)
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
    # Secrets the chart names are rendered (or issued), unless the values name yours.
    for name, doc in workloads.items():
        for source in secret_sources(doc):
            if source["name"].startswith("rel-"):
                assert source["name"] in secrets, f"{name}: {source['name']} is not rendered"
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
    mounted = pod_spec(valkey)["containers"][0]["volumeMounts"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in mounted
    args = pod_spec(valkey)["containers"][0]["args"]
    assert args[:2] == ["valkey-server", "/etc/valkey/valkey.conf"]
    assert args[args.index("--appendonly") + 1] == "yes"
    password = secret_data(by_kind(docs, "Secret")["rel-hermes-gateway-valkey"])["password"]
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password)
    # The server reads it from its config file, never from its command line.
    assert mounted_files(docs, "rel-hermes-gateway-valkey") == {
        "/etc/valkey": {"valkey.conf": f'requirepass "{password}"\n'}}
    assert not any(password in a or "pass" in a for a in args)
    # Another render (a fresh install) draws another password: it is not a constant.
    again = by_kind(render(helm, *IMAGE), "Secret")["rel-hermes-gateway-valkey"]
    assert secret_data(again)["password"] != password
    # The gateway reads the store's URL from its own Secret, mounted as a file.
    env = env_of(pod_spec(gateway)["containers"][0])
    assert env["HERMES_SECRETS_DIR"]["value"] == "/etc/hermes/secrets/chart"
    service = by_kind(docs, "Service")["rel-hermes-gateway-valkey"]
    assert mounted_files(docs, "rel-hermes-gateway") == {"/etc/hermes/secrets/chart": {
        "REDIS_URL": f"redis://:{password}@{service['metadata']['name']}:"
                     f"{service['spec']['ports'][0]['port']}/0"}}
    assert "REDIS_URL" not in env and "HERMES_HUB" not in env
    assert "nats" not in " ".join(by_kind(docs, "StatefulSet"))
    pdb = by_kind(docs, "PodDisruptionBudget")["rel-hermes-gateway"]
    assert pdb["spec"]["minAvailable"] == 1
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert pod_spec(gateway)["containers"][0]["image"] == \
        f"registry.example.com/hermes-gateway:{app_version}"


def test_a_single_replica_without_a_shared_store_never_runs_two_pods(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "single-replica.yaml"))
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    assert gateway["spec"]["replicas"] == 1
    assert gateway["spec"]["strategy"] == {"type": "Recreate"}
    env = env_of(pod_spec(gateway)["containers"][0])
    assert "REDIS_URL" not in env and "HERMES_SECRETS_DIR" not in env
    assert mounted_files(docs, "rel-hermes-gateway") == {}  # nothing to connect to
    assert not by_kind(docs, "StatefulSet") and not by_kind(docs, "PodDisruptionBudget")
    claim = by_kind(docs, "PersistentVolumeClaim")["rel-hermes-gateway"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_an_external_store_from_a_secret_and_an_autoscaler(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "external-redis.yaml"))
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    assert "replicas" not in gateway["spec"]  # the autoscaler's
    assert "strategy" not in gateway["spec"]
    container = pod_spec(gateway)["containers"][0]
    # Your Secrets, mounted as files: the settings whole, the store's URL as REDIS_URL.
    assert "envFrom" not in container
    assert env_of(container)["HERMES_SECRETS_DIR"]["value"] == \
        "/etc/hermes/secrets/settings:/etc/hermes/secrets/chart"
    yours = {"hermes-settings": {"LLM_API_KEY": "sk-yours", "SLACK_BOT_TOKEN": "xoxb-yours"},
             "hermes-redis": {"url": "rediss://:pw@redis.internal:6380/0", "other": "x"}}
    assert mounted_files(docs, "rel-hermes-gateway", yours) == {
        "/etc/hermes/secrets/settings": yours["hermes-settings"],
        "/etc/hermes/secrets/chart": {"REDIS_URL": "rediss://:pw@redis.internal:6380/0"}}
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
    assert secret_data(by_kind(docs, "Secret")["rel-hermes-gateway-creds"]) == {
        "REDIS_URL": url}
    assert mounted_files(docs, "rel-hermes-gateway") == {
        "/etc/hermes/secrets/chart": {"REDIS_URL": url}}
    gateway = by_kind(docs, "Deployment")["rel-hermes-gateway"]
    assert url not in yaml.safe_dump(gateway)


def test_the_hub_runs_on_a_bundled_nats_with_its_agents(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "hub.yaml"))
    deployments = by_kind(docs, "Deployment")
    nats = by_kind(docs, "StatefulSet")["rel-hermes-gateway-nats"]
    assert pod_spec(nats)["containers"][0]["args"] == ["--config", "/etc/nats/hermes/nats.conf"]
    files = mounted_files(docs, "rel-hermes-gateway-nats")["/etc/nats/hermes"]
    config = files["nats.conf"]
    assert re.search(r'jetstream \{\s*store_dir: "/data"\s*\}', config)
    assert nats["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    nats_image = pod_spec(nats)["containers"][0]["image"]
    major, minor = (int(x) for x in re.search(r":(\d+)\.(\d+)", nats_image).groups())  # type: ignore[union-attr]
    assert (major, minor) >= (2, 11), "per-message TTL needs nats-server 2.11"
    from hub.server import MAX_PAYLOAD

    assert f"max_payload: {MAX_PAYLOAD}" in config, "room for a 2 MB context update"
    # Operator mode: the operator and accounts come from the issuer Job's Secret (Helm
    # cannot sign JWTs); no user, password or token in the configuration.
    made = issuer_args(docs)
    assert 'include "accounts.conf"' in config
    assert files["accounts.conf"] == issued(docs)[made["accounts"]]["accounts.conf"]
    settings = [line for line in config.splitlines() if not line.lstrip().startswith("#")]
    assert not re.search(r"(?i)authorization|password|token|users", "\n".join(settings))
    assert list(secret_data(by_kind(docs, "Secret")["rel-hermes-gateway-nats"])) == [
        "nats.conf"]
    # Each workload logs in as its identity on the hub, from a .creds file of its own.
    identities = {"rel-hermes-gateway": "hub", "rel-hermes-gateway-hub": "hub",
                  "rel-hermes-gateway-agent-validator": "validator",
                  "rel-hermes-gateway-agent-summarizer": "summarizer",
                  "rel-hermes-gateway-schemas": "schema-admin"}
    # The gateway and the hub also run the bridges, as `bridge`, from a .creds of their own.
    bridges = ("rel-hermes-gateway", "rel-hermes-gateway-hub")
    assert made["grants"] == {
        **{f"{name}-nats-creds": identity for name, identity in identities.items()},
        **{f"{name}-bridge-nats-creds": "bridge" for name in bridges}}
    for name in identities:
        env = env_of(pod_spec(pods(docs)[name])["containers"][0])
        assert env["HERMES_HUB"]["value"] == "true", name
        assert env["NATS_URL"]["value"] == "nats://rel-hermes-gateway-nats:4222", name
        assert env["NATS_CREDS_FILE"]["value"] == "/etc/hermes/secrets/chart/nats.creds"
        chart_files = mounted_files(docs, name, {"summarizer-model-key": {}})[
            "/etc/hermes/secrets/chart"]
        assert chart_files["nats.creds"] == issued(docs)[f"{name}-nats-creds"]["nats.creds"]
        if name in bridges:
            assert env["HUB_BRIDGE_CREDS_FILE"]["value"] == \
                "/etc/hermes/secrets/chart/bridge.creds"
            assert chart_files["bridge.creds"] == \
                issued(docs)[f"{name}-bridge-nats-creds"]["nats.creds"]
        else:
            assert "HUB_BRIDGE_CREDS_FILE" not in env and "bridge.creds" not in chart_files
        # Only the gateway uses the store (the hub too, with HUB_RAG).
        assert ("REDIS_URL" in chart_files) == (name == "rel-hermes-gateway"), name
        assert "NATS_URL" not in chart_files, name
    # The issuer runs before anything else is installed or upgraded, its service account
    # and Role first; the schemas Job once the release is up.
    for kind in ("ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Job"):
        hook = by_kind(docs, kind)["rel-hermes-gateway-nats-issuer"]["metadata"]["annotations"]
        assert hook["helm.sh/hook"] == "pre-install,pre-upgrade", kind
        assert int(hook["helm.sh/hook-weight"]) == (0 if kind == "Job" else -10), kind
        assert hook["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    schemas = by_kind(docs, "Job")["rel-hermes-gateway-schemas"]
    assert schemas["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert pod_spec(schemas)["containers"][0]["args"] == ["hub", "schemas"]
    hub = pod_spec(deployments["rel-hermes-gateway-hub"])["containers"][0]
    assert hub["args"] == ["hub", "run"]
    validator = deployments["rel-hermes-gateway-agent-validator"]
    assert validator["spec"]["replicas"] == 2
    assert pod_spec(validator)["containers"][0]["args"] == [
        "agent", "--id", "validator", "--capabilities", "validate_claim", "--instructions",
        "You check insurance claims against the policy and say what is missing."]
    summarizer = pod_spec(deployments["rel-hermes-gateway-agent-summarizer"])["containers"][0]
    assert summarizer["args"] == ["agent", "--id", "summarizer", "--capabilities", "summary",
                                  "--tools", "tools.recall", "--model", "gpt-4o"]
    # The summarizer's own Secret holds its model's key; the validator gets the gateway's
    # model key, and nothing else of the gateway's Secret.
    own = {"summarizer-model-key": {"LLM_API_KEY": "sk-summarizer"}}
    assert mounted_files(docs, "rel-hermes-gateway-agent-summarizer", own)[
        "/etc/hermes/secrets/settings"] == {"LLM_API_KEY": "sk-summarizer"}
    assert mounted_files(docs, "rel-hermes-gateway-agent-validator")[
        "/etc/hermes/secrets/settings"] == {"LLM_API_KEY": "replace-me"}


def test_every_deployment_is_scheduled_by_the_same_values(helm: Path, tmp_path: Path) -> None:
    placement = {"nodeSelector": {"pool": "agents"},
                 "tolerations": [{"key": "spot", "operator": "Exists"}],
                 "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}
    values = tmp_path / "placement.yaml"
    values.write_text(yaml.safe_dump(placement))
    docs = render(helm, "-f", str(CHART / "examples" / "hub.yaml"), "-f", str(values))
    deployments = by_kind(docs, "Deployment") | by_kind(docs, "Job")
    assert len(deployments) == 6  # the gateway, the hub, two agents, the NATS issuer, schemas
    for name, deployment in deployments.items():
        spec = deployment["spec"]["template"]["spec"]
        assert {k: spec.get(k) for k in placement} == placement, name


def test_an_external_nats(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "examples" / "external-nats.yaml"))
    assert "rel-hermes-gateway-nats" not in by_kind(docs, "StatefulSet")
    assert "rel-hermes-gateway-nats" not in by_kind(docs, "Secret")
    assert issued(docs) == {} and not by_kind(docs, "Role")  # your NATS, your users
    yours = {f"hermes-nats-{who}": {"nats.creds": f"-----BEGIN NATS USER JWT----- {who}"}
             for who in ("gateway", "hub", "schema-admin", "bridge")}
    # Each workload (the schemas Job too) its own .creds file, named by NATS_CREDS_FILE,
    # and the URL from its own Secret.
    for name, who in (("rel-hermes-gateway", "gateway"), ("rel-hermes-gateway-hub", "hub"),
                      ("rel-hermes-gateway-schemas", "schema-admin")):
        env = env_of(pod_spec(pods(docs)[name])["containers"][0])
        assert "NATS_URL" not in env and "NATS_TOKEN" not in env, name
        assert env["NATS_CREDS_FILE"]["value"] == "/etc/hermes/secrets/chart/nats.creds"
        files = mounted_files(docs, name, yours)["/etc/hermes/secrets/chart"]
        assert files["NATS_URL"].startswith("tls://nats-0.nats.internal:4222,"), name
        assert files["nats.creds"] == yours[f"hermes-nats-{who}"]["nats.creds"], name
        # The gateway and the hub run the bridges, as `bridge`, from its .creds beside theirs.
        if who == "schema-admin":
            assert "HUB_BRIDGE_CREDS_FILE" not in env and "bridge.creds" not in files
        else:
            assert env["HUB_BRIDGE_CREDS_FILE"]["value"] == \
                "/etc/hermes/secrets/chart/bridge.creds"
            assert files["bridge.creds"] == yours["hermes-nats-bridge"]["nats.creds"], name
    # None given for the hub: NATS_URL alone (one login: the process warns); none for the
    # schema admin: no schemas Job (every process checks against the built-in schemas).
    docs = render(helm, "-f", str(CHART / "examples" / "external-nats.yaml"), "--set",
                  "externalNats.credsSecrets.hub=", "--set",
                  "externalNats.credsSecrets.schemaAdmin=")
    hub = env_of(pod_spec(by_kind(docs, "Deployment")["rel-hermes-gateway-hub"])["containers"][0])
    assert "NATS_CREDS_FILE" not in hub
    # The bridges' credentials alone: mounted where HUB_BRIDGE_CREDS_FILE says.
    files = mounted_files(docs, "rel-hermes-gateway-hub", yours)["/etc/hermes/secrets/chart"]
    assert hub["HUB_BRIDGE_CREDS_FILE"]["value"] == "/etc/hermes/secrets/chart/bridge.creds"
    assert files["bridge.creds"] == yours["hermes-nats-bridge"]["nats.creds"]
    assert not by_kind(docs, "Job")


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
    # The hub's own identities are not agents' (an agent "hub" would be the core).
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.agents[0].id=hub",
      "--set", "hub.agents[0].capabilities={x}"], "hub.agents[0].id \"hub\" is reserved"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.agents[0].id=schema-admin",
      "--set", "hub.agents[0].capabilities={x}"], "\"schema-admin\" is reserved"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", f"hub.agents[0].id={'a' * 58}",
      "--set", "hub.agents[0].capabilities={x}"], "is longer than 57 characters"),
    ([*IMAGE, "--set", "persistence.enabled=true", "--set",
      "persistence.accessMode=ReadWriteOnce"], "must be ReadWriteMany"),
    ([*IMAGE, "--set", "autoscaling.enabled=true", "--set", "autoscaling.minReplicas=5",
      "--set", "autoscaling.maxReplicas=3"], "minReplicas is above"),
    ([*IMAGE, "--set", "metrics.serviceMonitor.enabled=true"], "needs a bearer token"),
    # Secrets are never plain environment values (those are in the pod spec for anyone
    # who can read it), and what the chart mounts is the chart's to set.
    ([*IMAGE, "--set", "env.LLM_API_KEY=sk-x"], "env.LLM_API_KEY looks like a secret"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.env.SLACK_BOT_TOKEN=x"],
     "hub.env.SLACK_BOT_TOKEN looks like a secret"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.agents[0].id=a", "--set",
      "hub.agents[0].capabilities={x}", "--set", "hub.agents[0].env.OPENAI_API_KEY=x"],
     "hub.agents[0].env.OPENAI_API_KEY looks like a secret"),
    ([*IMAGE, "--set", "env.HERMES_SECRETS_DIR=/x"], "env.HERMES_SECRETS_DIR is set by the chart"),
    ([*IMAGE, "--set", "secrets.NATS_CREDS_FILE=/x"], "secrets.NATS_CREDS_FILE is set by"),
    # Hub pods get the model's keys of the gateway's Secret, never its channel secrets.
    ([*IMAGE, "--set", "hub.sharedSecretKeys={LLM_API_KEY,SLACK_BOT_TOKEN}"],
     "hub.sharedSecretKeys: SLACK_BOT_TOKEN is the gateway's alone"),
    ([*IMAGE, "--set", "hub.sharedSecretKeys={HERMES_API_KEYS}"],
     "hub.sharedSecretKeys: HERMES_API_KEYS is the gateway's alone"),
    ([*IMAGE, "--set", "secretEnv={SLACK_BOT_TOKEN}"], "but there is none"),
    # .creds files are for a NATS of yours; the bundled one makes its own users.
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "externalNats.credsSecrets.hub=c"],
     "externalNats.credsSecrets.hub: .creds files are for a NATS of yours"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set",
      "externalNats.credsSecrets.schemaAdmin=c"],
     "externalNats.credsSecrets.schemaAdmin: .creds files are for a NATS of yours"),
    ([*IMAGE, "--set", "hub.enabled=true", "--set", "hub.agents[0].id=a", "--set",
      "hub.agents[0].capabilities={x}", "--set", "hub.agents[0].natsCredsSecret=c"],
     "hub.agents[0].natsCredsSecret: .creds files are for a NATS of yours"),
    ([*IMAGE, "--set", "podSecurityContext.fsGroup=null"], "podSecurityContext.fsGroup is not set"),
    # "false" as a string would be true in a template: the internet left open.
    ([*IMAGE, "--set-string", "networkPolicy.egress.internet=false"],
     "networkPolicy.egress.internet is true or false"),
])
def test_unsafe_values_fail_at_render_time_saying_what_to_set(
        helm: Path, values: list[str], says: str) -> None:
    assert says in refusal(helm, *values)


def test_the_gateway_answers_to_its_service_and_ingress_names_only(helm: Path) -> None:
    """The gateway refuses a Host it does not know (DNS rebinding): the chart names the
    Service's DNS names and the ingress host, unless the values name them themselves."""
    docs = render(helm, *IMAGE, "--set", "ingress.enabled=true",
                  "--set", "ingress.host=hermes.example.com")
    [(_, gateway)] = [(n, c) for n, c in containers(docs) if c["name"] == "gateway"]
    hosts = env_of(gateway)["HERMES_ALLOWED_HOSTS"]["value"].split(",")
    assert hosts == ["rel-hermes-gateway", "rel-hermes-gateway.hermes",
                     "rel-hermes-gateway.hermes.svc",
                     "rel-hermes-gateway.hermes.svc.cluster.local", "hermes.example.com"]
    mine = render(helm, *IMAGE, "--set", "env.HERMES_ALLOWED_HOSTS=gw.internal")
    [(_, gateway)] = [(n, c) for n, c in containers(mine) if c["name"] == "gateway"]
    assert env_of(gateway)["HERMES_ALLOWED_HOSTS"]["value"] == "gw.internal"

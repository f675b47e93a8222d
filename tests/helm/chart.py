"""Rendering the chart for the tests: helm template and lint, and what a rendered pod
holds (its environment, its Secrets, the files it mounts)."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from .conftest import CACHE, CHART

#: The oldest Kubernetes the chart supports, and the newest the validator knows.
KUBERNETES = ["1.29.0", kubernetes_validate.latest_version()]
IMAGE = ["--set", "image.repository=registry.example.com/hermes-gateway"]
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
#: Variants: the defaults (plus the one required value) and every documented example.
VARIANTS = {"defaults": IMAGE, **{p.stem: ["-f", str(p)] for p in EXAMPLES}}
#: Kinds of the Prometheus Operator, not in the Kubernetes schemas: checked by hand below.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}


def run_helm(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    home = CACHE / "home"
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env,
                            timeout=120, check=False)
    if check and result.returncode:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    out = run_helm(helm, "template", "rel", str(CHART), "--namespace", "hermes", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def refusal(helm: Path, *args: str) -> str:
    result = run_helm(helm, "template", "rel", str(CHART), *args, check=False)
    assert result.returncode != 0, "rendered values the chart must refuse"
    return result.stderr


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


#: What runs pods.
POD_KINDS = ("Deployment", "StatefulSet", "Job")


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every Deployment, StatefulSet and Job, by name."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in POD_KINDS}


def containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, c) for name, d in pods(docs).items()
            for c in d["spec"]["template"]["spec"]["containers"]]


ISSUER = "rel-hermes-gateway-nats-issuer"


def issuer_args(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the bundled NATS's issuer Job is told to make: {"authority", "accounts",
    "grants": {secret: identity}} (none without the bundled NATS)."""
    job = by_kind(docs, "Job").get(ISSUER)
    if job is None:
        return {"authority": None, "accounts": None, "grants": {}}
    args = pod_spec(job)["containers"][0]["args"]
    assert args[:4] == ["hub", "credentials", "--kubernetes",
                        "/var/run/secrets/hermes/kubernetes"], args
    pairs = list(zip(args[4::2], args[5::2], strict=True))
    grants = {}
    for flag, value in pairs:
        if flag == "--issue":
            identity, secret = value.split("=", 1)
            assert secret not in grants, f"{secret} issued twice"
            grants[secret] = identity
    options = dict(p for p in pairs if p[0] not in ("--issue", "--label"))
    return {"authority": options["--authority"], "accounts": options["--accounts"],
            "grants": grants}


def issued(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The Secrets the issuer Job makes, as a render-only test sees them: each key with a
    stand-in value naming what it is (tests/helm/test_rendered_servers.py runs the Job)."""
    made = issuer_args(docs)
    if made["authority"] is None:
        return {}
    return {made["authority"]: {f"{k}.nk": f"seed of the {k} ({made['authority']})"
                                for k in ("operator", "account", "system")},
            made["accounts"]: {"accounts.conf": "operator: <jwt>\n"},
            **{secret: {"nats.creds": f"creds of {identity} ({secret})"}
               for secret, identity in made["grants"].items()}}


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def pod_labels(doc: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = doc["spec"]["template"]["metadata"]["labels"]
    return labels


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def secret_data(doc: dict[str, Any]) -> dict[str, str]:
    """A rendered Secret's keys and values (data decoded, stringData as written)."""
    data = {k: base64.b64decode(v).decode() for k, v in (doc.get("data") or {}).items()}
    return {**data, **(doc.get("stringData") or {})}


def secret_sources(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Secret a workload's pods read: {"name", "keys" (None: all of them), "how"}."""
    found: list[dict[str, Any]] = []
    spec = pod_spec(doc)
    for volume in spec.get("volumes", []):
        sources = [s["secret"] for s in volume.get("projected", {}).get("sources", [])
                   if "secret" in s]
        if "secret" in volume:
            sources.append({**volume["secret"], "name": volume["secret"]["secretName"]})
        for source in sources:
            items = source.get("items")
            found.append({"name": source["name"], "how": f"volume {volume['name']}",
                          "keys": None if items is None else [i["key"] for i in items]})
    for container in spec["containers"]:
        for ref in container.get("envFrom", []):
            if "secretRef" in ref:
                found.append({"name": ref["secretRef"]["name"], "keys": None, "how": "envFrom"})
        for e in container.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                found.append({"name": ref["name"], "keys": [ref["key"]], "how": "env"})
    return found


def mounted_files(docs: list[dict[str, Any]], workload: str,
                  yours: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """The secret files a workload's containers see, by mount path, as the kubelet would
    lay them out from the rendered Secrets, those the issuer Job makes (``issued``) and
    ``yours`` (Secrets the values name, or the Job's real ones, by name: their keys and
    values). A Secret or key that is none of these, and not optional, fails: the pod would
    not start."""
    rendered = {name: secret_data(doc) for name, doc in by_kind(docs, "Secret").items()}
    known = {**issued(docs), **(yours or {}), **rendered}
    doc = pods(docs)[workload]
    volumes = {v["name"]: v for v in pod_spec(doc).get("volumes", [])}
    files: dict[str, dict[str, str]] = {}
    for container in pod_spec(doc)["containers"]:
        for mount in container.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            sources = [s["secret"] for s in volume.get("projected", {}).get("sources", [])
                       if "secret" in s]
            if "secret" in volume:
                sources.append({**volume["secret"], "name": volume["secret"]["secretName"]})
            if not sources:
                continue
            seen = files.setdefault(mount["mountPath"], {})
            for source in sources:
                data = known.get(source["name"])
                optional = source.get("optional", False)
                assert data is not None or optional, f"{workload}: no Secret {source['name']}"
                items = source.get("items") or [{"key": k, "path": k} for k in data or {}]
                for item in items:
                    if data is None or item["key"] not in data:
                        assert optional, f"{workload}: {source['name']} has no {item['key']}"
                        continue
                    seen[item["path"]] = data[item["key"]]
    return files


def readable(docs: list[dict[str, Any]], workload: str,
             yours: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    """Everything a process in the workload's pods can read of its configuration: its
    environment (secret references resolved) and its mounted secret files."""
    rendered = {name: secret_data(doc) for name, doc in by_kind(docs, "Secret").items()}
    known = {**issued(docs), **(yours or {}), **rendered}
    doc = pods(docs)[workload]
    found: dict[str, str] = {}
    for container in pod_spec(doc)["containers"]:
        for ref in container.get("envFrom", []):
            found.update(known.get(ref.get("secretRef", {}).get("name", ""), {}))
        for e in container.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            found[e["name"]] = known.get(ref["name"], {}).get(ref["key"], "") if ref \
                else str(e.get("value", ""))
        found.update({f"arg {i}": a for i, a in enumerate(container.get("args", []))})
    for path, files in mounted_files(docs, workload, yours).items():
        found.update({f"{path}/{name}": value for name, value in files.items()})
    return found

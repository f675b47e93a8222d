"""A2A push notifications: a client that goes away learns its task's outcome at a webhook
of its own.

A config (``CreateTaskPushNotificationConfig``, or ``configuration.taskPushNotificationConfig``
of a message) belongs to the task, and so to the principal whose key started it: only it
creates, reads, lists and deletes the task's configs. Its URL is someone else's choice,
so it goes through the SSRF guard when it is given (refused: a JSON-RPC error naming the
address) and again at each delivery, the connection pinned to the addresses checked:
public hosts only, or only the hosts of HERMES_WEBHOOK_CALLBACK_HOSTS when that is set
(inside the network too), as webhook callbacks. Each event that ends or interrupts the
task (the artifact, then the status) is POSTed as the A2A ``StreamResponse`` in JSON, with
``X-A2A-Notification-Token: <token>`` and ``Authorization: <scheme> <credentials>`` when
the config has them, from the process that saw the task end; a failed delivery is tried
three times (0.5 s, 1 s apart), then logged. At most five configs per task.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from google.protobuf.json_format import MessageToDict

from adapters import a2a
from agent_core import AddressRefused, PinnedResolver, check_url, new_id, vet_url
from agent_core.store.section_keys import A2AKeys

from .a2a_tasks import Record

log = logging.getLogger(__name__)

MAX_CONFIGS = 5
_TRIES = (0.0, 0.5, 1.0)
_TIMEOUT = 10.0


class PushConfigs:
    """The push notification configs of A2A tasks (kept with them), and their delivery."""

    def __init__(self, redis: Callable[[], Any], keys: A2AKeys, *, retention: float,
                 callback_hosts: list[str]) -> None:
        self._redis = redis
        self.keys = keys
        self.retention = retention
        self.hosts = list(callback_hosts)
        self._sending: set[asyncio.Task[None]] = set()

    async def _vet(self, url: str) -> None:
        """RpcError unless ``url`` is a webhook this deployment may POST to."""
        try:
            check_url(url, allow_hosts=self.hosts, internal_ok=self.hosts)
            await vet_url(url, allow_hosts=self.hosts, internal_ok=self.hosts)
        except AddressRefused as exc:
            raise a2a.RpcError(a2a.INVALID_PARAMS, f"the push notification URL is not "
                               f"allowed: {exc}") from None

    async def create(self, record: Record, params: dict[str, Any]) -> dict[str, Any]:
        """Keep a config for ``record``'s task (its id given, or a new one)."""
        config = a2a.parse(params, a2a.pb.TaskPushNotificationConfig())
        if config.task_id and config.task_id != record.task.id:
            raise a2a.RpcError(a2a.INVALID_PARAMS, "taskId names another task")
        if len(config.token) > 512 or len(config.url) > 2000:
            raise a2a.RpcError(a2a.INVALID_PARAMS, "the token or URL is too long")
        await self._vet(config.url)
        config.task_id = record.task.id
        config.id = config.id or new_id()
        key = self.keys.pushes(record.task.id)
        redis = self._redis()
        kept = await redis.hkeys(key)
        if len(kept) >= MAX_CONFIGS and config.id.encode() not in kept \
                and config.id not in kept:
            raise a2a.RpcError(a2a.INVALID_PARAMS, f"a task takes {MAX_CONFIGS} push "
                               "notification configs at most")
        shown = dict(MessageToDict(config))
        pipe = redis.pipeline(transaction=False)
        pipe.hset(key, config.id, json.dumps(shown))
        pipe.expire(key, int(self.retention))
        await pipe.execute()
        return shown

    async def of(self, record: Record) -> list[dict[str, Any]]:
        """The task's configs."""
        kept = await self._redis().hvals(self.keys.pushes(record.task.id))
        return [json.loads(raw) for raw in kept]

    async def get(self, record: Record, config_id: str) -> dict[str, Any]:
        raw = await self._redis().hget(self.keys.pushes(record.task.id), config_id)
        if raw is None:
            raise a2a.RpcError(a2a.INVALID_PARAMS, f"no push notification config "
                               f"{config_id!r} of task {record.task.id}")
        return dict(json.loads(raw))

    async def delete(self, record: Record, config_id: str) -> None:
        await self._redis().hdel(self.keys.pushes(record.task.id), config_id)

    def notify(self, record: Record, events: list[Any]) -> None:
        """Send ``events`` to each of the task's webhooks, in the background (the task's
        end never waits on a client's webhook)."""
        if not events:
            return
        sending = asyncio.create_task(self._send(record, events),
                                      name=f"a2a-push-{record.task.id}")
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _send(self, record: Record, events: list[Any]) -> None:
        try:
            configs = await self.of(record)
        except Exception as exc:
            log.warning("push configs of %s not read: %s", record.task.id, type(exc).__name__)
            return
        for config in configs:
            for event in events:
                await self._deliver(record.task.id, config, dict(MessageToDict(event)))

    async def _deliver(self, task_id: str, config: dict[str, Any], body: dict[str, Any]
                       ) -> None:
        headers = {"Content-Type": "application/json"}
        if config.get("token"):
            headers["X-A2A-Notification-Token"] = str(config["token"])
        auth = config.get("authentication") or {}
        if auth.get("scheme") and auth.get("credentials"):
            headers["Authorization"] = f"{auth['scheme']} {auth['credentials']}"
        url = str(config.get("url") or "")
        for pause in _TRIES:
            await asyncio.sleep(pause)
            try:
                vetted = await vet_url(url, allow_hosts=self.hosts, internal_ok=self.hosts)
            except AddressRefused as exc:
                log.warning("push notification of %s not sent: %s", task_id, exc)
                return
            connector = aiohttp.TCPConnector(resolver=PinnedResolver(vetted.host,
                                                                     vetted.addresses),
                                             use_dns_cache=False)
            try:
                async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.
                                                 ClientTimeout(total=_TIMEOUT)) as session, \
                        session.post(url, json=body, headers=headers,
                                     allow_redirects=False) as response:
                    if response.status < 300:
                        return
                    if response.status < 500:  # the webhook refuses it: not tried again
                        log.warning("push notification of %s refused: HTTP %d", task_id,
                                    response.status)
                        return
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info("push notification of %s failed: %s", task_id, type(exc).__name__)
        log.warning("push notification of %s not delivered after %d tries", task_id,
                    len(_TRIES))

    async def aclose(self) -> None:
        """Wait a moment for the deliveries under way, then stop them."""
        if self._sending:
            await asyncio.wait(self._sending, timeout=2.0)
        for sending in list(self._sending):
            sending.cancel()
        if self._sending:
            await asyncio.wait(self._sending, timeout=2.0)

"""The Secrets part of a Kubernetes API server, as a pod reaches it: HTTPS with the
cluster's CA (a trustme CA of its own), one service account's bearer token, and that
account's Role (its rules, as the chart renders them) deciding every request, as
Kubernetes' RBAC does: a rule with resourceNames never allows a create."""

from __future__ import annotations

import base64
import itertools
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web

from agent_core.store.embedded import free_port

_VERBS = {"GET": "get", "POST": "create", "PUT": "update"}


@dataclass
class Request:
    verb: str
    name: str
    status: int


@dataclass
class KubernetesAPI:
    """Serves ``/api/v1/namespaces/<namespace>/secrets`` for ``token``, within ``rules``."""

    token: str
    rules: list[dict[str, Any]]
    namespace: str = "hermes"
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _runner: web.AppRunner | None = None

    async def start(self, account: Path) -> None:
        """Listen on 127.0.0.1, and lay out ``account`` as the kubelet lays out a service
        account's projected volume (token, ca.crt, namespace)."""
        ca = trustme.CA()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        account.mkdir(parents=True, exist_ok=True)
        (account / "token").write_text(self.token)
        ca.cert_pem.write_to_path(str(account / "ca.crt"))
        (account / "namespace").write_text(self.namespace)
        app = web.Application()
        base = "/api/v1/namespaces/{namespace}/secrets"
        app.router.add_route("POST", base, self._handle)
        app.router.add_route("GET", base + "/{name}", self._handle)
        app.router.add_route("PUT", base + "/{name}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def data(self, name: str) -> dict[str, str]:
        """Secret ``name``'s keys and values, decoded."""
        return {k: base64.b64decode(v).decode()
                for k, v in self.secrets[name].get("data", {}).items()}

    def allowed(self, verb: str, name: str) -> bool:
        """Whether the Role allows ``verb`` on Secret ``name`` ("" for a create)."""
        return any("" in r.get("apiGroups", []) and "secrets" in r.get("resources", [])
                   and verb in r.get("verbs", [])
                   and ("resourceNames" not in r or (name and name in r["resourceNames"]))
                   for r in self.rules)

    async def _handle(self, request: web.Request) -> web.Response:
        verb = _VERBS[request.method]
        name = request.match_info.get("name", "")
        response = await self._answer(request, verb, name)
        self.requests.append(Request(verb, name, response.status))
        return response

    async def _answer(self, request: web.Request, verb: str, name: str) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _status(401, "Unauthorized")
        if request.match_info["namespace"] != self.namespace or not self.allowed(verb, name):
            return _status(403, f'secrets "{name}" is forbidden: cannot {verb}')
        if verb == "get":
            found = self.secrets.get(name)
            return web.json_response(found) if found else _status(404, f'"{name}" not found')
        body = await request.json()
        meta = body.get("metadata", {})
        if verb == "create":
            name = meta.get("name", "")
            if name in self.secrets:
                return _status(409, f'secrets "{name}" already exists')
        else:
            if meta.get("name") != name:
                return _status(400, "the name in the body is not the URL's")
            if name not in self.secrets:
                return _status(404, f'secrets "{name}" not found')
            if meta.get("resourceVersion") != \
                    self.secrets[name]["metadata"]["resourceVersion"]:
                return _status(409, "the object has been modified")
        for value in (body.get("data") or {}).values():
            base64.b64decode(value, validate=True)
        meta = {**meta, "namespace": self.namespace,
                "resourceVersion": str(next(self._versions))}
        self.secrets[name] = {**body, "metadata": meta}
        return web.json_response(self.secrets[name], status=201 if verb == "create" else 200)


def _status(code: int, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "message": message, "code": code}, status=code)

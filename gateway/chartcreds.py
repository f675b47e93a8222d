"""The Helm chart's NATS identities, issued into Kubernetes Secrets by the chart's issuer Job
(``hermes-gateway hub credentials --kubernetes ...``, a pre-install and pre-upgrade hook).

The bundled NATS runs in operator mode as the embedded server does (``hub.authority``).
Helm's templates cannot sign a JWT, so this Job does, with the chart's image:

- the operator's and the account's seeds live in one Secret that only this Job reads
  (made at the first install, kept across upgrades: the account's key is also where
  JetStream keeps the account's streams, and changing it revokes every credential);
- the server's part of its configuration (the operator JWT and the accounts preloaded in
  its memory resolver: nothing secret) goes into another Secret, which the NATS pod mounts;
- each identity's ``.creds`` goes into a Secret of its own, which only the workload it is
  for mounts. Credentials still signed by the account with the identity's permissions are
  kept as they are; any others are issued anew.

The API is reached as a pod reaches it: ``https://$KUBERNETES_SERVICE_HOST:
$KUBERNETES_SERVICE_PORT``, with the token, CA and namespace of a service-account
directory (the Job mounts a projected token that expires in ten minutes).
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from agent_core import ConfigError, RuntimeFailure
from hub.authority import Keys
from hub.identity import permissions

#: The keys of the Secrets this module writes.
ACCOUNTS_KEY = "accounts.conf"
CREDS_KEY = "nats.creds"


@dataclass(frozen=True, slots=True)
class Grant:
    """One identity's credentials, to be kept in the Secret ``secret``."""

    identity: str
    secret: str

    @classmethod
    def parse(cls, text: str) -> Grant:
        """``IDENTITY=SECRET`` (the identity checked: ``identity.permissions``)."""
        identity, _, secret = text.partition("=")
        if not identity or not secret:
            raise ConfigError(f"--issue {text!r}: write IDENTITY=SECRET (validator=my-secret)")
        permissions(identity)  # ConfigError for an identity that cannot be one
        return cls(identity, secret)


@dataclass(frozen=True, slots=True)
class Found:
    """A Secret as read: its data (decoded) and the version an update must name."""

    data: dict[str, str]
    version: str


class SecretsAPI:
    """Reads and writes Secrets of one namespace through the Kubernetes API, as the pod's
    service account."""

    def __init__(self, directory: Path) -> None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ConfigError("KUBERNETES_SERVICE_HOST is not set: --kubernetes runs in a pod "
                              "(the chart's issuer Job)")
        for name in ("token", "ca.crt", "namespace"):
            if not (directory / name).is_file():
                raise ConfigError(f"--kubernetes {directory}: no {name} there (a service "
                                  "account's token, the cluster's CA and the namespace)")
        self.token_file = directory / "token"
        self.namespace = (directory / "namespace").read_text().strip()
        host = f"[{host}]" if ":" in host else host
        self._secrets = f"/api/v1/namespaces/{self.namespace}/secrets"
        self._client = httpx.AsyncClient(
            base_url=f"https://{host}:{port}",
            verify=ssl.create_default_context(cafile=str(directory / "ca.crt")),
            timeout=15.0, trust_env=False)

    async def __aenter__(self) -> SecretsAPI:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None
                    ) -> httpx.Response:
        # Read at each call: the kubelet replaces a projected token before it expires.
        token = self.token_file.read_text().strip()
        try:
            return await self._client.request(method, self._secrets + path, json=body, headers={
                "Authorization": f"Bearer {token}", "Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise RuntimeFailure(f"the Kubernetes API at {self._client.base_url.host!r} "
                                 f"cannot be reached: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _failed(response: httpx.Response, what: str) -> RuntimeFailure:
        try:
            reason = str(response.json().get("message", ""))
        except ValueError:
            reason = ""
        hint = " (the issuer's Role must allow it)" if response.status_code == 403 else ""
        return RuntimeFailure(f"the Kubernetes API refused to {what}: HTTP "
                              f"{response.status_code} {reason}{hint}".rstrip())

    async def read(self, name: str) -> Found | None:
        """Secret ``name``, or None when there is none."""
        response = await self._call("GET", f"/{name}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._failed(response, f"read Secret {name!r}")
        body = response.json()
        data = {k: base64.b64decode(v).decode() for k, v in (body.get("data") or {}).items()}
        return Found(data, str(body["metadata"]["resourceVersion"]))

    async def write(self, name: str, data: dict[str, str], *, labels: dict[str, str],
                    replacing: Found | None) -> None:
        """Secret ``name`` made, or (``replacing`` the one read) replaced, holding ``data``."""
        metadata: dict[str, Any] = {"name": name, "namespace": self.namespace,
                                    "labels": labels}
        if replacing is not None:
            metadata["resourceVersion"] = replacing.version
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
        if replacing is None:
            response = await self._call("POST", "", body)
        else:
            response = await self._call("PUT", f"/{name}", body)
        if response.status_code not in (200, 201):
            raise self._failed(response, f"{'replace' if replacing else 'create'} Secret "
                                         f"{name!r}")


async def issue_into_secrets(api: SecretsAPI, *, authority: str, accounts: str,
                             grants: list[Grant], labels: dict[str, str]) -> list[str]:
    """The keys kept in Secret ``authority`` (made when missing), the server's accounts in
    Secret ``accounts`` and each grant's credentials in its Secret, made where they are
    missing or no longer right; what was done, one line each (nothing secret)."""
    done: list[str] = []
    kept = await api.read(authority)
    seeds = {name: (kept.data.get(f"{name}.nk", "") if kept else "").strip()
             for name in Keys.NAMES}
    if not all(seeds.values()):
        seeds = {name: seed or Keys.new_seed(name).decode() for name, seed in seeds.items()}
        # Kept before anything is signed with them: a Job that fails later signs again
        # with these, never with others.
        await api.write(authority, {f"{name}.nk": seed for name, seed in seeds.items()},
                        labels=labels, replacing=kept)
        done.append(f"{authority}: the operator and account keys made")
    keys = Keys({name: seed.encode() for name, seed in seeds.items()})
    current = await api.read(accounts)
    if current is None or not keys.configures(current.data.get(ACCOUNTS_KEY, "")):
        await api.write(accounts, {ACCOUNTS_KEY: "\n".join(keys.server_config()) + "\n"},
                        labels=labels, replacing=current)
        done.append(f"{accounts}: the server's operator and accounts written")
    for grant in grants:
        current = await api.read(grant.secret)
        if current is not None and keys.signed(current.data.get(CREDS_KEY, ""),
                                               grant.identity):
            done.append(f"{grant.secret}: {grant.identity} kept")
            continue
        await api.write(grant.secret, {CREDS_KEY: keys.issue(grant.identity)},
                        labels=labels, replacing=current)
        done.append(f"{grant.secret}: {grant.identity} issued")
    return done

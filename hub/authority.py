"""The hub's identities on a server of its own: an operator, one account with JetStream
(and the system account), and a user per identity, as signed JWTs and ``.creds`` files.

nats-server in operator mode with the memory resolver accepts any user whose JWT the
account's key signed, with the subject permissions that JWT carries (``identity``), so
issuing a user needs no change to the server. ``Keys`` signs, wherever its seeds are kept:
the embedded server's ``Authority`` keeps them under ``<data dir>/nats/auth`` and the
credentials under ``<data dir>/nats/creds/<identity>.creds`` (directories 0700, files
0600); the Helm chart's issuer keeps them in Kubernetes Secrets (``gateway.chartcreds``).
No maintained Python library issues NATS JWTs (nats-jwt 0.2 says it is untested and pins
pytz<2025; nats-nsc pins nkeys 0.1), and the format is small: a header, the claims and the
issuer's ed25519 signature, base64url each.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import nkeys

from .identity import Permissions, permissions

_ACCOUNT_LIMITS = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                   "wildcards": True, "conn": -1, "leaf": -1}
_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
_PREFIXES = {"operator": nkeys.PREFIX_BYTE_OPERATOR, "account": nkeys.PREFIX_BYTE_ACCOUNT,
             "system": nkeys.PREFIX_BYTE_ACCOUNT}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def keypair(prefix: int) -> tuple[bytes, nkeys.KeyPair]:
    """A new nkey of the kind ``prefix`` names: its seed, and the key pair."""
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return seed, nkeys.from_seed(bytearray(seed))


def jwt(signer: nkeys.KeyPair, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A NATS JWT: ``nats`` claims about ``subject`` (a public key), signed by ``signer``."""
    claims: dict[str, Any] = {"iat": int(time.time()), "iss": signer.public_key.decode(),
                              "name": name, "sub": subject, "nats": nats}
    # As the Go library does: the id is the hash of the claims without it.
    digest = hashlib.sha512(json.dumps(claims, sort_keys=True).encode()).digest()[:32]
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(signer.sign(f'{head}.{body}'.encode()))}"


def claims_of(token: str) -> dict[str, Any]:
    """The claims of a JWT (not verified: for reading back what this process issued)."""
    return dict(json.loads(_unb64(token.split(".")[1])))


def user_claims(granted: Permissions) -> dict[str, Any]:
    """A user's ``nats`` claims with ``granted`` permissions and no other limit."""
    pub: dict[str, list[str]] = {"allow": list(granted.publish)}
    if granted.publish_deny:
        pub["deny"] = list(granted.publish_deny)
    claims: dict[str, Any] = {"pub": pub, "sub": {"allow": list(granted.subscribe)},
                              "subs": -1, "data": -1, "payload": -1, "type": "user",
                              "version": 2}
    if granted.responses:
        # ttl in nanoseconds, as the Go library writes a duration.
        claims["resp"] = {"max": granted.response_max,
                          "ttl": int(granted.response_ttl * 1_000_000_000)}
    return claims


def creds_text(token: str, seed: bytes) -> str:
    """A ``.creds`` file: the user's JWT and its nkey seed."""
    return (f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n"
            "------END USER NKEY SEED------\n")


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by this user only, replaced in one step."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    partial.replace(path)


def _token_of(creds: str) -> str:
    """The user JWT of a ``.creds`` file's text (ValueError when it has none)."""
    try:
        return creds.split("-----BEGIN NATS USER JWT-----")[1].split(maxsplit=1)[0]
    except IndexError:
        raise ValueError("no user JWT") from None


class Keys:
    """An operator, the account every identity of the hub belongs to and the system
    account, from their seeds: the server's configuration and the users they sign, wherever
    the seeds are kept (a directory for the embedded server, Secrets for the chart)."""

    NAMES = tuple(_PREFIXES)

    def __init__(self, seeds: dict[str, bytes]) -> None:
        self.operator, self.account, self.system = (
            nkeys.from_seed(bytearray(seeds[name])) for name in self.NAMES)

    @staticmethod
    def new_seed(name: str) -> bytes:
        """A new seed for the key ``name`` (one of NAMES)."""
        return keypair(_PREFIXES[name])[0]

    def server_config(self) -> list[str]:
        """The lines of nats.conf that put the server in operator mode with this account
        (and the system account) preloaded in its memory resolver."""
        op, acct, sys_ = (k.public_key.decode()
                          for k in (self.operator, self.account, self.system))
        return [
            f"operator: {jwt(self.operator, op, 'hermes', {'type': 'operator', 'version': 2})}",
            f"system_account: {sys_}",
            "resolver: MEMORY",
            "resolver_preload: {",
            f"  {acct}: " + jwt(self.operator, acct, "hermes", {
                "limits": {**_ACCOUNT_LIMITS, **_JETSTREAM}, "type": "account",
                "version": 2}),
            f"  {sys_}: " + jwt(self.operator, sys_, "SYS", {
                "limits": _ACCOUNT_LIMITS, "type": "account", "version": 2}),
            "}",
        ]

    def configures(self, config: str) -> bool:
        """Whether ``config`` (lines of ``server_config``) names these keys: its operator
        JWT this operator's, its accounts these (made again only when they are not)."""
        lines = config.splitlines()
        operator = next((line.split(":", 1)[1].strip() for line in lines
                         if line.startswith("operator:")), "")
        try:
            subject = claims_of(operator).get("sub")
        except (IndexError, ValueError):
            return False
        return subject == self.operator.public_key.decode() and all(
            f"  {k.public_key.decode()}: " in config for k in (self.account, self.system))

    def issue(self, identity: str) -> str:
        """A new ``.creds`` file's text for ``identity``: a new user key, signed by the
        account with ``identity``'s permissions (``identity.permissions``)."""
        seed, user = keypair(nkeys.PREFIX_BYTE_USER)
        token = jwt(self.account, user.public_key.decode(), identity,
                    user_claims(permissions(identity)))
        return creds_text(token, seed)

    def signed(self, creds: str, identity: str) -> bool:
        """Whether ``creds`` (a ``.creds`` file's text) is ``identity``'s, signed by this
        account with the permissions ``identity`` has now."""
        try:
            claims = claims_of(_token_of(creds))
        except ValueError:
            return False
        return claims.get("iss") == self.account.public_key.decode() and \
            claims.get("name") == identity and \
            claims.get("nats") == user_claims(permissions(identity))


class Authority:
    """The keys of one embedded server, kept in ``<directory>/auth``, and the users they
    issue, kept in ``<directory>/creds``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.keys = directory / "auth"
        self.creds_dir = directory / "creds"

    def _seed(self, name: str) -> bytes:
        path = self.keys / f"{name}.nk"
        try:
            return path.read_bytes().strip()
        except FileNotFoundError:
            seed = Keys.new_seed(name)
            write_private(path, seed.decode())
            return seed

    def signer(self) -> Keys:
        """The keys, made on first use."""
        return Keys({name: self._seed(name) for name in Keys.NAMES})

    @property
    def account(self) -> nkeys.KeyPair:
        """The account every identity of the hub belongs to."""
        return self.signer().account

    def server_config(self) -> list[str]:
        """The lines of nats.conf that put the server in operator mode (``Keys``)."""
        return self.signer().server_config()

    def creds_path(self, identity: str) -> Path:
        """Where ``identity``'s credentials are kept."""
        return self.creds_dir / f"{identity}.creds"

    def creds(self, identity: str) -> Path:
        """``identity``'s credentials, issued when missing or signed by another account
        (its permissions checked: ``identity.permissions``)."""
        path = self.creds_path(identity)
        try:
            current = path.read_text()
        except OSError:
            return self.issue(identity)
        if not self.signer().signed(current, identity):
            return self.issue(identity)
        return path

    def issue(self, identity: str) -> Path:
        """New credentials for ``identity`` (any earlier ones stay valid: the account
        signed them; a changed account key is what revokes them all)."""
        path = self.creds_path(identity)
        write_private(path, self.signer().issue(identity))
        return path

"""Decentralised NATS auth for the tests: an operator, an account with JetStream and users,
as signed JWTs (what `nsc` would make), and the .creds files clients log in with."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

_LIMITS = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
           "wildcards": True, "conn": -1, "leaf": -1}
_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def _keypair(prefix: int) -> tuple[bytes, nkeys.KeyPair]:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return seed, nkeys.from_seed(bytearray(seed))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _jwt(signer: nkeys.KeyPair, subject: str, name: str, nats: dict[str, Any]) -> str:
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps({"jti": uuid.uuid4().hex.upper(), "iat": int(time.time()),
                            "iss": signer.public_key.decode(), "name": name, "sub": subject,
                            "nats": nats}).encode())
    return f"{head}.{body}.{_b64(signer.sign(f'{head}.{body}'.encode()))}"


@dataclass
class Operator:
    """An operator with one JetStream account (and the system account)."""

    config: list[str]
    account: nkeys.KeyPair

    @classmethod
    def create(cls) -> Operator:
        _, operator = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
        _, account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        _, system = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        op_pub = operator.public_key.decode()
        account_jwt = _jwt(operator, account.public_key.decode(), "hermes",
                           {"limits": {**_LIMITS, **_JETSTREAM}, "type": "account",
                            "version": 2})
        system_jwt = _jwt(operator, system.public_key.decode(), "SYS",
                          {"limits": _LIMITS, "type": "account", "version": 2})
        config = [f"operator: {_jwt(operator, op_pub, 'test', {'type': 'operator', 'version': 2})}",
                  f"system_account: {system.public_key.decode()}", "resolver: MEMORY",
                  "resolver_preload: {",
                  f"  {account.public_key.decode()}: {account_jwt}",
                  f"  {system.public_key.decode()}: {system_jwt}", "}"]
        return cls(config, account)

    def creds(self, path: Path, *, signed_by: nkeys.KeyPair | None = None) -> Path:
        """A user's .creds file (signed by this account, or by ``signed_by``)."""
        seed, user = _keypair(nkeys.PREFIX_BYTE_USER)
        token = _jwt(signed_by or self.account, user.public_key.decode(), "gateway",
                     {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                      "type": "user", "version": 2})
        path.write_text(f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------"
                        f"\n\n-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n"
                        "------END USER NKEY SEED------\n")
        path.chmod(0o600)
        return path

    @staticmethod
    def stranger() -> nkeys.KeyPair:
        """An account key this operator never signed."""
        return _keypair(nkeys.PREFIX_BYTE_ACCOUNT)[1]

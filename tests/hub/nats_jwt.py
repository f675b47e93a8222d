"""Decentralised NATS auth for the tests' own servers: an operator, an account with
JetStream and users, as signed JWTs, made with what the embedded server uses
(``hub.authority``), and a stranger's key that no operator here signed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nkeys

from hub.authority import Authority, creds_text, jwt, keypair, user_claims, write_private
from hub.identity import Permissions


@dataclass
class Operator:
    """An operator with one JetStream account (and the system account), its keys in a
    directory of their own."""

    config: list[str]
    account: nkeys.KeyPair

    @classmethod
    def create(cls, directory: Path) -> Operator:
        authority = Authority(directory)
        return cls(authority.server_config(), authority.account)

    def creds(self, path: Path, *, signed_by: nkeys.KeyPair | None = None) -> Path:
        """A user's .creds file with every permission (signed by this account, or by
        ``signed_by``)."""
        seed, user = keypair(nkeys.PREFIX_BYTE_USER)
        token = jwt(signed_by or self.account, user.public_key.decode(), "gateway",
                    user_claims(Permissions(publish=(">",), subscribe=(">",))))
        write_private(path, creds_text(token, seed))
        return path

    @staticmethod
    def stranger() -> nkeys.KeyPair:
        """An account key this operator never signed."""
        return keypair(nkeys.PREFIX_BYTE_ACCOUNT)[1]

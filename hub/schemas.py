"""HMP's JSON Schemas, published and versioned on the hub; every process validates
against the latest good version of each type.

The bucket ``HMP_SCHEMAS`` holds one entry per message type: ``{"version": N, "schema":
{...}}``. Only the schema admin writes it (``identity.SCHEMA_ADMIN``; ``seed`` puts the
built-in v1 there, ``publish`` a new version). Every process reads it and follows it with a
watch, so a new version takes effect without a restart: a message is checked against the
latest schema first (what is required, types, bounds), and a property the schema no longer
requires takes the schema's ``default`` before the message is read. Until a version is
published (or while the bucket is missing), the built-in v1 is the one checked.

A published schema is compiled in a thread, with a time limit, and with every remote
``$ref`` refused (fastjsonschema would otherwise fetch the URL, blocking, on the event
loop): one that does not compile is refused and logged, and the last good one stays; a
process that starts meanwhile takes the newest good version the bucket's history holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import fastjsonschema
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)
from nats.js.kv import KeyValue

from .identity import SCHEMA_ADMIN
from .messages import TYPES, Violation, schemas
from .settings import HubSettings

log = logging.getLogger(__name__)

BUCKET = "HMP_SCHEMAS"
#: Seconds a schema may take to compile before it is refused.
COMPILE_TIMEOUT = 5.0
#: Seconds between looks for a bucket that is not there yet.
_RETRY = 5.0

Validator = Callable[[Any], Any]


class UnusableSchema(ValueError):
    """A published schema that cannot be used: why."""


def _refuse(uri: str) -> Any:
    raise fastjsonschema.JsonSchemaDefinitionException(
        f"$ref to {uri!r} refused: a published schema must be self-contained (no remote "
        "references)")


class _NoRemote(Mapping[str, Callable[[str], Any]]):
    """fastjsonschema's ``handlers``: every URI scheme (http, file, none at all) refused."""

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


async def compile_schema(schema: Any) -> Validator:
    """A validator for ``schema``, compiled in a thread with remote references refused;
    UnusableSchema when it does not compile within COMPILE_TIMEOUT."""
    if not isinstance(schema, dict):
        raise UnusableSchema("a schema is a JSON object")
    try:
        async with asyncio.timeout(COMPILE_TIMEOUT):
            return await asyncio.to_thread(fastjsonschema.compile, schema,
                                           handlers=_NoRemote())
    except TimeoutError:
        raise UnusableSchema(f"did not compile within {COMPILE_TIMEOUT:g} s") from None
    except (fastjsonschema.JsonSchemaException, ValueError, TypeError, KeyError,
            RecursionError) as exc:
        raise UnusableSchema(f"{type(exc).__name__}: {exc}") from None


@functools.cache
def _builtin() -> dict[str, Any]:
    return schemas()


class SchemaRegistry:
    """The latest good schema of each type, kept current by a watch of the bucket."""

    def __init__(self, js: Any, *, replicas: int = 1) -> None:
        self.js = js
        self.replicas = replicas  # the bucket's copies on a NATS cluster (HUB_REPLICAS)
        self.kv: KeyValue | None = None
        #: kind -> (version, schema), of the validator in use.
        self.latest: dict[str, tuple[int, dict[str, Any]]] = {}
        self._validators: dict[str, Validator] = {}
        self._watch: asyncio.Task[None] | None = None
        self._watcher: Any = None

    @classmethod
    async def open(cls, js: Any, *, seed: bool = False, replicas: int = 1) -> SchemaRegistry:
        """The registry on this hub, with the bucket's current versions read (``seed``:
        publish the built-in v1 where nothing is, which only the schema admin may)."""
        registry = cls(js, replicas=replicas)
        for kind, schema in _builtin().items():
            await registry._take(kind, 1, schema, builtin=True)
        if seed:
            await registry.seed()
        if await registry._bind():
            await registry._read_current()
        registry._watch = asyncio.create_task(registry._follow(), name="hmp-schemas")
        return registry

    async def seed(self) -> None:
        """Create the bucket and publish the built-in v1 of each type it lacks (the
        schema admin's to do)."""
        self.kv = await self.js.create_key_value(KeyValueConfig(
            bucket=BUCKET, history=16, storage=StorageType.FILE, replicas=self.replicas))
        for kind, schema in _builtin().items():
            with contextlib.suppress(KeyWrongLastSequenceError):
                await self.kv.create(kind, json.dumps({"version": 1, "schema": schema})
                                     .encode())

    async def close(self) -> None:
        """Stop watching."""
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.wait([self._watch], timeout=5)

    def version(self, kind: str) -> int:
        """The version of ``kind``'s schema in use (1: the built-in)."""
        return self.latest.get(kind, (0, {}))[0]

    async def publish(self, kind: str, schema: dict[str, Any]) -> int:
        """Publish a new version of ``kind``'s schema (the schema admin's to do); its
        number. UnusableSchema when it would be refused."""
        if kind not in TYPES:
            raise ValueError(f"unknown HMP message type {kind!r}")
        await compile_schema(schema)
        if self.kv is None:
            await self.seed()
        assert self.kv is not None
        while True:
            try:
                entry = await self.kv.get(kind)
                current = json.loads(entry.value or b"{}").get("version", 1)
                revision = entry.revision
            except KeyNotFoundError:
                current, revision = 1, 0
            value = json.dumps({"version": current + 1, "schema": schema}).encode()
            try:
                await self.kv.update(kind, value, last=revision)
            except KeyWrongLastSequenceError:
                continue  # someone published at the same time: number after theirs
            await self._take(kind, int(current) + 1, schema)
            return int(current) + 1

    def check(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` checked against the latest schema of its type, with the defaults of
        properties that schema no longer requires; Violation names what breaks it."""
        kind = data.get("type")
        validator = self._validators.get(str(kind))
        if validator is None:
            return data
        try:
            validator(data)
        except fastjsonschema.JsonSchemaValueException as error:
            path = [str(p) for p in error.path[1:]]  # the first is the message itself
            if error.rule == "required":
                wanted = error.rule_definition or []
                path.append(next((f for f in wanted if f not in data), "body"))
            rule = error.message.removeprefix(error.name or "").strip()
            raise Violation(".".join(path) or "body",
                            f"{rule} (schema v{self.version(str(kind))})",
                            message_id=_text(data.get("message_id")),
                            sender_id=_text(data.get("sender_id"))) from None
        schema = self.latest[str(kind)][1]
        filled = dict(data)
        for name, spec in (schema.get("properties") or {}).items():
            if name not in filled and isinstance(spec, dict) and "default" in spec:
                filled[name] = spec["default"]
        return filled

    async def _bind(self) -> bool:
        """Open the bucket, when it is there."""
        try:
            self.kv = await self.js.key_value(BUCKET)
        except BucketNotFoundError:
            return False
        return True

    async def _read_current(self) -> None:
        """Start the watch and take what it finds first: each type's newest entry, or,
        when that is refused, the newest good one its history holds."""
        assert self.kv is not None
        self._watcher = await self.kv.watchall()
        async for entry in self._watcher:
            if entry is None:  # the current entries are all read
                return
            if entry.value and not await self._offer(entry.key, entry.value):
                with contextlib.suppress(NoKeysError):
                    for older in reversed((await self.kv.history(entry.key))[:-1]):
                        if await self._offer(entry.key, older.value or b"", quiet=True):
                            break

    async def _follow(self) -> None:
        while self._watcher is None:  # the schema admin has not created the bucket yet
            await asyncio.sleep(_RETRY)
            if await self._bind():
                await self._read_current()
        async for entry in self._watcher:
            if entry is not None and entry.value:
                await self._offer(entry.key, entry.value)

    async def _offer(self, kind: str, value: bytes, *, quiet: bool = False) -> bool:
        """Use a published entry when it is usable and not older than the one in use;
        whether it was usable."""
        try:
            published = json.loads(value)
            version, schema = int(published["version"]), published["schema"]
        except (ValueError, KeyError, TypeError) as exc:
            if not quiet:
                log.warning("published schema of %r refused, v%d stays: %s: %s", kind,
                            self.version(kind), type(exc).__name__, exc)
            return False
        try:
            await self._take(kind, version, schema)
        except UnusableSchema as exc:
            if not quiet:
                log.warning("published schema v%d of %r refused, v%d stays: %s", version,
                            kind, self.version(kind), exc)
            return False
        return True

    async def _take(self, kind: str, version: int, schema: Any, *,
                    builtin: bool = False) -> None:
        validator = await (asyncio.to_thread(_compiled, kind) if builtin
                           else compile_schema(schema))
        if version >= self.version(kind):
            self.latest[kind] = (version, schema)
            self._validators[kind] = validator


@functools.cache
def _compiled(kind: str) -> Validator:
    """The built-in v1 of ``kind``, compiled once per process (it has no $ref to fetch)."""
    return fastjsonschema.compile(_builtin()[kind], handlers=_NoRemote())


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


async def seed_embedded(js: Any, settings: HubSettings) -> None:
    """With the embedded server: the built-in schemas published, as the schema admin,
    when its bucket is not there yet (its first start)."""
    try:
        await js.key_value(BUCKET)
    except BucketNotFoundError:
        await publish_builtin_schemas(settings)


async def publish_builtin_schemas(settings: HubSettings) -> None:
    """As the schema admin (the embedded server's, or NATS_CREDS_FILE's): the schema
    bucket created and the built-in v1 published where nothing is."""
    from .connection import open_connection

    nc, embedded = await open_connection(settings, SCHEMA_ADMIN)
    try:
        await SchemaRegistry(nc.jetstream(), replicas=settings.hub_replicas).seed()
    finally:
        await nc.close()
        if embedded is not None:
            await embedded.stop()

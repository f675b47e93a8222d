"""HMP's JSON Schemas, published and versioned on the hub; every process validates
against the latest published version of each type.

The bucket ``HMP_SCHEMAS`` holds one entry per message type: ``{"version": N, "schema":
{...}}``. The first process finds it empty and publishes the built-in v1 schemas
(``messages.schemas()``). A new version (``publish``) reaches every running process
through its watch of the bucket, without a restart: a message is checked against the
latest schema first (what is required, types, bounds), and a property the schema no
longer requires takes the schema's ``default`` before the message is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import fastjsonschema
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from .messages import TYPES, Violation, schemas

log = logging.getLogger(__name__)

BUCKET = "HMP_SCHEMAS"


class SchemaRegistry:
    """The latest published schema of each type, kept current by a watch."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv
        self.latest: dict[str, tuple[int, dict[str, Any]]] = {}
        self._validators: dict[str, Any] = {}
        self._watch: asyncio.Task[None] | None = None
        self._watcher: Any = None

    @classmethod
    async def open(cls, js: Any) -> SchemaRegistry:
        """The registry on this hub: v1 published if nothing is, then watched."""
        kv = await js.create_key_value(KeyValueConfig(bucket=BUCKET, history=16,
                                                      storage=StorageType.FILE))
        registry = cls(kv)
        for kind, schema in schemas().items():
            with contextlib.suppress(KeyWrongLastSequenceError):
                await kv.create(kind, json.dumps({"version": 1, "schema": schema}).encode())
        await registry._read_all()
        registry._watcher = await kv.watchall()
        registry._watch = asyncio.create_task(registry._follow(), name="hmp-schemas")
        return registry

    async def close(self) -> None:
        """Stop watching."""
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
        if self._watch is not None:
            await asyncio.wait([self._watch], timeout=5)
            self._watch.cancel()

    def version(self, kind: str) -> int:
        """The latest published version of ``kind``'s schema (0: none)."""
        return self.latest.get(kind, (0, {}))[0]

    async def publish(self, kind: str, schema: dict[str, Any]) -> int:
        """Publish a new version of ``kind``'s schema; its number."""
        if kind not in TYPES:
            raise ValueError(f"unknown HMP message type {kind!r}")
        fastjsonschema.compile(schema)  # JsonSchemaDefinitionException names what is wrong
        while True:
            try:
                entry = await self.kv.get(kind)
                current = json.loads(entry.value or b"{}").get("version", 0)
                revision = entry.revision
            except KeyNotFoundError:
                current, revision = 0, 0
            value = json.dumps({"version": current + 1, "schema": schema}).encode()
            try:
                await self.kv.update(kind, value, last=revision)
            except KeyWrongLastSequenceError:
                continue  # someone published at the same time: number after theirs
            self._take(kind, value)
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

    async def _read_all(self) -> None:
        for kind in TYPES:
            with contextlib.suppress(KeyNotFoundError):
                entry = await self.kv.get(kind)
                self._take(kind, entry.value or b"")

    async def _follow(self) -> None:
        async for entry in self._watcher:
            if entry is not None and entry.value:
                self._take(entry.key, entry.value)

    def _take(self, kind: str, value: bytes) -> None:
        try:
            published = json.loads(value)
            version, schema = int(published["version"]), published["schema"]
            validator = fastjsonschema.compile(schema)
        except (ValueError, KeyError, TypeError, fastjsonschema.JsonSchemaException) as exc:
            log.warning("published schema of %r unusable: %s", kind, exc)
            return
        if version >= self.version(kind):
            self.latest[kind] = (version, schema)
            self._validators[kind] = validator


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None

"""Workflows and their runs, kept on the hub (JetStream key-value buckets).

``HMP_WORKFLOWS`` holds each definition version under ``<workflow_id>.<version>`` (and the
newest version's number under ``<workflow_id>.latest``); a version once kept never changes
(keeping it again with other steps is refused), so a run that started on it reads the same
steps to its end. ``HMP_WORKFLOW_RUNS`` holds each run's state
under its id: the definition it runs (a copy), the document, every step's status and the
task ids it sent. The executor writes it after every change (compare-and-set on the
entry's revision), which is what lets another copy continue a run from its last finished
step. Cancelling sets a flag in the entry and tells the copy running it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from ..bus import Bus
from .definition import DefinitionError, Workflow, parse_definition
from .runs import Run

log = logging.getLogger(__name__)

DEFINITIONS, RUNS = "HMP_WORKFLOWS", "HMP_WORKFLOW_RUNS"
_WORKFLOW_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_RUN_KEY = re.compile(r"^run-[0-9a-f]{20}$")
#: The key suffix naming a workflow's newest version.
LATEST = "latest"
#: Where a copy running a run hears that it is cancelled.
CANCEL = "hmp.workflow.cancel"
_RACES = 10

class WorkflowStore:
    """Definitions and runs on the hub."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._definitions: KeyValue | None = None
        self._runs: KeyValue | None = None
        self._cache: dict[tuple[str, int], Workflow] = {}
        #: With ``follow``: every workflow's newest version, as the bucket says.
        self._latest: dict[str, int] = {}
        self._following: asyncio.Task[None] | None = None
        self._watcher: Any = None
        self.changed: Callable[[], None] | None = None  # follow: a newest version changed

    async def definitions(self) -> KeyValue:
        """The definitions bucket, created on first use."""
        if self._definitions is None:
            self._definitions = await self.bus.js.create_key_value(KeyValueConfig(
                bucket=DEFINITIONS, history=1, storage=StorageType.FILE,
                replicas=self.bus.settings.hub_replicas))
        return self._definitions

    async def runs(self) -> KeyValue:
        """The runs bucket (kept as long as requests are), created on first use."""
        if self._runs is None:
            self._runs = await self.bus.js.create_key_value(KeyValueConfig(
                bucket=RUNS, history=1, storage=StorageType.FILE,
                replicas=self.bus.settings.hub_replicas,
                ttl=self.bus.settings.hub_request_retention))
        return self._runs

    # -- definitions -----------------------------------------------------------------

    async def put(self, data: dict[str, Any], *, known: set[str] | None = None) -> Workflow:
        """Check and keep a definition. Without a ``version`` it becomes the next one
        (unless it is the latest one unchanged: that one is returned); a version already
        kept is refused unless it is the same definition."""
        if not isinstance(data, dict):
            raise DefinitionError("a workflow is one object: {workflow_id, steps, ...}")
        given = "version" in data
        workflow = parse_definition({**data, "version": data.get("version", 1)}, known=known)
        kv = await self.definitions()
        for _ in range(_RACES):
            if not given:
                latest = await self.get(workflow.workflow_id)
                if latest is not None and _same(latest, workflow.model_copy(
                        update={"version": latest.version})):
                    return latest  # unchanged: no new version
                workflow = workflow.model_copy(update={
                    "version": (latest.version if latest else 0) + 1})
            key = f"{workflow.workflow_id}.{workflow.version}"
            try:
                await kv.create(key, workflow.model_dump_json(by_alias=True).encode())
                await self._point(workflow.workflow_id, workflow.version)
                return workflow
            except KeyWrongLastSequenceError:
                kept = await self.get(workflow.workflow_id, workflow.version)
                if given:
                    if kept is not None and _same(kept, workflow):
                        return kept
                    raise DefinitionError(
                        f"version {workflow.version} of {workflow.workflow_id!r} is kept "
                        "already with other steps; a version never changes (send it "
                        "without a version to keep the next one)") from None
        raise DefinitionError("other writers kept winning the race; try again")

    async def _point(self, workflow_id: str, version: int) -> None:
        """``<id>.latest`` names the newest version (one read finds it; raised, never
        lowered, by compare-and-set)."""
        kv = await self.definitions()
        key = f"{workflow_id}.{LATEST}"
        for _ in range(_RACES):
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                try:
                    await kv.create(key, str(version).encode())
                    return
                except KeyWrongLastSequenceError:
                    continue
            if int(entry.value or b"0") >= version:
                return
            try:
                await kv.update(key, str(version).encode(), last=entry.revision)
                return
            except KeyWrongLastSequenceError:
                continue

    async def get(self, workflow_id: str, version: int | None = None) -> Workflow | None:
        """A version of a workflow (the latest when ``version`` is None), or None. A kept
        version never changes, so each is read from the bucket once per process."""
        if not _WORKFLOW_KEY.match(workflow_id):
            return None
        if version is None:
            version = await self.latest_version(workflow_id)
            if not version:
                return None
        cached = self._cache.get((workflow_id, version))
        if cached is not None:
            return cached
        kv = await self.definitions()
        try:
            entry = await kv.get(f"{workflow_id}.{version}")
        except (KeyNotFoundError, ValueError):
            return None
        if not entry.value:
            return None
        workflow = Workflow.model_validate_json(entry.value)
        self._cache[(workflow_id, version)] = workflow
        return workflow

    async def versions(self) -> dict[str, list[int]]:
        """Every workflow id and its versions, oldest first."""
        await self.definitions()
        found: dict[str, list[int]] = {}
        for key in await self._keys(DEFINITIONS):
            workflow_id, _, version = key.rpartition(".")
            if version.isdigit():
                found.setdefault(workflow_id, []).append(int(version))
        return {k: sorted(v) for k, v in sorted(found.items())}

    async def _keys(self, bucket: str) -> list[str]:
        """The keys a bucket holds, from its stream's subjects (one request). nats-py's
        ``KeyValue.keys()`` watches the bucket and stops at its "no more" marker, which it
        can queue before entries already delivered but not yet handed over: on a busy
        machine it answered "no keys" for a bucket holding some (a listing said "none yet"
        right after a workflow had run). Neither bucket has deletes (definitions are kept,
        runs expire), so its subjects are its keys."""
        prefix = f"$KV.{bucket}."
        info = await self.bus.js.stream_info(f"KV_{bucket}", subjects_filter=f"{prefix}>")
        return [subject.removeprefix(prefix) for subject in (info.state.subjects or {})]

    async def follow(self) -> None:
        """Keep every workflow's newest version in memory from now on (a watch of the
        ``.latest`` keys: a version kept elsewhere is seen as soon as the bucket has it),
        so starting a run reads no pointer. Returns once the current ones are in."""
        kv = await self.definitions()
        self._watcher = await kv.watch(f"*.{LATEST}")
        ready = asyncio.Event()

        async def keep() -> None:
            async for entry in self._watcher:
                if entry is None:  # the current values are all in
                    ready.set()
                    continue
                workflow_id = entry.key.rpartition(".")[0]
                with contextlib.suppress(ValueError):
                    self._latest[workflow_id] = int(entry.value or b"0")
                if ready.is_set() and self.changed is not None:
                    self.changed()
            ready.set()

        self._following = asyncio.create_task(keep(), name="workflow versions")
        await asyncio.wait_for(ready.wait(), 10)

    async def unfollow(self) -> None:
        """Stop the watch of ``follow``."""
        if self._following is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
            self._following.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._following
            self._following = None

    async def latest_version(self, workflow_id: str) -> int:
        """The newest version of ``workflow_id`` (0: none)."""
        if self._following is not None and not self._following.done():
            known = self._latest.get(workflow_id)
            if known is not None:
                return known
        kv = await self.definitions()
        try:
            entry = await kv.get(f"{workflow_id}.{LATEST}")
            return int(entry.value or b"0")
        except KeyNotFoundError:
            return 0

    async def latest(self) -> list[Workflow]:
        """The newest version of every workflow: following, the versions the watch keeps,
        each read once per process (no listing of the bucket); else from the bucket's keys."""
        following = self._following is not None and not self._following.done()
        newest = sorted(self._latest.items()) if following else \
            [(w, versions[-1]) for w, versions in (await self.versions()).items()]
        found = [await self.get(w, version) for w, version in newest if version]
        return [workflow for workflow in found if workflow is not None]

    # -- runs --------------------------------------------------------------------------

    async def load(self, run_id: str) -> tuple[Run | None, int | None]:
        """A run and its entry's revision (None, None: no such run)."""
        if not _RUN_KEY.match(run_id):
            return None, None
        kv = await self.runs()
        try:
            entry = await kv.get(run_id)
        except (KeyNotFoundError, ValueError):
            return None, None
        if not entry.value:
            return None, None
        return Run.model_validate_json(entry.value), entry.revision

    async def run(self, run_id: str) -> Run | None:
        """A run, or None."""
        run, _ = await self.load(run_id)
        return run

    async def create(self, run: Run) -> tuple[Run, int, bool]:
        """Keep a new run; when one with its id exists (a redelivered request), that one.
        The run, its entry's revision, and whether it is new."""
        kv = await self.runs()
        try:
            return run, await kv.create(run.run_id, run.model_dump_json(
                by_alias=True).encode()), True
        except KeyWrongLastSequenceError:
            found, revision = await self.load(run.run_id)
            if found is None or revision is None:
                raise
            return found, revision, False

    async def save(self, run: Run, revision: int) -> tuple[Run, int]:
        """Write ``run`` over the entry at ``revision``. A cancel written in between is
        kept (the only other writer); the run and the new revision."""
        kv = await self.runs()
        for _ in range(_RACES):
            try:
                return run, await kv.update(run.run_id, run.model_dump_json(
                    by_alias=True).encode(), last=revision)
            except KeyWrongLastSequenceError:
                stored, latest = await self.load(run.run_id)
                if stored is None or latest is None:
                    raise
                run = run.model_copy(update={"cancel_requested": stored.cancel_requested
                                             or run.cancel_requested})
                revision = latest
        raise RuntimeError(f"run {run.run_id}: could not save its state")

    async def list_runs(self, *, workflow_id: str | None = None, limit: int = 50) -> list[Run]:
        """The runs kept, newest first."""
        await self.runs()
        keys = await self._keys(RUNS)
        runs = [r for r in [await self.run(key) for key in keys] if r is not None
                and (workflow_id is None or r.workflow_id == workflow_id)]
        return sorted(runs, key=lambda r: r.created_at, reverse=True)[:limit]

    async def cancel(self, run_id: str) -> Run | None:
        """Ask for a run to end: the flag is kept (a copy continuing the run sees it) and
        the copy running it is told at once. The run as it is now; None: no such run."""
        for _ in range(_RACES):
            run, revision = await self.load(run_id)
            if run is None or revision is None:
                return None
            if run.status != "running" or run.cancel_requested:
                break
            try:
                await (await self.runs()).update(run_id, run.model_copy(update={
                    "cancel_requested": True}).model_dump_json(by_alias=True).encode(),
                    last=revision)
            except KeyWrongLastSequenceError:
                continue
            run = run.model_copy(update={"cancel_requested": True})
            break
        else:
            run = await self.run(run_id)
        await self.bus.nc.publish(f"{CANCEL}.{run_id}", b"")
        await self.bus.nc.flush()
        return run


def _same(a: Workflow, b: Workflow) -> bool:
    return bool(json.loads(a.model_dump_json()) == json.loads(b.model_dump_json()))

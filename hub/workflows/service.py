"""The workflow executor as one of the hub's services: the definitions of
HUB_WORKFLOWS_FILE (and the shipped ones asked for) kept on the hub, then the executor on
the bus, offering each workflow's capability as definitions come and go."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from agent_core import ConfigError
from agent_core.background import Background, repeating

from ..agent import AgentRunner
from ..bus import Bus
from .definition import DefinitionError
from .executor import WorkflowExecutor
from .store import WorkflowStore

log = logging.getLogger(__name__)

#: Workflows that ship with the hub (``hub/workflows/shipped/<id>.yaml``).
SHIPPED = Path(__file__).parent / "shipped"
_REFRESH = 5.0


def read_definitions(path: Path) -> list[dict[str, Any]]:
    """The definitions in a YAML file: a list, or ``{workflows: [...]}``, or one."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if isinstance(data, dict) and "workflows" in data:
        data = data["workflows"]
    found = data if isinstance(data, list) else [data]
    if not all(isinstance(d, dict) for d in found):
        raise ConfigError(f"{path}: expected workflow definitions (objects with "
                          "workflow_id and steps)")
    return found


class ExecutorService:
    """Keeps the files' definitions, then runs the executor until stopped."""

    def __init__(self, bus: Bus, *, files: Iterable[Path] = ()) -> None:
        self.bus = bus
        self.files = list(files)
        self.store = WorkflowStore(bus)
        self.executor = WorkflowExecutor(bus, self.store)
        self.runner = AgentRunner(bus, self.executor)
        self._refresh: Background | None = None

    async def start(self) -> None:
        for path in self.files:
            for data in read_definitions(path):
                try:
                    workflow = await self.store.put(data)
                except DefinitionError as exc:
                    raise ConfigError(f"{path}: workflow {data.get('workflow_id')!r}: "
                                      f"{exc}") from None
                log.info("workflow %s: version %d from %s", workflow.workflow_id,
                         workflow.version, path.name)
        await self.executor.start()
        await self.runner.start()
        self._refresh = repeating(self.executor.refresh, _REFRESH, "workflow capabilities")

    async def stop(self) -> None:
        if self._refresh is not None:
            await self._refresh.stop()
        await self.runner.stop()
        await self.executor.stop()

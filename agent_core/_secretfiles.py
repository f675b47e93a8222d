"""Secret settings read from files, the way a Kubernetes Secret mounted as a volume lays
them out: ``HERMES_SECRETS_DIR`` names one or more directories (separated by ``:``) holding
one file per setting, named as its variable (``LLM_API_KEY``, ``REDIS_URL``, ``NATS_URL``);
a file's content, stripped of surrounding whitespace, is the value. Later directories win
over earlier ones; the environment and ``.env`` win over them all. Read from the process
environment only (like ``HERMES_CONFIG``): it says where the other settings are."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError

ENV = "HERMES_SECRETS_DIR"


def secrets_dirs() -> list[Path]:
    """The directories ``HERMES_SECRETS_DIR`` names, in order; each must exist."""
    dirs = [Path(p).expanduser() for p in os.environ.get(ENV, "").split(os.pathsep)
            if p.strip()]
    for path in dirs:
        if not path.is_dir():
            raise ConfigError(f"{ENV}: {str(path)!r} is not a directory")
    return dirs


def env_or_file(name: str) -> str | None:
    """The variable ``name`` from the environment, else from a file of that name in the
    secrets directories (the last holding one wins); None when neither has it."""
    if os.environ.get(name):
        return os.environ[name]
    if Path(name).name != name or name.startswith("."):
        return None  # a variable name, never a path
    for directory in reversed(secrets_dirs()):
        path = directory / name
        if path.is_file():
            return path.read_text(encoding="utf-8").strip() or None
    return None

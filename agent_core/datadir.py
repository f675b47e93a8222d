"""The data directory is private: folders 0700, files 0600, for the user the service runs as.

It holds conversations (Valkey's AOF and RDB), the NATS store, the servers' passwords and
tokens, task sandboxes and the audit file; nobody else on the machine reads any of it.
``hermes-gateway`` sets the umask 077 as it starts (:data:`PRIVATE_UMASK`), so whatever it
and the servers it starts create is private; :func:`private_dir` creates folders 0700
whatever the umask (an embedding process keeps its own); :func:`secure_data_dir` tightens,
at start, what an earlier version (or an operator) left readable by others, and says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: The umask of the service and of the servers it starts: no bit for group or others.
PRIVATE_UMASK = 0o077
#: Folders of the data directory that hold servers' data and secrets: tightened to their
#: last file at start. The rest (sandboxes can hold many files) is tightened one level
#: deep: a 0700 folder already keeps others from everything below it.
_SERVERS = ("valkey", "nats")


def private_dir(path: Path) -> Path:
    """``path`` as a folder, created (with any missing parent) mode 0700."""
    missing = []
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            folder.mkdir(mode=0o700)
    return Path(path)


def secure_data_dir(data_dir: Path) -> None:
    """Create the data directory 0700, and tighten what is in it that group or others may
    read: the directory, each entry in it, and everything in the servers' folders (folders
    to 0700, files to 0600). One log line says what was changed."""
    root = private_dir(Path(data_dir))
    entries = [root, *_children(root)]
    for name in _SERVERS:
        if (root / name).is_dir():
            entries.extend(_tree(root / name))
    changed = sum(_tighten(path) for path in entries)
    if changed:
        log.warning("made %d files and folders under %s private (0700/0600): group or "
                    "others could read them", changed, root)


def tighten_file(path: Path) -> bool:
    """Make one file 0600 if group or others may read or write it; whether it was."""
    changed = _tighten(Path(path))
    if changed:
        log.warning("made %s private (0600): group or others could read it", path)
    return changed


def _children(folder: Path) -> Iterator[Path]:
    try:
        yield from folder.iterdir()
    except OSError:
        return


def _tree(folder: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in (*dirnames, *filenames):
            yield Path(dirpath) / name


def _tighten(path: Path) -> bool:
    """Remove group and other bits from a folder or regular file (never through a link:
    a symlink's own mode means nothing, and its target is not ours to change)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)) or not mode & 0o077:
        return False
    try:
        path.chmod(stat.S_IMODE(mode) & 0o700)
    except OSError as exc:  # not ours (a mounted volume's root, say): say so, go on
        log.info("could not make %s private: %s", path, exc)
        return False
    return True

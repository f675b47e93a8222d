"""Who a local process is, and whether it listens on a loopback port: what a LocalServer
checks before it hands a server found through its state file a password or a token.

A state file outlives a crash. By the next start the pid in it may be gone, or reused by
another program, and the port in it may be anyone's (any local user may listen on a free
loopback port). So a recorded server is only trusted when its pid is alive, runs the
server's binary from the server's own folder, and is the process listening on the port.
On Linux all of this is read from /proc; elsewhere the port's owner is asked of ``lsof``
when it is installed, and the rest is unknown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Literal

_PROC = Path("/proc")

#: "gone": no such process; "other": a process that is not the server (another binary, or
#: run from another folder, or one this user may not inspect); "ours": the binary from the
#: folder; "unknown": alive, but this system does not say what it runs.
Identity = Literal["gone", "other", "ours", "unknown"]


def identify(pid: int, binary: Path, folder: Path) -> Identity:
    """Whether ``pid`` is ``binary`` run in ``folder``."""
    if pid <= 0 or not _alive(pid):
        return "gone"
    if not (_PROC / "self").exists():
        return "unknown"
    try:
        exe = _link(_PROC / str(pid) / "exe")
        cwd = _link(_PROC / str(pid) / "cwd")
    except FileNotFoundError:
        return "gone"
    except OSError:  # PermissionError: another user's process
        return "other"
    return "ours" if _same(exe, binary) and _same(cwd, folder) else "other"


def listens(pid: int, port: int) -> bool | None:
    """Whether ``pid`` has a socket listening on TCP ``port`` (in this network namespace:
    where this process's clients will connect); None when this system cannot tell."""
    if (_PROC / "net" / "tcp").exists():
        return _listens_proc(pid, port)
    lsof = shutil.which("lsof")
    if lsof is None:
        return None
    try:
        found = subprocess.run(
            [lsof, "-nP", "-a", "-p", str(pid), f"-iTCP:{port}", "-sTCP:LISTEN", "-t"],
            capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return str(pid) in found.stdout.split()


def _listens_proc(pid: int, port: int) -> bool:
    sockets = set()
    try:
        fds = list((_PROC / str(pid) / "fd").iterdir())
    except OSError:  # gone, or not ours to inspect
        return False
    for fd in fds:
        try:
            target = str(fd.readlink())
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:["):-1])
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address (hex ip:port), ..., st (0A: LISTEN), ..., inode
            if (len(fields) > 9 and fields[3] == "0A" and fields[9] in sockets
                    and int(fields[1].rsplit(":", 1)[1], 16) == port):
                return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and another user's
        return True
    return True


def _link(path: Path) -> Path:
    # A binary replaced since it started (an upgrade) reads as "<path> (deleted)".
    return Path(str(path.readlink()).removesuffix(" (deleted)"))


def _same(found: Path, expected: Path) -> bool:
    return os.path.realpath(found) == os.path.realpath(expected)

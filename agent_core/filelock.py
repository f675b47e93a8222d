"""FileLock: one holder at a time across processes (``flock``) and threads.

What the local servers' start-up, the audit file and the sales reports need from a lock
file, and no more: exclusive, waited for up to a timeout, released on exit (and by the
kernel when a holder dies). The ``filelock`` package did this at an import of ~40 modules
and ~13-15 ms in every process (its 4.x loads decimal, secrets, platform and a registry
for soft, async and Windows locks); this is ``fcntl.flock``, as its Unix lock is (on
Windows, ``msvcrt.locking`` of the file's first byte, as its Windows lock is; not run
here, where CI is Linux).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType


class FileLockTimeout(TimeoutError):
    """The lock was not free within the timeout."""


class FileLock:
    """An exclusive lock on ``path`` (created 0600 if missing; never deleted, so that a
    process waiting on it and one creating it again never hold two different files).
    ``timeout``: seconds to wait, None to wait for as long as it takes. Not reentrant."""

    def __init__(self, path: str | os.PathLike[str], timeout: float | None = None) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._thread = threading.Lock()  # flock excludes processes; this, the threads
        self._fd: int | None = None

    def acquire(self) -> None:
        """Wait for the lock (up to the timeout: FileLockTimeout)."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        if not self._thread.acquire(timeout=-1 if self.timeout is None else self.timeout):
            raise self._timed_out()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited (PEP 446)
            try:
                _flock(fd, deadline, self._timed_out)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        except BaseException:
            self._thread.release()
            raise

    def release(self) -> None:
        """Let the next holder in."""
        fd, self._fd = self._fd, None
        if fd is None:
            raise RuntimeError(f"{self.path} is not locked by this FileLock")
        try:
            _unlock(fd)
        finally:
            os.close(fd)
            self._thread.release()

    @property
    def is_locked(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()

    def _timed_out(self) -> FileLockTimeout:
        return FileLockTimeout(f"{self.path} stayed locked for {self.timeout:g}s")


def _flock(fd: int, deadline: float | None, timed_out: Callable[[], Exception]) -> None:
    """Take the lock on ``fd``, trying again (every 1 ms at first, 50 ms at most) until
    ``deadline``; with none, waiting in the kernel where it can."""
    if deadline is None and _lock_waiting is not None:
        _lock_waiting(fd)
        return
    pause = 0.001
    while not _try_lock(fd):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise timed_out()
        time.sleep(pause if left is None else min(pause, left))
        pause = min(pause * 2, 0.05)


if sys.platform == "win32":
    import msvcrt

    _lock_waiting: Callable[[int], None] | None = None

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _lock_waiting(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

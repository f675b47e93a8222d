"""FileLock: exclusive across processes and threads, waited for up to a timeout, and let go
of by the kernel when its holder dies."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent_core import FileLock
from agent_core.filelock import FileLockTimeout

HOLDER = """
import sys
from agent_core import FileLock
lock = FileLock(sys.argv[1], timeout=60)
lock.acquire()
print("held", flush=True)
sys.stdin.readline()  # until the test says so (or closes the pipe)
"""

COUNTER = """
import sys
from pathlib import Path
from agent_core import FileLock
path = Path(sys.argv[1])
lock = FileLock(str(path) + ".lock", timeout=120)
for _ in range(int(sys.argv[2])):
    with lock:
        value = int(path.read_text() or 0)
        path.write_text(str(value + 1))
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    return child


def test_another_process_waits_until_the_holder_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "start.lock"
    child = _holder(path)
    try:
        lock = FileLock(path, timeout=0.2)
        with pytest.raises(FileLockTimeout, match=r"start\.lock stayed locked for 0\.2s"):
            lock.acquire()
        assert not lock.is_locked
        child.communicate("go\n", timeout=60)  # the holder exits, releasing it
        with FileLock(path, timeout=60) as taken:
            assert taken.is_locked
        assert not taken.is_locked
    finally:
        child.kill()
        child.communicate(timeout=60)


def test_a_holder_that_dies_leaves_the_lock_free(tmp_path: Path) -> None:
    path = tmp_path / "start.lock"
    child = _holder(path)
    child.kill()
    child.communicate(timeout=60)
    with FileLock(path, timeout=60):
        pass
    assert (path.stat().st_mode & 0o777) == 0o600


def test_processes_incrementing_one_file_lose_no_update(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    children = [subprocess.Popen([sys.executable, "-c", COUNTER, str(counter), "150"])
                for _ in range(3)]
    assert [c.wait(timeout=120) for c in children] == [0, 0, 0]
    assert counter.read_text() == "450"


def test_threads_sharing_one_lock_take_turns(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "audit.lock", timeout=60)
    inside, most, entered = [0], [0], threading.Barrier(4)

    def work() -> None:
        entered.wait()
        for _ in range(200):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                time.sleep(0.0001)  # room for another thread to come in, were it let in
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1 and not lock.is_locked


def test_a_timeout_counts_the_wait_for_a_thread_of_the_same_process(tmp_path: Path) -> None:
    held = FileLock(tmp_path / "x.lock", timeout=60)
    held.acquire()
    try:
        with pytest.raises(FileLockTimeout):
            FileLock(tmp_path / "x.lock", timeout=0.05).acquire()  # another object: flock
        with pytest.raises(FileLockTimeout):
            held.timeout = 0.05
            held.acquire()  # the same object: not reentrant, and says so by timing out
    finally:
        held.release()
    with pytest.raises(RuntimeError, match="not locked"):
        held.release()

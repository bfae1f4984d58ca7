"""scripts/compile_bytecode.py: `make setup` byte-compiles the installed modules the commands import."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "compile_bytecode.py"
TAG = sys.implementation.cache_tag


@pytest.fixture(scope="module")
def tool() -> Iterator[dict]:
    """The script as a module registered under its name: its process pool pickles functions by name."""
    spec = importlib.util.spec_from_file_location("compile_bytecode", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["compile_bytecode"] = module
    spec.loader.exec_module(module)
    yield vars(module)
    del sys.modules["compile_bytecode"]


def packages(root: Path) -> Path:
    for name in ("pkg/a.py", "pkg/b.py", "pkg/sub/c.py", "other/d.py", "pip/e.py", "top.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("X = 1\n")
    return root


def compiled(folder: Path) -> set[str]:
    return {p.name for p in (folder / "__pycache__").glob(f"*.{TAG}.pyc")}


def test_the_listed_modules_are_compiled_in_parallel_and_nothing_else(tool, tmp_path):
    root = packages(tmp_path)
    listed = {"pkg": ["a", "gone"], ".": ["top"], "not/installed": ["x"]}
    assert tool["compile_listed"](root, listed, 2) == (2, 0)
    assert compiled(root / "pkg") == {f"a.{TAG}.pyc"}
    assert compiled(root) == {f"top.{TAG}.pyc"}
    assert not (root / "pkg" / "sub" / "__pycache__").exists()
    assert not (root / "other" / "__pycache__").exists()


def test_a_module_that_does_not_compile_is_counted_and_the_rest_still_compiled(tool, tmp_path):
    root = packages(tmp_path)
    (root / "pkg" / "broken.py").write_text("def (:\n")
    assert tool["compile_listed"](root, {"pkg": ["a", "broken", "b"]}, 2) == (3, 1)
    assert compiled(root / "pkg") == {f"a.{TAG}.pyc", f"b.{TAG}.pyc"}


def test_record_lists_the_modules_with_this_pythons_bytecode_but_not_the_installers(tool, tmp_path):
    root = packages(tmp_path)
    tool["compile_listed"](root, {"pkg/sub": ["c"], "other": ["d"], "pip": ["e"], ".": ["top"]}, 1)
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "a.cpython-30.pyc").write_bytes(b"")  # another Python's: not counted
    (root / "other" / "d.py").rename(root / "other" / "moved.py")  # bytecode without its source: not counted
    assert tool["modules_with_bytecode"](root) == {".": ["top"], "pkg/sub": ["c"]}


def test_the_recorded_list_is_what_the_compile_reads(tool, tmp_path, monkeypatch):
    root = packages(tmp_path / "site")
    tool["compile_listed"](root, {"pkg": ["a", "b"], ".": ["top"]}, 1)
    monkeypatch.setitem(tool["main"].__globals__, "site_packages", lambda: root)
    listing = tmp_path / "modules.txt"
    assert tool["main"](["--record", "--list", str(listing)]) == 0
    assert tool["listed_modules"](listing) == {".": ["top"], "pkg": ["a", "b"]}
    for pyc in root.rglob("*.pyc"):
        pyc.unlink()
    assert tool["main"](["--list", str(listing), "--package", "pkg"]) == 0  # one package's modules only
    assert compiled(root / "pkg") == {f"a.{TAG}.pyc", f"b.{TAG}.pyc"} and compiled(root) == set()


def test_a_missing_list_compiles_nothing_and_says_how_to_make_one(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--list", str(tmp_path / "none.txt")], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert f"{tmp_path / 'none.txt'}: no such list; nothing compiled (run with --record to make one)" in done.stderr


@pytest.mark.slow
def test_the_list_covers_the_installed_modules_a_training_run_imports(tool):
    """A stale list costs every fresh clone's first commands the compile time again (~35 s of
    `make test-fast`): after a dependency changes, re-record it as the script's docstring says."""
    probe = (
        "import json, sys, segperf.train, segperf.training.run, segperf.report.markdown;"
        "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = json.loads(done.stdout)
    root = tool["site_packages"]()
    listed = {
        root / folder / f"{name}.py" for folder, names in tool["listed_modules"](tool["LIST"]).items() for name in names
    }
    installed = [Path(f) for f in loaded if f and f.endswith(".py") and Path(f).is_relative_to(root)]
    missing = [f for f in installed if f not in listed]
    assert len(installed) > 1000
    assert len(missing) <= 0.02 * len(installed), sorted(str(f.relative_to(root)) for f in missing)[:20]

"""torch.compile's cache shared by runs that overlap (segperf.training.compile_cache): each process compiles
into a copy of its own, seeded from the shared folder, and publishes what it added when it exits,
so that concurrent runs cannot leave the shared folder half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from segperf.training.compile_cache import SHARED, VARIABLE, private_folder, publish, runs_folder, seed
from tests.conftest import MNIST_TINY, REPO

# what a process does with the cache: the folder it compiles into, then a "compiled" entry of its own
SCRIPT = """
import os, sys
from pathlib import Path
from segperf.training.compile_cache import use_private_copy
private = use_private_copy()
assert use_private_copy() == private  # once per process: a sweep's next job keeps the copy
print(os.environ["TORCHINDUCTOR_CACHE_DIR"])
seeded = sorted(str(p.relative_to(private)) for p in private.rglob("*") if p.is_file())
print(",".join(seeded))
(private / "fxgraph" / "new").mkdir(parents=True, exist_ok=True)
(private / "fxgraph" / "new" / sys.argv[1]).write_bytes(b"compiled")
"""


def run_script(env: dict[str, str], name: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, name], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def cache_env(shared: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (VARIABLE, SHARED)}
    return env | {VARIABLE: str(shared)}


def test_a_process_compiles_into_a_copy_of_its_own_and_publishes_what_it_added_when_it_exits(tmp_path):
    shared = tmp_path / "torchinductor"
    (shared / "fxgraph" / "old").mkdir(parents=True)
    (shared / "fxgraph" / "old" / "entry").write_bytes(b"earlier")
    (shared / "fxgraph" / "old" / ".12345.140123.tmp").write_bytes(b"half")  # another writer's temp file
    (shared / "locks").mkdir()
    (shared / "locks" / "x.lock").write_bytes(b"")
    folder, seeded = run_script(cache_env(shared), "first")
    assert Path(folder).parent == runs_folder(shared) and Path(folder) != shared
    assert seeded == "fxgraph/old/entry"  # no temp file, no lock
    assert (shared / "fxgraph" / "new" / "first").read_bytes() == b"compiled"  # published at exit
    assert not Path(folder).exists()  # the copy is gone
    assert not [p for p in runs_folder(shared).iterdir() if p.name != "publish.lock"]  # no staging left
    _, seeded = run_script(cache_env(shared), "second")
    assert seeded == "fxgraph/new/first,fxgraph/old/entry"  # the next process starts warm


def test_a_process_started_by_a_run_makes_its_own_copy_not_share_the_runs(tmp_path):
    """A DDP rank (or a tune's probe) inherits the run's environment: TORCHINDUCTOR_CACHE_DIR is the
    parent's copy, and the shared folder is in SEGPERF_SHARED_COMPILE_CACHE."""
    shared = tmp_path / "torchinductor"
    parents = private_folder(shared, pid=os.getpid())
    parents.mkdir(parents=True)
    env = cache_env(shared) | {VARIABLE: str(parents), SHARED: str(shared)}
    folder, _ = run_script(env, "rank1")
    assert Path(folder).parent == runs_folder(shared) and Path(folder) != parents
    assert (shared / "fxgraph" / "new" / "rank1").exists() and not (parents / "fxgraph").exists()


def test_a_copy_left_by_a_killed_process_is_removed_and_an_entry_already_published_is_kept(tmp_path):
    shared = tmp_path / "torchinductor"
    dead = private_folder(shared, pid=2**22 + 12345)  # above any pid this machine hands out
    (dead / "fxgraph").mkdir(parents=True)
    (shared / "fxgraph" / "k").mkdir(parents=True)
    (shared / "fxgraph" / "k" / "entry").write_bytes(b"first")
    mine = tmp_path / "mine"
    assert seed(shared, mine) == 1
    (mine / "fxgraph" / "k" / "entry").write_bytes(b"second")  # the same key compiled again
    assert publish(mine, shared) == 0 and (shared / "fxgraph" / "k" / "entry").read_bytes() == b"first"
    run_script(cache_env(shared), "later")
    assert not dead.exists()


@pytest.mark.slow  # three compiled runs at once, then a fourth (~3 minutes on 2 cores)
def test_concurrent_compiled_runs_against_one_cache_all_complete_and_a_fresh_run_after_them_too(tmp_path, tiny_mnist):
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k not in (VARIABLE, SHARED, "TRITON_CACHE_DIR")}
    env |= {"SEGPERF_CACHE": str(cache), "NO_ALBUMENTATIONS_UPDATE": "1"}
    args = [*MNIST_TINY, f"data.root={tiny_mnist}", "compile=on", "num_threads=1"]

    def start(name: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "segperf.train", *args, f"hydra.run.dir={tmp_path / name}"]
        return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    runs = {name: start(name) for name in ("a", "b", "c")}
    for name, process in runs.items():
        out, _ = process.communicate(timeout=900)
        assert process.returncode == 0, f"{name}: {out.decode()[-3000:]}"
    shared = cache / "torchinductor"
    assert list(shared.glob("fxgraph/*/*/*")), "the runs published their graphs"
    fresh = start("fresh")
    out, _ = fresh.communicate(timeout=900)
    assert fresh.returncode == 0, out.decode()[-3000:]
    for name in ("a", "b", "c", "fresh"):
        results = json.loads((tmp_path / name / "results.json").read_text())
        assert results["status"] == "completed" and "model.compile" not in results["adjusted"], name
    assert not [p for p in shared.rglob(".*") if p.is_file()]  # no temp file left where Inductor reads
    assert [p.name for p in runs_folder(shared).iterdir()] == ["publish.lock"]  # every copy removed

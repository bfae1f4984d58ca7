"""A truncated, damaged or foreign file given as a checkpoint (`infer ckpt=`, `resume=`): one
clear line naming the file, exit status 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from segperf.inference.checkpoint import InferenceError, load_net, resolve_source
from tests.conftest import REPO, TINY, run_cli


def cut_short(path, keep: int = 500):
    path.write_bytes(path.read_bytes()[:keep])
    return path


def damaged(path):
    """A zip that still has its central directory but whose first entry is overwritten."""
    raw = bytearray(path.read_bytes())
    raw[:30] = b"\0" * 30
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.slow
def test_infer_on_a_truncated_checkpoint_says_so_in_one_line_and_exits_2(tmp_path):
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"net.w": torch.ones(10_000)}, "net_config": {}}, ckpt)
    cut_short(ckpt)
    command = [sys.executable, "-m", "segperf.infer", f"ckpt={ckpt}", f"hydra.run.dir={tmp_path / 'out'}"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"segperf.infer: error: {ckpt}: not a readable checkpoint; it is truncated or damaged (an interrupted copy "
        "or download), or not a torch checkpoint (PytorchStreamReader failed reading zip archive: failed finding "
        "central directory)"
    )
    assert json.loads((tmp_path / "out" / "results.json").read_text())["status"] == "failed"


def test_a_damaged_or_foreign_file_is_not_taken_for_an_unsafe_one(tmp_path):
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"net.w": torch.ones(1000)}, "net_config": {}}, ckpt)
    with pytest.raises(InferenceError, match=r"last.ckpt: not a readable checkpoint; it is truncated or damaged"):
        load_net(damaged(ckpt))  # torch says "Weights only load failed" (UnpicklingError) for that too
    ckpt.write_text("a text file")
    with pytest.raises(InferenceError, match="not a readable checkpoint"):
        load_net(ckpt)


def test_a_folder_given_as_ckpt_points_at_run_dir(tmp_path):
    with pytest.raises(InferenceError, match=r"ckpt=.*: a folder, not a checkpoint file; give run_dir="):
        resolve_source(str(tmp_path), None)


@pytest.mark.slow
def test_resume_from_a_damaged_checkpoint_says_so_in_one_line_and_exits_2(tmp_path, tiny_carvana):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    overrides = [*TINY, f"data.root={tiny_carvana}", "perf.measure=false"]
    (run / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (run / "results.json").write_text(json.dumps({"status": "interrupted"}))
    (run / "checkpoints").mkdir()
    torch.save({"state_dict": {"net.w": torch.ones(1000)}, "global_step": 1}, run / "checkpoints" / "last.ckpt")
    damaged(run / "checkpoints" / "last.ckpt")  # passes the quick zip check: Lightning's load finds it
    done = run_cli([f"resume={run}"], cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"segperf: error: {run / 'checkpoints' / 'last.ckpt'}: not a readable checkpoint; ")

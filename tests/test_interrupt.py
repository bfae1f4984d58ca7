"""Interruptions lose nothing: Ctrl-C / SIGTERM leave a checkpoint, an "interrupted"
results.json and the summary; `resume=<run dir>` continues with the right counts."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import RandomSampler

from segperf.data.resumable import ResumableLoader, SkippingSampler
from segperf.schema import SettingsError
from segperf.training.checkpoints import (
    AtomicCheckpointIO,
    UnreadableCheckpointError,
    UnsafeCheckpointError,
    load_weights_only,
)
from segperf.training.resume import resume_argv, resume_checkpoint
from tests.conftest import REPO

# -- the loader resumes where the run stopped ----------------------------------------------------


def seeded_loader(samples: int = 10, batch: int = 3, done: list[int] | None = None) -> ResumableLoader:
    generator = torch.Generator().manual_seed(7)
    sampler = SkippingSampler(RandomSampler(range(100), num_samples=samples, generator=generator))
    batches = torch.utils.data.DataLoader(list(range(100)), batch_size=batch, sampler=sampler)
    return ResumableLoader(batches, sampler, batch, lambda: (done or [0])[0])


def test_a_restored_loader_yields_exactly_the_batches_the_interrupted_run_had_left():
    full = [b.tolist() for b in seeded_loader()]
    interrupted = seeded_loader(done=[2])
    state = interrupted.state_dict()
    assert state == {"batches_done": 2, "samples_done": 6}
    resumed = seeded_loader()
    resumed.load_state_dict(state)
    assert len(resumed) == len(full) == 4  # the whole run's count: Lightning's restored counter ends it
    assert [b.tolist() for b in resumed] == full[2:]
    assert sum(len(b) for b in resumed) == 10  # a later pass is a whole one again


# -- resume= -------------------------------------------------------------------------------------


def fake_run_dir(tmp_path, status: str, checkpoints=("last.ckpt",)):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- batch_size=2\n- precision=bf16\n- hydra.run.dir=old\n")
    (run / "results.json").write_text(json.dumps({"status": status}))
    (run / "checkpoints").mkdir()
    for step, name in enumerate(checkpoints):
        torch.save({"global_step": step}, run / "checkpoints" / name)
        time.sleep(0.01)  # distinct modification times
    return run


def test_resume_recomposes_the_runs_recorded_overrides_with_new_ones_last(tmp_path):
    run = fake_run_dir(tmp_path, "interrupted")
    argv = resume_argv([f"resume={run}", "trainer.enable_progress_bar=false"])
    assert argv == [
        "batch_size=2",
        "precision=bf16",
        "trainer.enable_progress_bar=false",
        f"resume={run}",
        f"hydra.run.dir={run}",
    ]


def test_resume_picks_the_newest_checkpoint(tmp_path):
    run = fake_run_dir(tmp_path, "interrupted", checkpoints=("last.ckpt", "interrupted.ckpt"))
    assert resume_checkpoint(run).name == "interrupted.ckpt"


def test_resume_passes_over_a_truncated_checkpoint_to_the_readable_one_and_says_so(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "interrupted", checkpoints=("last.ckpt", "interrupted.ckpt"))
    newest = run / "checkpoints" / "interrupted.ckpt"
    newest.write_bytes(newest.read_bytes()[:100])  # an interrupted copy
    assert resume_checkpoint(run).name == "last.ckpt"
    assert f"segperf: note: {newest} is not a readable checkpoint" in capsys.readouterr().out
    (run / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(
        SettingsError, match=r"last.ckpt and interrupted.ckpt in .* are not readable checkpoints .*without resume="
    ):
        resume_checkpoint(run)


def test_a_checkpoint_cut_short_or_of_another_kind_is_refused_in_one_line(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1000)}}, path)
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(UnreadableCheckpointError) as error:
        load_weights_only(path)
    assert str(error.value).startswith(f"{path}: not a readable checkpoint; it is truncated")
    assert len(str(error.value).splitlines()) == 1
    path.write_text("hello")
    with pytest.raises(UnreadableCheckpointError, match="not a readable checkpoint"):
        load_weights_only(path)


@pytest.mark.parametrize(
    ("status", "checkpoints", "expected"),
    [
        ("completed", ("last.ckpt",), "that run completed; there is nothing to resume"),
        ("interrupted", (), "no checkpoint in .*checkpoints .*start it again without resume="),
    ],
)
def test_resume_refuses_with_the_reason_and_leaves_the_run_untouched(tmp_path, status, checkpoints, expected):
    run = fake_run_dir(tmp_path, status, checkpoints)
    before = (run / "results.json").read_text()
    with pytest.raises(SettingsError, match=expected):
        resume_checkpoint(run)
    assert (run / "results.json").read_text() == before


def test_resume_of_a_folder_that_is_not_a_run_says_so(tmp_path):
    with pytest.raises(SettingsError, match=r"not a segperf run folder"):
        resume_argv([f"resume={tmp_path}"])
    with pytest.raises(SettingsError, match="cannot be combined with -m"):
        resume_argv(["-m", f"resume={tmp_path}"])


# -- checkpoints on disk -------------------------------------------------------------------------


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one_intact(tmp_path, monkeypatch):
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temp file left behind


class Payload:  # stands for any pickled object: unpickling it could run code
    pass


def test_a_checkpoint_that_needs_unpickling_code_is_refused(tmp_path):
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "extra": Payload()}, path)
    with pytest.raises(UnsafeCheckpointError, match=r"evil.ckpt: refused to load.*arbitrary unpickling"):
        load_weights_only(path)


# -- a real run, stopped by a real signal --------------------------------------------------------

RUN = [
    "data.height=64",
    "data.width=96",
    "train_images=24",
    "val_images=4",
    "batch_size=4",
    "val_every_images=8",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
]


def start_run(run_dir, data_root, extra=()) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "segperf.train", *RUN, f"data.root={data_root}", f"hydra.run.dir={run_dir}", *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C as in a terminal: a shell's background job (`make test &`) ignores SIGINT and
        # passes that on; Python then never turns SIGINT into KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def stop_after_first_checkpoint(proc: subprocess.Popen, run_dir, signum) -> tuple[int, str]:
    """Send `signum` once the first validation checkpoint exists: training is mid-way (step 2 of 6)."""
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "last.ckpt").exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out


@pytest.mark.slow
def test_ctrl_c_mid_training_saves_a_checkpoint_and_resume_finishes_the_run(tmp_path, tiny_carvana):
    run_dir = tmp_path / "run"
    code, out = stop_after_first_checkpoint(start_run(run_dir, tiny_carvana), run_dir, signal.SIGINT)
    assert code == 130, out[-3000:]
    assert (run_dir / "checkpoints" / "interrupted.ckpt").is_file()
    stopped = json.loads((run_dir / "results.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["interrupted_by"] == "SIGINT"
    done_before = stopped["progress"]["steps_done"]
    assert 0 < done_before < 6 and stopped["progress"]["steps_total"] == 6
    assert stopped["train"]["steps"] == done_before and stopped["phases"]  # the measurements so far
    assert f"resume={run_dir}" in out and "Status                  interrupted" in out  # the summary
    assert "Traceback" not in out
    assert "Progress" in (run_dir / "summary.txt").read_text()

    resumed = subprocess.run(
        [sys.executable, "-m", "segperf.train", f"resume={run_dir}"], cwd=REPO, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    final = json.loads((run_dir / "results.json").read_text())
    assert final["status"] == "completed"
    assert final["resumed"]["from_step"] == done_before
    assert final["train"]["steps"] == 6 - done_before  # only what was left
    assert final["progress"] == {"steps_done": 6, "steps_total": 6, "images_done": 24, "images_total": 24}
    assert final["config"]["data"]["root"] == str(tiny_carvana)  # the recorded overrides came back
    assert final["quality"]["val_dice"] is not None
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.ckpt"]


@pytest.mark.slow
def test_sigterm_mid_training_is_an_interruption_too(tmp_path, tiny_carvana):
    run_dir = tmp_path / "run"
    code, out = stop_after_first_checkpoint(start_run(run_dir, tiny_carvana), run_dir, signal.SIGTERM)
    assert code == 143, out[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["status"], results["interrupted_by"]) == ("interrupted", "SIGTERM")
    assert (run_dir / "checkpoints" / "interrupted.ckpt").is_file()
    assert results["resume_command"] == f"python -m segperf.train resume={run_dir}"


def test_a_crash_while_writing_results_leaves_the_previous_results_intact(tmp_path, monkeypatch):
    from segperf.perf import results as results_module

    path = tmp_path / "results.json"
    results_module.write_json_atomic(path, {"status": "interrupted"})

    def crash(fd):
        raise OSError("power cut")

    monkeypatch.setattr(results_module.os, "fsync", crash)
    with pytest.raises(OSError, match="power cut"):
        results_module.write_json_atomic(path, {"status": "completed"})
    assert json.loads(path.read_text()) == {"status": "interrupted"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_sigterm_outside_the_training_loop_raises_like_ctrl_c_and_inside_leaves_it_to_lightning():
    from segperf.callbacks import Terminated, TerminateOutsideTraining

    guard = TerminateOutsideTraining()
    with pytest.raises(Terminated):
        guard.handle(signal.SIGTERM, None)
    guard.on_train_start(None, None)
    assert guard.handle(signal.SIGTERM, None) is None  # Lightning stops after the current step
    guard.on_train_end(None, None)
    with pytest.raises(Terminated):
        guard.handle(signal.SIGTERM, None)


@pytest.mark.slow
def test_sigterm_while_the_data_is_checked_still_writes_an_interrupted_record(tmp_path, tiny_carvana):
    run_dir = tmp_path / "run"
    proc = start_run(run_dir, tiny_carvana)
    for line in proc.stdout:  # the sample check runs before the first training step
        if line.startswith("Checked "):
            proc.send_signal(signal.SIGTERM)
            break
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143, out[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["status"], results["interrupted_by"]) == ("interrupted", "SIGTERM")
    assert "Traceback" not in out

"""The tuner's plumbing: a probe's results.json read as what the search decides on, probes run
through Hydra's launcher as ordinary training jobs, tuned.yaml as a preset `+opt=tuned` finds,
the report and tune.json, and one real tune on the CPU end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.utils import JobStatus
from hydra.utils import instantiate
from omegaconf import OmegaConf

from segperf.config import CONFIG_DIR
from segperf.tune import cli, later_noise, quality_runs, settings_check
from segperf.tune.output import cached_preset, finish, preset_body, preset_text, write_preset
from segperf.tune.probe import Probe
from segperf.tune.probe_results import probe_from_results
from segperf.tune.report import final_noise, final_table, render, tuned_against_presets
from segperf.tune.runner import EPOCH_ENDS, PROBE_EPOCH_ENDS, LaunchMeasure, max_time, merged
from segperf.tune.search import QualityCheck, Step, TuneResult
from tests.conftest import REPO
from tests.extras import needs_extra

PIN_REASON = "no CUDA device: pinned memory only speeds up host-to-GPU copies"
SPEED_PROBE = {
    "steps": 8,
    "max_steps": 16,
    "precision": 0.05,
    "val_images": 4,
    "overrides": ["perf.peak_probe=false", "~callbacks.last_checkpoint"],
}
STEADY = "{_target_:segperf.callbacks.steady_probe.SteadyProbe,warmup_steps:2,min_steps:8,max_steps:16,precision:0.05}"


def results(status="completed", images_per_s=3.2, steps_done=10, steps_total=10, adjusted=None, **extra) -> dict:
    """A results.json of the shape segperf.training.record writes (the keys the tuner reads)."""
    return {
        "status": status,
        "train": {"images_per_s": images_per_s, "wall_s": 9.0, "warmup_excluded": steps_done > 2},
        "progress": {"steps_done": steps_done, "steps_total": steps_total},
        "adjusted": adjusted or {},
        "quality": {"val_dice": 0.91, "val_pixel_accuracy": 0.95},
        "accounted": {"run_wall_s": 12.5},
        **extra,
    }


def run_folder(root: Path, name: str, record: dict) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(record))
    return folder


def compose_tune(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="tune", overrides=list(overrides), return_hydra_config=True)


class ComposingLoader:
    """Hydra's config loader as the sweeper has it: composes a job of conf/tune.yaml."""

    def load_sweep_config(self, master, overrides):
        return compose_tune(*overrides)


# -- results.json -> Probe -----------------------------------------------------------------


def test_a_finished_probe_reads_its_images_per_s_quality_and_wall_time(tmp_path):
    probe = probe_from_results(("pin=off",), run_folder(tmp_path, "0_", results()))
    assert probe.images_per_s == 3.2 and probe.applied and probe.failed is None and not probe.cut
    assert probe.quality == 0.91  # the U-Net's val Dice (the CNN's val_accuracy otherwise)
    assert probe.wall_s == 12.5 and probe.run_dir == str(tmp_path / "0_")


def test_a_setting_the_machine_adjusted_away_is_not_applied_with_its_reason(tmp_path):
    adjusted = {
        "data.pin_memory": {"requested": True, "used": False, "reason": PIN_REASON},
        "data.num_workers": {"requested": 2, "used": 2, "reason": "unchanged"},  # honoured: not listed
    }
    probe = probe_from_results(("pin=on",), run_folder(tmp_path, "1_pin=on", results(adjusted=adjusted)))
    assert probe.not_applied == (f"data.pin_memory: {PIN_REASON}",)
    assert not probe.applied and probe.images_per_s == 3.2


def test_a_failed_run_is_a_failed_probe_with_its_error_and_no_speed(tmp_path):
    record = results(status="failed", error="OutOfMemoryError: CUDA out of memory.\nTried to allocate 2 GiB")
    probe = probe_from_results(("batch_size=64",), run_folder(tmp_path, "2_", record))
    assert probe.images_per_s is None and probe.failed == "OutOfMemoryError: CUDA out of memory."
    missing = probe_from_results(("x=1",), tmp_path / "3_never_ran")
    assert missing.images_per_s is None and "no results.json" in missing.failed


def test_a_probe_stopped_at_its_time_limit_is_cut_and_keeps_the_speed_of_its_steps(tmp_path):
    folder = run_folder(tmp_path, "4_", results(steps_done=6, steps_total=10, images_per_s=0.2))
    cut = probe_from_results(("precision=bf16",), folder, limited=True)
    assert cut.cut and cut.images_per_s == 0.2 and cut.failed is None
    assert not probe_from_results(("precision=bf16",), folder).cut  # no limit asked: a short run, not a cut one
    in_warmup = run_folder(tmp_path, "5_", results(steps_done=1, steps_total=10, images_per_s=0.05))
    stopped = probe_from_results(("compile=on",), in_warmup, limited=True)
    assert stopped.cut and stopped.images_per_s is None and "in warm-up" in stopped.failed


def steady(stopped_by, timed_steps=12, images_per_s=4.1, half_width=0.03) -> dict:
    """results.json `tune_probe` as segperf.callbacks.steady_probe writes it (the keys the tuner reads)."""
    return {
        "stopped_by": stopped_by,
        "min_steps": 8,
        "max_steps": 32,
        "timed_steps": timed_steps,
        "images_per_s": images_per_s,
        "half_width": half_width,
        "excluded": ["2 warm-up steps (the minimum: compilation, caches)"],
    }


def test_a_probe_reads_its_steady_state_rate_not_the_fixed_warm_ups(tmp_path):
    # train.images_per_s (3.2) includes the loader's queue; the steady state's is 4.1 ±3% over 12 steps
    record = results(steps_done=25, steps_total=74, tune_probe=steady("precision"))
    probe = probe_from_results(("workers=auto",), run_folder(tmp_path, "0_", record), limited=True)
    assert probe.images_per_s == 4.1 and probe.timed_steps == 12 and probe.half_width == 0.03
    assert not probe.cut and probe.failed is None and probe.imprecise is None  # stopped early on purpose


def test_a_probe_that_stopped_at_its_cap_or_its_time_limit_keeps_its_rate_and_says_so(tmp_path):
    capped = run_folder(tmp_path, "1_", results(steps_done=69, steps_total=74, tune_probe=steady("cap", 32, 4.0, 0.08)))
    probe = probe_from_results(("workers=auto",), capped, limited=True)
    assert (
        probe.images_per_s == 4.0 and not probe.cut and probe.imprecise == "stopped at its cap of 32 timed steps, ±8%"
    )
    timed_out = run_folder(
        tmp_path, "2_", results(steps_done=20, steps_total=74, tune_probe=steady(None, 9, 3.9, 0.07))
    )
    probe = probe_from_results(("workers=auto",), timed_out, limited=True)
    assert probe.images_per_s == 3.9 and not probe.cut and "time limit after 9 timed steps" in probe.imprecise
    falling = steady("cap", 32, 4.0, 0.08) | {"settled": False}
    probe = probe_from_results(("workers=auto",), run_folder(tmp_path, "4_", results(tune_probe=falling)), limited=True)
    assert probe.imprecise == "stopped at its cap of 32 timed steps, ±8%, its step times still falling"
    # stopped by the limit before its fewest timed steps: cut, no rate, as in warm-up
    early = run_folder(tmp_path, "3_", results(steps_done=6, steps_total=74, tune_probe=steady(None, 1, 2.0, None)))
    probe = probe_from_results(("compile=on",), early, limited=True)
    assert probe.cut and probe.images_per_s is None and "after 1 timed steps" in probe.failed


# -- the probes' jobs ----------------------------------------------------------------------


def test_a_probe_is_the_configuration_at_the_probe_size_with_the_time_limit_last():
    master = compose_tune("batch_size=4")
    measure = LaunchMeasure(master, ComposingLoader(), None, kind="speed", probe=SPEED_PROBE)
    jobs = measure.job_overrides(("batch_size=2", "train_images=999", "workers=auto"), limit_s=74.2)
    assert jobs == [
        "perf.peak_probe=false",
        "~callbacks.last_checkpoint",
        "batch_size=2",
        "workers=auto",
        # (2 warm-up + 3 ShareCores may add to them + 2 x the cap of 16 timed steps: room for the warm-up
        # the step times add and the loader's queue) x the configuration's batch size
        "train_images=74",
        "val_images=4",
        "val_every_images=74",
        # the probe times its steady state and stops once its rate is known to ±5%
        f"+callbacks.tune_probe={STEADY}",
        # past an epoch end of a user's short training split it validates first where a metric is watched,
        # and a user's EarlyStopping does not end it (a probe measures speed, not learning)
        PROBE_EPOCH_ENDS,
        "trainer.max_time='00:00:01:15'",
        # stopped inside a step at three times the limit: one step of fp16 emulated took 177 s
        "+callbacks.tune_time_limit={_target_:segperf.callbacks.hard_time_limit.HardTimeLimit,seconds:222.6}",
    ]
    job = compose_tune(*jobs)
    assert job.train_images == 74 and job.trainer.max_time == "00:00:01:15"
    steady = instantiate(job.callbacks.tune_probe)
    assert (steady.warmup_steps, steady.min_steps, steady.max_steps, steady.precision) == (2, 8, 16, 0.05)
    assert "tune_probe" not in str(job.hydra.job.override_dirname)
    assert job.callbacks.tune_time_limit.seconds == pytest.approx(222.6)
    assert "last_checkpoint" not in job.callbacks and job.data.num_workers > 0
    assert "tune_time_limit" not in str(job.hydra.job.override_dirname)  # run folders are named after the candidate


def test_a_quality_run_drops_the_starts_run_size_for_the_learning_runs():
    master = compose_tune()
    quality = LaunchMeasure(
        master, None, None, kind="quality", probe=SPEED_PROBE, quality_runs=["size=demo", "data.height=64"]
    )
    jobs = quality.job_overrides(("data.height=128", "precision=bf16", "train_images=40"), limit_s=30)
    assert jobs == [
        "perf.peak_probe=false",
        "~callbacks.last_checkpoint",
        "precision=bf16",
        "size=demo",
        "data.height=64",
        EPOCH_ENDS,
    ]


def test_the_quality_guards_confirming_run_keeps_its_own_seed_over_the_learning_runs_seed():
    master = compose_tune()
    quality = LaunchMeasure(
        master, ComposingLoader(), None, kind="quality", probe=SPEED_PROBE, quality_runs=["size=demo", "seed=3"]
    )
    jobs = quality.job_overrides(("precision=bf16", "seed=4"), limit_s=None)
    assert [o for o in jobs if o.startswith("seed=")] == ["seed=4"]  # one seed= on the job's command line
    assert compose_tune(*jobs).seed == 4
    # the seed the tune's start learns with, which the guard's confirmation adds one to
    assert quality.seed(()) == 3 and quality.seed(("seed=9",)) == 9
    assert LaunchMeasure(master, ComposingLoader(), None, kind="quality", probe=SPEED_PROBE).seed(()) == 0
    assert quality.seed(("upsample=no_such_option",)) is None  # does not compose: the caller's default


EXAMPLE = ["model=shapes_cnn", "data=shapes", "train_images=64", "val_images=32", "batch_size=16"]


def compose_example_tune(*overrides: str):
    """conf/tune.yaml on the user's example as `--config-dir examples/conf` composes it."""
    search = f"hydra.searchpath=[file://{REPO / 'examples' / 'conf'}]"
    return compose_tune(search, *EXAMPLE, *overrides)


def test_a_users_model_gets_a_learning_run_at_the_size_the_tune_was_given(monkeypatch):
    config = compose_example_tune("tune.quality.runs.default=['val_every_images=32']")
    notes: list[str] = []
    quality = quality_runs.quality_measure(config, None, None, config.tune, {"model": "shapes_cnn"}, notes)
    assert isinstance(quality, LaunchMeasure) and quality.kind == "quality"
    start = ("batch_size=16", "train_images=64", "val_images=32", "workers=auto")
    assert quality.job_overrides(start, limit_s=30) == [
        *config.tune.probe.overrides,  # no progress bar, no checkpoint, ...
        "batch_size=16",
        "train_images=64",
        "val_images=32",
        "workers=auto",
        "val_every_images=32",
        EPOCH_ENDS,
    ]
    assert len(notes) == 1 and "train_images=64, val_images=32, batch_size=16" in notes[0]
    assert "quality.metric" in notes[0]
    # one of 32 images is 0.031 of an accuracy, over the 0.02 tolerance: said; 256 images are not
    assert "one of its 32 validation images moves an accuracy by 0.031" in notes[0]
    notes.clear()
    quality_runs.quality_measure(
        compose_example_tune("val_images=256"), None, None, config.tune, {"model": "shapes_cnn"}, notes
    )
    assert "val_images=256" in notes[0] and "validation images moves" not in notes[0]


def test_a_users_model_is_not_checked_when_the_default_learning_run_is_null():
    config = compose_example_tune("tune.quality.runs.default=null")
    notes: list[str] = []
    assert quality_runs.quality_measure(config, None, None, config.tune, {"model": "shapes_cnn"}, notes) is None
    expected = "no learning run for model=shapes_cnn (tune.quality.runs.shapes_cnn or .default): quality not checked"
    assert notes == [expected]


def test_a_listed_model_keeps_its_own_learning_run_and_not_the_default():
    config = compose_tune()
    notes: list[str] = []
    quality = quality_runs.quality_measure(config, None, None, config.tune, {"model": "unet"}, notes)
    assert quality.quality_runs == ["size=demo", "data.height=64", "data.width=96"] and notes == []
    assert "train_images=40" not in quality.job_overrides(("train_images=40",), limit_s=None)


@pytest.mark.parametrize(
    "quality, value, metric",
    [
        ({"val_acc": 0.8, "val_loss": 0.5, "metric": "val_acc", "mode": "max"}, 0.8, "val_acc"),
        ({"val_acc": 0.8, "val_loss": 0.5, "metric": "val_loss", "mode": "min"}, -0.5, "val_loss"),
        ({"val_accuracy": 0.7, "val_loss": 0.4}, 0.7, "val_accuracy"),
    ],
)
def test_a_probe_reads_the_quality_metric_its_run_names(tmp_path, quality, value, metric):
    probe = probe_from_results(("pin=off",), run_folder(tmp_path, "0_", results(quality=quality)))
    assert (probe.quality, probe.quality_metric) == (value, metric)
    # what is said is the value as logged: a loss of 0.5, not -0.5
    assert probe.metric_value == quality[metric] and probe.lower_is_better == (quality.get("mode") == "min")


def test_the_reports_quality_table_shows_a_lower_is_better_metric_as_logged_with_its_direction():
    result = fake_result().to_dict()
    for probe, error in zip(result["quality"]["probes"], (4.050, 3.727), strict=True):
        probe |= {"quality": -error, "quality_metric": "val_mae", "lower_is_better": True}
    rows = quality_rows(render({"result": result, "machine": {}}).split("## Quality check")[1])
    assert rows["start"][:2] == ["4.05", "val_mae (lower is better)"]
    assert rows["upsample=deconv"][0] == "3.73"


def test_later_overrides_replace_earlier_ones_of_the_same_key():
    assert merged(["workers=off", "+opt=all"], ["workers=auto"], ["opt=x"]) == ["workers=auto", "opt=x"]
    assert max_time(0.2) == "'00:00:00:01'" and max_time(3601) == "'00:01:00:01'"


def test_the_measure_launches_a_batch_in_order_and_numbers_jobs_after_the_folders_there(tmp_path):
    (tmp_path / "7_compile=on").mkdir()  # an earlier run of this tune (a rerun continues the numbers)
    launched = []

    class Launcher:
        def launch(self, batch, initial_job_idx):
            launched.append((initial_job_idx, [list(job) for job in batch]))
            returns = []
            for offset, job in enumerate(batch):
                pin = "pin=on" in job
                adjusted = {"data.pin_memory": {"requested": True, "used": False, "reason": PIN_REASON}} if pin else {}
                folder = run_folder(tmp_path, f"{initial_job_idx + offset}_job", results(adjusted=adjusted))
                hydra_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(folder)}}})
                returns.append(SimpleNamespace(status=JobStatus.COMPLETED, hydra_cfg=hydra_cfg, _return_value=None))
            return returns

    class Loader:
        def load_sweep_config(self, master, overrides):
            if "upsample=deconv" in overrides:
                raise ValueError("Could not override 'upsample'.\nNo match in the defaults list.")

    master = compose_tune(f"hydra.sweep.dir={tmp_path}")
    measure = LaunchMeasure(master, Loader(), Launcher(), kind="speed", probe=SPEED_PROBE)
    probes = measure([(), ("pin=on",), ("upsample=deconv",), ()], 60.0)
    assert [p.config for p in probes] == [(), ("pin=on",), ("upsample=deconv",), ()]
    assert [p.applied for p in probes] == [True, False, True, True]
    assert probes[2].failed == "does not compose: Could not override 'upsample'." and probes[2].images_per_s is None
    assert [start for start, _ in launched] == [8]  # one launch of the three that compose, after job 7
    assert len(launched[0][1]) == 3
    assert all(p.wall_s >= 12.5 for p in probes if p.failed is None)  # its own run + its share of the launch


# -- tuned.yaml and +opt=tuned -------------------------------------------------------------


def test_tuned_yaml_spells_out_every_group_and_the_tuned_numbers():
    best = ("compile=off", "data.num_workers=1", "memory_format=channels_last", "precision=bf16", "workers=auto")
    choices = compose_tune(*best).hydra.runtime.choices
    body = preset_body(best, choices)
    assert {"override /precision": "bf16"} in body["defaults"]
    assert {"override /workers": "auto"} in body["defaults"]
    assert {"override /decode": "full"} in body["defaults"]  # untouched groups too: the preset is complete
    assert body["data"] == {"num_workers": 1}
    assert "batch_size" not in body  # only with tune.batch_size=true
    text = preset_text(body, ["a header"])
    assert text.startswith("# @package _global_\n# a header\n")
    assert "opt" not in yaml.safe_load(text)  # concrete choices, not a reference to a preset


def test_opt_tuned_composes_the_newest_tune_from_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    best = ("data.num_workers=1", "precision=bf16", "upsample=deconv", "workers=auto")
    body = preset_body(best, compose_tune(*best).hydra.runtime.choices)
    local, cached = write_preset(tmp_path / "tune", preset_text(body, ["test"]))
    assert cached == cached_preset() == tmp_path / "cache" / "tune" / "opt" / "tuned.yaml"
    assert local.read_text() == cached.read_text()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["+opt=tuned", "data.num_workers=0"])
    assert cfg.trainer.precision == "bf16-mixed" and cfg.model.net.upsample == "deconv"
    assert cfg.data.num_workers == 0  # the command line still wins over the preset


def test_opt_tuned_applies_a_tune_of_a_users_model_composed_with_its_config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    best = ("data.num_workers=1", "memory_format=channels_last", "precision=bf16", "workers=auto")
    body = preset_body(best, compose_example_tune(*best).hydra.runtime.choices)
    # the user's workload has no U-Net or Carvana groups: the preset names only the groups it has
    assert not {"override /upsample", "override /decode", "override /cache"} & {k for d in body["defaults"] for k in d}
    write_preset(tmp_path / "tune", preset_text(body, ["test"]))
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        search = f"hydra.searchpath=[file://{REPO / 'examples' / 'conf'}]"
        cfg = compose(config_name="train", overrides=[search, *EXAMPLE, "+opt=tuned"])
    assert cfg.model._target_ == "shapes.model.ShapesCNN" and cfg.data._target_ == "shapes.data.ShapesDataModule"
    assert cfg.trainer.precision == "bf16-mixed" and cfg.model.memory_format == "channels_last"
    assert cfg.data.num_workers == 1  # the tuned number, over workers=auto's
    assert cfg.model.quality.metric == "val_acc"  # the user's own keys untouched


# -- the report and tune.json --------------------------------------------------------------


def fake_result() -> TuneResult:
    start, preset, tuned = (
        ("data.height=128",),
        ("data.height=128", "workers=auto"),
        ("data.height=128", "upsample=deconv"),
    )

    def probes(config, *rates, **kw):
        return [Probe(config, r, wall_s=10.0, **kw) for r in rates]

    steps = [
        Step("presets", "+opt=all", preset, preset, start, probes(preset, 2.1, 2.2), probes(start, 2.0, 2.05), 1.06),
        Step(
            "axes",
            "upsample",
            ("upsample=deconv",),
            tuned,
            start,
            probes(tuned, 3.0, 3.1),
            probes(start, 2.0, 2.1),
            1.5,
            1.3,
            1.7,
            "kept",
        ),
        Step(
            "axes",
            "pin",
            ("pin=on",),
            ("data.height=128", "pin=on", "upsample=deconv"),
            tuned,
            probes(tuned, 3.0),
            probes(tuned, 3.0, not_applied=(f"data.pin_memory: {PIN_REASON}",)),
            verdict="not applied",
            note=f"data.pin_memory: {PIN_REASON}",
        ),
    ]
    quality = QualityCheck(0.02, [Probe(start, None, quality=0.95), Probe(tuned, None, quality=0.94)], "passed", "ok")
    final = {"start": probes(start, 2.0, 2.1), "+opt=all": probes(preset, 2.2, 2.1), "tuned": probes(tuned, 3.1, 3.0)}
    configs = {"start": start, "+opt=all": preset, "tuned": tuned}
    return TuneResult(start, tuned, steps, final, configs, quality, False, 290.0, 600.0, 0.95)


def test_the_report_shows_each_step_the_path_the_quality_check_and_the_side_by_side(tmp_path):
    text = render({"result": fake_result().to_dict(), "machine": {"cpu_model": "Test CPU", "cores": 2}})
    assert "1. axes: upsample `upsample=deconv` 1.50× [1.30–1.70]" in text  # the path from start to tuned
    assert "not applied" in text and PIN_REASON in text
    assert "Verdict: **passed (ok)**" in text and "0.940" in text
    final = text.split("## Final side by side")[1].split("## Steps")[0]
    assert [line.split("|")[1].strip() for line in final.splitlines() if line.startswith("| ")][1:] == [
        "start",
        "+opt=all",
        "tuned",
    ]
    assert "3.05 [3.00–3.10] ×2" in final
    # what the intervals are of: a record from before the later-run noise: the tune's minutes alone
    assert "The intervals (95%) are of this tune's 5 minutes, in which one run's images/s scattered by" in text
    assert "a run made later, or on a busier machine, scatters more" in text


def test_the_reports_intervals_count_the_later_run_noise_the_tune_recorded():
    """A tune that counted 5% later-run noise prints the final claims' intervals wider by it, around
    the same ratios, and says where the figure came from; the decisions stay the tune's own."""
    plain = fake_result().to_dict()
    later = {**plain, "later_noise": {"relative": 0.05, "source": "measured on this machine"}}
    for name in ("tuned", "+opt=all"):
        (narrow,) = [r for r in final_table(plain, 0.95) if r["name"] == name]
        (wide,) = [r for r in final_table(later, 0.95) if r["name"] == name]
        assert wide["vs_start"] == narrow["vs_start"] and wide["distinguishable"] == narrow["distinguishable"]
        assert wide["vs_start_interval"][0] < narrow["vs_start_interval"][0] - 0.05
        assert wide["vs_start_interval"][1] > narrow["vs_start_interval"][1] + 0.05
    text = render({"result": later, "machine": {"cpu_model": "Test CPU", "cores": 2}})
    assert "where a later run of each configuration will put the ratio" in text
    assert "5.0% run-to-run scatter between runs made at other times (measured on this machine)" in text


def test_a_tune_scattering_more_than_its_later_noise_counts_its_own_scatter_and_says_so():
    """A machine recorded as quiet (1% between runs made at other times) but busy during this tune
    (its final runs scatter ~3%): a later run scatters at least as much as the runs just seen, so the
    printed intervals are those of 3% later-run noise, and the report's last line says why."""
    plain = fake_result().to_dict()
    quiet = {**plain, "later_noise": {"relative": 0.01, "source": "measured on this machine"}}
    text = render({"result": quiet, "machine": {"cpu_model": "Test CPU", "cores": 2}})
    assert "this tune's runs scattered more than that, so a later run is counted at their scatter" in text
    scatter = final_noise(plain["final"]).relative  # log scale
    assert scatter > 0.02
    at_scatter = {**plain, "later_noise": {"relative": math.expm1(scatter), "source": "test"}}
    for name in ("tuned", "+opt=all"):
        (counted,) = [r for r in final_table(quiet, 0.95) if r["name"] == name]
        (same,) = [r for r in final_table(at_scatter, 0.95) if r["name"] == name]
        assert counted["vs_start_interval"] == pytest.approx(same["vs_start_interval"], rel=1e-12)
        assert counted["vs_start_interval"][0] < counted["vs_start_own_interval"][0]
    roomy = {**plain, "later_noise": {"relative": 0.05, "source": "test"}}
    assert "counted at their scatter" not in render({"result": roomy, "machine": {}})


def quality_rows(section: str) -> dict[str, list[str]]:
    """The quality check's table: configuration -> its other cells (the header row under "configuration")."""
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines() if line.startswith("| ")]
    return {row[0]: row[1:] for row in cells}


def test_the_report_shows_both_seeds_qualities_of_a_configuration_the_guard_confirmed():
    result = fake_result()
    start, tuned = result.start, result.best
    result.quality = QualityCheck(
        0.02,
        [Probe(start, None, quality=0.974, run_dir="runs/0"), Probe(tuned, None, quality=0.948, run_dir="runs/9")],
        "passed",
        "within the tolerance on the mean of two seeds",
        seeds=[0, 1],
        confirmations=[
            Probe((*start, "seed=1"), None, quality=0.976, run_dir="runs/10"),
            Probe((*tuned, "seed=1"), None, quality=0.970, run_dir="runs/11"),
        ],
    )
    section = render({"result": result.to_dict(), "machine": {}}).split("## Quality check")[1]
    rows = quality_rows(section)
    assert rows["configuration"][:3] == ["quality (seed 0)", "quality (seed 1)", "mean"]
    assert rows["start"][:3] == ["0.974", "0.976", "0.975"]
    assert rows["upsample=deconv"][:3] == ["0.948", "0.970", "0.959"]  # the second seed on the same row
    assert rows["upsample=deconv"][-1] == "runs/9, runs/11"
    assert "judged on the mean of both seeds" in section
    # a record from before the confirmation (no seeds, no confirmations) still reads
    old = result.to_dict()
    del old["quality"]["seeds"], old["quality"]["confirmations"]
    rows = quality_rows(render({"result": old, "machine": {}}).split("## Quality check")[1])
    assert rows["configuration"][0] == "quality" and rows["upsample=deconv"][0] == "0.948"


def test_finish_writes_tuned_yaml_tune_json_and_the_report_and_prints_the_preset_last(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    config = compose_tune(f"hydra.sweep.dir={tmp_path / 'tune'}")
    settings = compose_tune().tune
    finish(fake_result(), config, ComposingLoader(), settings, "python -m segperf.tune data.height=128", ["a note"])
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == str(tmp_path / "cache" / "tune" / "opt" / "tuned.yaml")
    tune = tmp_path / "tune"
    record = json.loads((tune / "tune.json").read_text())
    assert record["machine"]["cores"] >= 1 and "avx512_bf16" in record["machine"] and record["machine"]["torch"]
    assert record["result"]["best"] == ["data.height=128", "upsample=deconv"]
    assert [row["name"] for row in record["final_table"]] == ["start", "+opt=all", "tuned"]
    assert record["notes"] == ["a note"]
    assert {"override /upsample": "deconv"} in yaml.safe_load((tune / "tuned.yaml").read_text())["defaults"]
    assert (tune / "tune_report.md").read_text().count("![") == 2
    assert (tune / "final.png").stat().st_size > 0 and (tune / "steps.png").stat().st_size > 0


@pytest.mark.parametrize(
    "command,batch_size,expected",
    [
        (
            "python -m segperf.tune data.height=128 batch_size=6 workers=off tune.budget_minutes=6",
            False,
            "python -m segperf.train data.height=128 batch_size=6 +opt=tuned",
        ),
        (
            "python -m segperf.tune model=cnn data=mnist batch_size=64 num_threads=1 hydra/launcher=basic",
            True,
            "python -m segperf.train model=cnn data=mnist +opt=tuned",
        ),
        (
            "python -m segperf.tune --config-dir '/my conf' model=mine data=theirs train_images=768 batch_size=32",
            False,
            "python -m segperf.train --config-dir '/my conf' model=mine data=theirs train_images=768 batch_size=32 "
            "+opt=tuned",
        ),
    ],
)
def test_the_way_to_apply_a_tune_names_the_workload_and_run_size_it_was_tuned_on(command, batch_size, expected):
    """The preset sets the speed axes (and the batch size when the tune searched it); the rest of
    the start's overrides, the run size above all, go on the command: `+opt=tuned` alone trains at
    the default size, at another batch size than the one the tune measured."""
    from segperf.tune.output import apply_command

    assert apply_command(command, batch_size=batch_size) == expected


def test_failed_runs_are_counted_in_the_report_and_warned_of_before_the_preset_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    result = fake_result()
    result.best = result.start  # as when the runs after the start failed
    result.failures, result.runs = {"KeyError: 0": 5, "RuntimeError: out of memory": 1}, 9
    config = compose_tune(f"hydra.sweep.dir={tmp_path / 'tune'}")
    finish(result, config, ComposingLoader(), compose_tune().tune, "python -m segperf.tune", [])
    printed = capsys.readouterr().out.strip().splitlines()
    assert "6 of its 9 runs failed" in printed[-4]  # the tuned line: not "nothing was faster"
    assert printed[-3] == "segperf.tune: warning: 6 of 9 runs failed; most often (5x): KeyError: 0"
    assert printed[-1] == str(tmp_path / "cache" / "tune" / "opt" / "tuned.yaml")
    report = (tmp_path / "tune" / "tune_report.md").read_text()
    assert "- **failed runs: 6 of 9**:" in report and "  - 5x: KeyError: 0" in report


# -- the command line ----------------------------------------------------------------------


def test_bad_tune_settings_and_sweeps_are_one_line_each_before_any_probe(tmp_path, capsys):
    code = cli.main(["tune.budget_minutes=0", "tune.level=1.5", f"hydra.sweep.dir={tmp_path / 'tune'}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "segperf.tune: error: tune.budget_minutes=0.0: must be > 0 minutes" in err
    assert "segperf.tune: error: tune.level=1.5: must be between 0 and 1" in err
    assert settings_check.sweep_problems(["pin=off,on", "workers=auto"]) == [
        "pin=off,on: a tune starts from one configuration; give one value "
        "(to compare several: python -m segperf.train -m pin=off,on)"
    ]
    assert not list((tmp_path / "tune").glob("*_*"))  # no probe ran


def test_the_command_to_continue_keeps_the_launcher_and_the_overrides():
    needs_extra("slurm")
    config = compose_tune("hydra/launcher=slurm", "hydra.sweep.dir=multirun/t", "pin=on")
    assert cli.command(config, ["pin=on", "data.root=/my data"]) == (
        "python -m segperf.tune pin=on 'data.root=/my data' hydra/launcher=slurm"
    )


def test_the_command_to_continue_keeps_a_users_config_dir():
    from hydra.conf import ConfigSourceInfo

    config = compose_tune("hydra.sweep.dir=multirun/t")
    # what Hydra records for `--config-dir "/my conf"`
    source = ConfigSourceInfo(path="/my conf", schema="file", provider="command-line")
    config.hydra.runtime.config_sources.append(source)
    assert cli.command(config, ["model=mine"]) == "python -m segperf.tune --config-dir '/my conf' model=mine"


@pytest.mark.slow
def test_a_real_tune_on_the_cpu_writes_its_preset_report_and_record_and_a_rerun_continues(
    tmp_path, tiny_carvana, monkeypatch
):
    """A whole tune at a tiny size and budget (one preset: torch.compile's ~45 s would not fit);
    then the same command again replays the journal instead of measuring."""
    tiny = ["data.height=32", "data.width=48", "batch_size=2"]
    quality = '["train_images=8","val_images=4","val_every_images=8","data.height=32","data.width=48"]'
    args = [
        f"data.root={tiny_carvana}",
        *tiny,
        "seed=3",  # the start's own seed: the quality guard would confirm a failing run on seed 4
        "tune.budget_minutes=1",
        "tune.probe.steps=2",
        "tune.probe.min_time_limit_s=20",
        'tune.presets=[["+opt=all","compile=off"]]',
        f"tune.quality.runs.unet={quality}",
        "hydra.sweep.dir=tune",
    ]
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1", "SEGPERF_CACHE": str(tmp_path / "cache")}

    def tune():
        command = [sys.executable, "-m", "segperf.tune", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    done = tune()
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    preset = tmp_path / "cache" / "tune" / "opt" / "tuned.yaml"
    assert lines[-1] == str(preset)
    assert any("start:" in line and "images/s" in line for line in lines)  # a progress line per probe
    folder = tmp_path / "tune"
    assert (folder / "tuned.yaml").read_text() == preset.read_text()
    record = json.loads((folder / "tune.json").read_text())
    assert record["result"]["quality"]["probes"][0]["quality"] is not None  # the start's learning run
    assert record["result"]["quality"]["seeds"] == [3, 4]  # the seed the start's learning job composes, and the next
    # a machine never measured: the printed intervals count the default later-run noise, and say so
    assert record["result"]["later_noise"]["relative"] == later_noise.DEFAULT
    assert "never measured" in (folder / "tune_report.md").read_text()
    # the side-by-side's rows (its probes, when the budget paid for them; a tiny budget may not)
    assert [row["name"] for row in record["final_table"]] == ["start", "+opt=all compile=off", "tuned"]
    print(done.stdout)
    assert "## Quality check" in (folder / "tune_report.md").read_text()
    runs = sorted(folder.glob("*_*/results.json"))
    assert runs and all(json.loads(p.read_text())["status"] == "completed" for p in runs)

    again = tune()
    assert again.returncode == 0, again.stderr[-3000:]
    assert "from the journal" in again.stdout
    assert sorted(folder.glob("*_*/results.json")) == runs  # nothing measured twice

    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["+opt=tuned"])
    assert cfg.model.net.upsample in ("upconv", "deconv")


@pytest.mark.slow  # composes every case (~2 s); `make test` (CI) runs it
def test_the_tuning_pages_commands_compose(tiny_carvana):
    """Every `python -m segperf.tune` line of the tuning page's first block (docs/tuning.md), and
    `make tune`'s example, composes as the tune's start (the settings checks included)."""
    import shlex

    from tests.doc_commands import commands_in

    commands = [c.argv for c in commands_in("docs/tuning.md")]
    tunes = [c[3:] for c in commands if c[:3] == ["python", "-m", "segperf.tune"]]
    tunes += [shlex.split(c[-1].split("=", 1)[1]) for c in commands if c[:2] == ["make", "tune"]]
    assert len(tunes) == 5  # four in the first block, and the real tune's command
    for args in tunes:
        cfg = compose_tune(*(a.replace("/path/to/carvana", str(tiny_carvana)) for a in args))
        assert settings_check.settings_problems(cfg.tune) == [] and settings_check.sweep_problems(args) == []
        assert cfg.hydra.sweeper._target_.endswith("SegperfTuner")


# -- screening, identical runs, emulated precision ---------------------------------------------


def test_a_probe_with_a_floor_gets_the_screening_callback_which_composes_and_is_built(tmp_path):
    from hydra.utils import instantiate

    from segperf.callbacks.screen_out import ScreenOut

    master = compose_tune("batch_size=4")
    measure = LaunchMeasure(master, ComposingLoader(), None, kind="speed", probe=SPEED_PROBE | {"screen_steps": 3})
    jobs = measure.job_overrides(("workers=off",), limit_s=60, floor=1.25)
    job = compose_tune(*jobs)
    screen = instantiate(job.callbacks.tune_screen)
    assert isinstance(screen, ScreenOut)
    assert (screen.floor, screen.timed_steps, screen.warmup_steps) == (1.25, 3, job.warmup_steps)
    assert "tune_screen" not in str(job.hydra.job.override_dirname)  # run folders are named after the candidate


class FakeTrainer:
    should_stop = False


# a user's module may batch as a tuple or as a dict (segperf.callbacks.batch_size counts either)
BATCHES_OF_4 = {
    "tuple": lambda: (torch.zeros(4, 3), torch.zeros(4)),
    "dict": lambda: {"image": torch.zeros(4, 3), "label": torch.zeros(4)},
}


def fake_screen_clock(monkeypatch, screen_module, clock) -> None:
    """ScreenOut's perf_counter reads `clock`; only its own: patching time.perf_counter itself let
    another thread of the test process (a sampler of an earlier test) take a reading from the
    clock, which then ran out (StopIteration) under xdist."""
    monkeypatch.setattr(screen_module, "time", SimpleNamespace(perf_counter=lambda: next(clock)))


@pytest.mark.parametrize("structure", BATCHES_OF_4)
def test_screening_stops_the_fit_after_the_first_timed_steps_below_the_floor_and_records_it(monkeypatch, structure):
    from segperf.callbacks import screen_out as screen_module

    clock = iter([0.0, 10.0, 20.0, 30.0, 40.0])  # warm-up ends at 0 s; a batch of 4 every 10 s: 0.4 images/s
    fake_screen_clock(monkeypatch, screen_module, clock)
    callback, trainer = screen_module.ScreenOut(1.0, timed_steps=2, warmup_steps=2), FakeTrainer()
    batch = BATCHES_OF_4[structure]()
    for step in range(3):  # two warm-up steps (not judged), the first timed step (too few to judge)
        callback.on_train_batch_end(trainer, None, None, batch, step)
        assert not trainer.should_stop
    callback.on_train_batch_end(trainer, None, None, batch, 3)  # the second timed step: 8 images in 20 s
    assert trainer.should_stop
    results = {}
    callback.record(results)
    assert results["tune_screen"] == {
        "floor_images_per_s": 1.0,
        "timed_steps": 2,
        "images_per_s": pytest.approx(0.4),
        "screened_out": True,
    }


def screen_steps(monkeypatch, seconds: list[float], floor: float = 1.0) -> tuple[int | None, object]:
    """ScreenOut over steps of these durations (batches of 4, two warm-up steps first): the step it
    stopped the fit after (None: it did not), and the callback."""
    from segperf.callbacks import screen_out as screen_module

    ends = [0.0, 0.0]  # two warm-up steps end at 0 s
    for duration in seconds:
        ends.append(ends[-1] + duration)
    fake_screen_clock(monkeypatch, screen_module, iter(ends[1:]))
    callback, trainer = screen_module.ScreenOut(floor, timed_steps=2, warmup_steps=2), FakeTrainer()
    trainer.should_stop = False
    for step in range(len(ends) - 1):
        callback.on_train_batch_end(trainer, None, None, torch.zeros(4, 3), step)
        if trainer.should_stop:
            return step, callback
    return None, callback


def test_a_warm_up_that_outlasts_the_minimum_is_not_screened_out_as_a_slow_configuration(monkeypatch):
    # a compile's third step takes 8 s, then 4-image steps of 0.4 s (10 images/s, over the floor of 1):
    # the first two timed steps read 8 images in 8.4 s, under the floor, but had not settled
    stopped, callback = screen_steps(monkeypatch, [8.0, 0.4, 0.4, 0.4, 0.4])
    assert stopped is None and callback.rate == pytest.approx(10.0)
    # a configuration that is slow in every step is screened after its first two timed steps, as before
    stopped, callback = screen_steps(monkeypatch, [5.0, 5.2, 5.1, 5.0])
    assert stopped == 3 and callback.screened_out and callback.rate == pytest.approx(8 / 10.2)
    # workers handing out batches in turns (0.5 s, 9.5 s): the pairs settle, the floor judges them
    stopped, _ = screen_steps(monkeypatch, [0.5, 9.5, 0.5, 9.5, 0.5])
    assert stopped == 5


def test_a_screened_probe_is_read_as_screened_with_its_rate_not_as_cut(tmp_path):
    record = results(steps_done=4, steps_total=10, images_per_s=0.4)
    record["tune_screen"] = {"floor_images_per_s": 1.0, "timed_steps": 2, "images_per_s": 0.41, "screened_out": True}
    probe = probe_from_results(("precision=bf16",), run_folder(tmp_path, "6_", record), limited=True)
    assert probe.screened and not probe.cut and probe.images_per_s == 0.4 and probe.failed is None


def test_the_hard_limit_stops_a_step_that_runs_far_past_it_inside_the_step(tmp_path):
    import time

    import lightning as L
    import torch

    from segperf.callbacks.hard_time_limit import HardTimeLimit, TimeLimitReached

    class SlowSecondStep(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            if batch_idx == 1:
                time.sleep(60)  # one step far past the limit: max_time would wait for its end
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(8, 2)), batch_size=2)
    limit = HardTimeLimit(seconds=1.0)
    trainer = L.Trainer(
        callbacks=[limit],
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    started = time.monotonic()
    with pytest.raises(TimeLimitReached, match="hard time limit of 1 s of training, inside step 2"):
        trainer.fit(SlowSecondStep(), loader)
    assert time.monotonic() - started < 30  # not the 60 s step
    found = {}
    limit.record(found)
    assert found["time_limit"] == {"hard_limit_s": 1.0, "reached": True, "steps_done": 1, "not_armed": None}
    assert signal_handler_is_default()  # disarmed: the process's SIGALRM is as it was


def signal_handler_is_default() -> bool:
    import signal

    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_a_probe_stopped_inside_a_step_by_the_hard_limit_is_cut_with_no_rate(tmp_path):
    record = results(status="failed", images_per_s=None, steps_done=0, steps_total=10)
    record["error"] = "TimeLimitReached: stopped at the hard time limit of 21 s of training, inside step 1"
    record["time_limit"] = {"hard_limit_s": 21.0, "reached": True, "steps_done": 0, "not_armed": None}
    probe = probe_from_results(("precision=fp16",), run_folder(tmp_path, "7_", record), limited=True)
    assert probe.cut and probe.images_per_s is None
    assert probe.failed == "cut inside step 1 at the hard time limit of 21 s"
    record["time_limit"]["reached"] = False  # armed but not reached: the run's own status decides
    probe = probe_from_results(("precision=fp16",), run_folder(tmp_path, "8_", record), limited=True)
    assert not probe.cut and probe.failed.startswith("TimeLimitReached")


def test_configurations_that_compose_the_same_run_have_one_identity():
    from segperf.config import available_cores

    measure = LaunchMeasure(compose_tune(), ComposingLoader(), None, kind="speed", probe=SPEED_PROBE)
    cores = available_cores()
    assert measure.identity(("workers=auto",)) == measure.identity((f"data.num_workers={cores}",))
    assert measure.identity(("workers=auto",)) != measure.identity(("workers=off",))
    assert measure.identity(("compile=off",)) == measure.identity(())  # the default composed anyway
    # with workers, DataLoader's default prefetch (prefetch=off) is 2 batches a worker; without, 2 is a thread's
    assert measure.identity(("workers=auto", "prefetch=off")) == measure.identity(
        ("workers=auto", "data.prefetch_factor=2")
    )
    assert measure.identity(("workers=auto", "prefetch=off")) != measure.identity(("workers=auto", "prefetch=on"))
    assert measure.identity(("workers=off", "prefetch=off")) != measure.identity(
        ("workers=off", "data.prefetch_factor=2")
    )


def test_reduced_precision_is_emulated_by_the_runs_notice_or_by_a_slow_timing_and_only_on_a_cpu():
    from segperf.tune.native import emulated_precisions

    options = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
    flags_say = emulated_precisions(
        "cpu",
        options=options,
        notice=lambda p, a: f"precision {p}: no" if p == "16-mixed" else None,
        slowdown=lambda p: 0.5,
    )
    assert list(flags_say) == ["precision=fp16"]
    timing_says = emulated_precisions("cpu", options=options, notice=lambda p, a: None, slowdown=lambda p: 6.0)
    assert (
        list(timing_says) == ["precision=bf16", "precision=fp16"]
        and "6.0x slower than fp32" in timing_says["precision=bf16"]
    )
    assert emulated_precisions("gpu", options=options, notice=lambda p, a: "x", slowdown=lambda p: 9.0) == {}


def test_the_report_says_what_each_decision_cost():
    result = fake_result()
    result.steps[0].probes_run, result.steps[0].seconds, result.steps[0].reused = 3, 41.2, 2
    text = render({"result": result.to_dict(), "machine": {}})
    steps = text.split("## Steps")[1]
    assert "probes, s" in steps and "3, 41 s +2 reused" in steps
    assert "Cost: " in steps and "decisions" in steps


def test_the_steps_chart_draws_a_ratio_that_lies_outside_its_interval(tmp_path):
    # an old tune record (or any rounding) can hold a ratio outside [low, high]: the chart is still drawn
    from segperf.tune.report import charts

    steps = [
        {"axis": "workers", "option": ["workers=auto"], "ratio": 2.5, "low": 1.1, "high": 2.0, "verdict": "kept"},
        {"axis": "compile", "option": ["compile=on"], "ratio": 0.3, "low": None, "high": None, "verdict": "slower"},
    ]
    written = charts({"result": {"start": [], "steps": steps}}, tmp_path)
    assert written == [tmp_path / "steps.png"] and written[0].stat().st_size > 0


def test_the_final_side_by_side_reads_full_runs_so_a_screened_preset_leaves_the_claim_decided():
    # an outside model's tune: +opt=all's two probes screened out (a cold compile's 5.9 images/s,
    # then 138), pooled with the rest they made 205 against 414 four runs a side "~2.04x [0.77-5.40]"
    result = fake_result().to_dict()
    start, preset, tuned = result["start"], result["final_configs"]["+opt=all"], result["best"]

    def probe(config, rate, **kw):
        return {"config": config, "images_per_s": rate, "screened": False, "cut": False, "failed": None} | kw

    result["final"] = {
        "start": [probe(start, r) for r in (204, 209, 193, 205)],
        "+opt=all": [probe(preset, 5.9, screened=True), probe(preset, 138, screened=True)],
        "tuned": [probe(tuned, r) for r in (426, 414, 402, 413)],
    }
    rows = {row["name"]: row for row in final_table(result, 0.95)}
    assert rows["tuned"]["distinguishable"] is True
    low, high = rows["tuned"]["vs_start_interval"]
    assert 1.8 < low < rows["tuned"]["vs_start"] < high < 2.3
    assert rows["+opt=all"]["runs"] == 0 and rows["+opt=all"]["vs_start"] is None
    assert tuned_against_presets(result, 0.95)["against"] == "start"
    final = render({"result": result, "machine": {}}).split("## Final side by side")[1].split("## Steps")[0]
    cells = {
        line.split("|")[1].strip(): line.split("|")[3].strip() for line in final.splitlines() if line.startswith("| ")
    }
    assert cells["+opt=all"] == "2 screened out"
    assert cells["tuned"] == "414 [402–426] ×4"
    # a screened probe beside full runs is counted, not averaged in
    result["final"]["tuned"].append(probe(tuned, 60.0, screened=True))
    assert final_table(result, 0.95)[-1]["images_per_s"]["median"] == 413.5
    final = render({"result": result, "machine": {}}).split("## Final side by side")[1]
    assert "414 [402–426] ×4 (+1 screened out)" in final


def test_runs_other_processes_kept_busy_are_counted_and_warned_of_in_the_console_and_the_report(
    tmp_path, monkeypatch, capsys
):
    # a tune beside a test run answered "the start itself" without a word of the load
    quiet = {"others_cores": 0.01, "steal_cores": 0.0, "cores": 2}
    busy = {"others_cores": 0.8, "steal_cores": 0.0, "cores": 2}
    assert not probe_from_results((), run_folder(tmp_path, "0_", results(machine_load=quiet))).busy
    assert probe_from_results((), run_folder(tmp_path, "1_", results(machine_load=busy))).busy
    assert not probe_from_results((), run_folder(tmp_path, "2_", results())).busy  # an older record: not known
    result = fake_result()
    result.runs, result.busy_runs = 20, 3
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    config = compose_tune(f"hydra.sweep.dir={tmp_path / 'tune'}")
    finish(result, config, ComposingLoader(), compose_tune().tune, "python -m segperf.tune", [])
    printed = capsys.readouterr().out
    assert "segperf.tune: warning: other processes kept the machine busy during 3 of 20 runs" in printed
    report = (tmp_path / "tune" / "tune_report.md").read_text()
    assert "- **busy machine**: other processes kept the machine busy during 3 of 20 runs" in report

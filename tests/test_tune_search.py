"""The tuner's decisions (segperf.tune.search) on a fake workload whose speeds are known.

Each override of a configuration multiplies its images/s by a known factor; every probe adds
seeded log-normal noise (3%, about what repeats of one configuration scatter by on a quiet
machine) and advances a fake clock by its wall time (a fixed start-up plus a fixed number of
images at the probe's speed, whole seconds so that sums of times are exact; a probe below the
screening floor stops after SCREEN_IMAGES). The noise of a
probe depends only on the seed, the configuration and which repeat of it this is, so that a
rerun from the journal sees the numbers an uninterrupted run saw.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from dataclasses import replace

import pytest

from segperf.perf.decision import compare_throughput
from segperf.tune.journal import Journal, JournalError
from segperf.tune.native import native_presets
from segperf.tune.probe import Config, Probe
from segperf.tune.search import (
    FAILED,
    FINAL_GIVE_UP_FAILURES,
    KEPT,
    NOT_APPLIED,
    SKIPPED,
    SLOWER,
    WORSE,
    Tuner,
    stops_compiling,
)
from segperf.tune.space import SearchAxis, merge, share_cores

START_SPEED = 10.0  # images/s of the start
STARTUP_S = 10  # each probe's start-up and warm-up
IMAGES = 200  # images each probe times: 30 s at the start's speed
SCREEN_IMAGES = 40  # images a screened-out probe gets through: warm-up and its first timed steps


def axis(name: str, *options: str, start: str | None = None, key: str = "", learning: bool = False) -> SearchAxis:
    """An axis like space.axes makes: group options `name=option`, the start's option first."""
    start = start or options[0]
    return SearchAxis(
        name, tuple((f"{name}={o}",) for o in options), (name, key or f"cfg.{name}"), (f"{name}={start}",), learning
    )


AXES = [
    axis("precision", "fp32", "bf16", learning=True),
    axis("compile", "off", "on"),
    axis("workers", "off", "auto"),
    axis("pin", "off", "on"),
]
DEFAULTS = {a.start[0] for a in AXES}  # the options a configuration without overrides composes
ALL = ("compile=on", "pin=on", "precision=bf16", "workers=auto")  # +opt=all, spelt out
PRESETS = {"+opt=all": ALL, "+opt=all compile=off": ("compile=off", "pin=on", "precision=bf16", "workers=auto")}


class Workload:
    """The fake machine: `speeds` (override -> factor), `not_applied` / `failing` overrides, a
    quality loss per override for learning runs (a number, or {training seed: loss} for a loss
    that one seed's draw alone shows; a seed not listed loses nothing), and `interrupt_after`
    probes a Ctrl-C."""

    def __init__(
        self,
        speeds,
        seed=0,
        noise=0.03,
        not_applied=(),
        failing=(),
        quality_loss=None,
        interrupt_after=None,
        first_run_s=None,
        aliases=None,
        together=None,
    ):
        self.speeds, self.seed, self.noise = speeds, seed, noise
        # {overrides: factor}: what a set of overrides multiplies the speed by beyond their own factors
        self.together = together or {}
        # override -> seconds its first probe pays once (a cold torch.compile cache)
        self.first_run_s = first_run_s or {}
        self.not_applied, self.failing = set(not_applied), set(failing)
        self.quality_loss = quality_loss or {}
        self.interrupt_after = interrupt_after
        # override -> the override it composes the same run as (workers=auto is cfg.workers=2 here)
        self.aliases = aliases or {}
        self.now = 0.0
        self.repeats: Counter[tuple[str, Config]] = Counter()  # committed when a batch returns
        self.measured: list[tuple[str, Config, int]] = []
        self.limits: list[tuple[Config, float | None]] = []

    def clock(self) -> float:
        return self.now

    def speed(self, config: Config) -> float:
        alone = math.prod(self.speeds.get(o, 1.0) for o in config)
        return START_SPEED * alone * math.prod(f for pair, f in self.together.items() if pair <= set(config))

    def identity(self, config: Config) -> Config:
        """The run a configuration composes: its overrides with the aliases resolved, without the
        ones that set what the start composes anyway (compile=off is the default, as in conf/)."""
        return tuple(sorted({self.aliases.get(o, o) for o in config} - DEFAULTS))

    def measure(self, configs, limit, floor=None):
        return self._run("speed", configs, limit, floor)

    def quality(self, configs, limit):
        return self._run("quality", configs, limit)

    def _run(self, kind, configs, limit, floor=None):
        repeats, probes = self.repeats.copy(), []
        for config in configs:
            if self.interrupt_after is not None and len(self.measured) >= self.interrupt_after:
                raise KeyboardInterrupt  # mid-batch: this batch's probes are lost, as with a real Ctrl-C
            repeat = repeats[(kind, config)]
            repeats[(kind, config)] += 1
            self.measured.append((kind, config, repeat))
            self.limits.append((config, limit))
            probes.append(self._probe(kind, config, repeat, limit, floor))
            self.now += probes[-1].wall_s
        self.repeats = repeats
        return probes

    def loss(self, override: str, config: Config) -> float:
        """What `override` costs the quality of a learning run of `config` (trained with its seed= or 0)."""
        loss = self.quality_loss.get(override, 0.0)
        if isinstance(loss, dict):
            seed = next((int(o.split("=")[1]) for o in config if o.startswith("seed=")), 0)
            return loss.get(seed, 0.0)
        return loss

    def _probe(self, kind: str, config: Config, repeat: int, limit: float | None, floor=None) -> Probe:
        rng = random.Random(f"{self.seed}/{kind}/{' '.join(config)}/{repeat}")
        images_per_s = self.speed(config) * math.exp(rng.gauss(0.0, self.noise))
        wall = float(round(STARTUP_S + IMAGES / images_per_s))
        if repeat == 0:
            wall += sum(self.first_run_s.get(o, 0.0) for o in config)
        if kind == "quality":
            quality = 0.98 - sum(self.loss(o, config) for o in config) + rng.gauss(0.0, 0.002)
            return Probe(config, images_per_s, quality=quality, wall_s=2 * wall)
        if any(o in self.failing for o in config):
            return Probe(config, None, wall_s=STARTUP_S, failed="RuntimeError: the compiler failed")
        ignored = tuple(f"cfg.{o.split('=')[0]}: not on this machine" for o in config if o in self.not_applied)
        if floor is not None and images_per_s < floor:
            wall = float(round(STARTUP_S + SCREEN_IMAGES / images_per_s))
            if limit is None or wall <= limit:
                return Probe(config, images_per_s, ignored, wall_s=wall, screened=True)
        if limit is not None and wall > limit:
            return Probe(config, images_per_s, ignored, wall_s=float(math.floor(limit)), cut=True)
        return Probe(config, images_per_s, ignored, wall_s=wall)


def tune(workload: Workload, axes=AXES, presets=PRESETS, budget_s=3600.0, **kwargs):
    quality = kwargs.pop("quality", None)
    return Tuner(
        (),
        axes,
        workload.measure,
        budget_s=budget_s,
        presets=presets,
        clock=workload.clock,
        quality=workload.quality if quality else None,
        identity=workload.identity,
        **kwargs,
    ).run()


def steps_of(result, option: str):
    return [s for s in result.steps if s.stage != "presets" and s.option == (option,)]


def test_keeps_a_real_gain_and_the_speed_up_shows_in_the_final_side_by_side():
    workload = Workload({"workers=auto": 1.5})
    result = tune(workload, presets={})
    assert "workers=auto" in result.best
    assert [s.verdict for s in steps_of(result, "workers=auto")] == [KEPT]
    tuned = [p.images_per_s for p in result.final["tuned"]]
    start = [p.images_per_s for p in result.final["start"]]
    assert len(tuned) == len(start) == 4  # the claim, topped up to max_runs with the budget left
    assert compare_throughput(tuned, start).ratio == pytest.approx(1.5, rel=0.1)


def test_the_claim_is_read_from_max_runs_probes_a_side_when_the_search_leaves_budget_and_min_runs_when_not():
    roomy = tune(Workload({"workers=auto": 1.5}), presets=PRESETS, budget_s=3600.0, min_runs=2, max_runs=5)
    assert len(roomy.final["tuned"]) == len(roomy.final["start"]) == 5
    tight = tune(Workload({"workers=auto": 1.5}), budget_s=300.0, quality=True)
    assert min(len(tight.final["tuned"]), len(tight.final["start"])) >= 2
    assert tight.elapsed_s <= 300.0 + max(p.wall_s for p in tight.final["tuned"])


def test_a_start_under_half_the_tuned_speed_runs_in_full_in_the_final_side_by_side_the_claim_reads():
    # tuned 3x the start: under the screening floor (half the tuned speed), every final probe of the
    # start would be stopped after its first timed steps and the claim read from screened-out probes
    result = tune(Workload({"workers=auto": 3.0}), presets={})
    assert "workers=auto" in result.best
    assert len(result.final["start"]) >= 2 and not any(p.screened for p in result.final["start"])
    start = [p.images_per_s for p in result.final["start"]]
    tuned = [p.images_per_s for p in result.final["tuned"]]
    assert compare_throughput(tuned, start).ratio == pytest.approx(3.0, rel=0.1)


def test_nothing_is_topped_up_for_the_claim_when_the_start_is_the_answer():
    workload = Workload({"workers=auto": 0.7, "compile=on": 0.8, "precision=bf16": 0.9, "pin=on": 0.95})
    result = tune(workload, budget_s=3600.0, max_runs=6)
    assert result.best == ()
    assert len(result.final["start"]) == len(result.final["tuned"]) < 6


@pytest.mark.parametrize("seed", range(3))
def test_workers_that_pay_only_with_threads_left_to_them_are_found_where_the_two_share_the_cores(seed):
    """An outside CNN on 2 cores: workers alone 1.0x, one thread alone 0.91x, both 1.75x
    (docs/BENCHMARKS.md). One axis at a time keeps neither; with the pair as a workers option
    (space.share_cores, the tune's axes where the net computes on the CPU) the tune keeps both."""
    speeds = {"workers=auto": 1.0, "threads=half": 0.91}
    together = {frozenset(("workers=auto", "threads=half")): 1.75 / 0.91}
    axes = [*AXES, axis("threads", "default", "half")]
    apart = tune(Workload(speeds, seed=seed, together=together), axes=axes, presets={}, budget_s=1500.0)
    assert not {"workers=auto", "threads=half"} <= set(apart.best)
    shared = tune(Workload(speeds, seed=seed, together=together), axes=share_cores(axes), presets={}, budget_s=1500.0)
    assert {"workers=auto", "threads=half"} <= set(shared.best)
    [first] = [s for s in shared.steps if s.axis == "workers"][:1]
    assert first.option == ("workers=auto", "threads=half") and first.verdict == KEPT


def test_a_no_op_option_is_rarely_kept_over_many_seeds():
    """What is tested: across 40 seeds, every comparison of an option with no effect at all
    (1.00x: compile, workers and pin here) against the best, measured A B A B with 3% noise for
    2 to 4 pairs, is counted; the share that ends "kept" (a false gain) must stay at or below 10%.
    Welch at 95% is two-sided, so one look would keep a no-op 2.5% of the time; looking again
    after the 3rd and 4th pair raises that a little."""
    no_ops = kept = 0
    for seed in range(40):
        result = tune(Workload({}, seed=seed), axes=AXES[1:], presets={})
        for step in result.steps:
            if step.stage == "axes":
                no_ops += 1
                kept += step.verdict == KEPT
    assert no_ops >= 40 * 3  # each axis once, and again where a (false) gain moved the best
    assert kept / no_ops <= 0.10, f"{kept} of {no_ops} no-op comparisons kept"


def test_a_setting_not_applied_or_a_failed_run_is_never_kept_however_fast():
    workload = Workload({"pin=on": 2.0, "compile=on": 3.0}, not_applied={"pin=on"}, failing={"compile=on"})
    result = tune(workload, presets={})
    assert "pin=on" not in result.best and "compile=on" not in result.best
    assert [s.verdict for s in steps_of(result, "pin=on")] == [NOT_APPLIED]
    assert "cfg.pin: not on this machine" in steps_of(result, "pin=on")[0].note
    assert [s.verdict for s in steps_of(result, "compile=on")] == [FAILED]
    # one pair each: a second would tell nothing new
    assert (
        len(steps_of(result, "pin=on")[0].candidate_probes)
        == len(steps_of(result, "compile=on")[0].candidate_probes)
        == 1
    )


def test_an_option_the_best_already_has_is_not_measured():
    workload = Workload({"workers=auto": 1.5})
    tune(workload, presets={})
    measured = {config for _, config, _ in workload.measured}
    assert ("workers=off",) not in measured and ("pin=off",) not in measured  # the start's own options


def test_a_pathologically_slow_candidate_is_cut_at_three_times_the_best_probe_and_judged_slower():
    workload = Workload({"precision=bf16": 0.02})  # bf16 emulated: 50x slower, 10,000 s uncut
    result = tune(workload, presets={}, limit_floor_s=0)
    [step] = steps_of(result, "precision=bf16")
    assert step.verdict == SLOWER and "cut at the time limit" in step.note
    # cut on its first run, run once more (the first may pay one-time costs), cut again: judged
    assert len(step.candidate_probes) == 2 and all(p.cut for p in step.candidate_probes)
    best_wall = sorted(p.wall_s for p in step.against_probes)[0]
    limit = next(limit for config, limit in workload.limits if config == ("precision=bf16",))
    assert limit == pytest.approx(3 * best_wall)
    assert step.candidate_probes[0].wall_s <= limit


@pytest.mark.parametrize("budget_s", [300.0, 600.0, 900.0, 1500.0])
def test_the_budget_is_never_exceeded_by_more_than_one_probe(budget_s):
    for seed in range(5):
        workload = Workload({"workers=auto": 1.3, "compile=on": 0.8}, seed=seed)
        result = tune(workload, budget_s=budget_s, quality=True)
        longest = max(p.wall_s for s in result.steps for p in s.candidate_probes + s.against_probes)
        assert workload.now <= budget_s + longest
        assert result.elapsed_s == workload.now
        if budget_s <= 300:
            assert result.stopped_by_budget
            assert any(s.verdict == SKIPPED and not s.candidate_probes for s in result.steps)


def test_the_report_names_the_axes_the_budget_did_not_reach_and_a_roomy_budget_reaches_every_axis():
    from segperf.tune.report import axes_tried

    workload = Workload({"workers=auto": 1.3, "compile=on": 0.8})
    roomy = tune(workload, budget_s=3600.0, quality=True)
    assert roomy.axes == [a.name for a in AXES]
    assert axes_tried(roomy.to_dict()) == f"{len(AXES)} of {len(AXES)}"
    tight = tune(Workload({"workers=auto": 1.3, "compile=on": 0.8}), budget_s=300.0, quality=True)
    skipped = [s.axis for s in tight.steps if s.stage == "axes" and s.verdict == SKIPPED]
    reached = {s.axis for s in tight.steps if s.stage == "axes" and s.verdict != SKIPPED}
    missed = [a.name for a in AXES if a.name not in reached]
    assert skipped and missed
    assert axes_tried(tight.to_dict()) == (
        f"{len(AXES) - len(missed)} of {len(AXES)} (not reached within the budget: {', '.join(missed)})"
    )


def test_the_final_side_by_side_and_the_quality_check_fit_in_the_budget_they_are_reserved_from():
    workload = Workload({"workers=auto": 1.3})
    result = tune(workload, budget_s=300.0, quality=True)
    assert result.stopped_by_budget
    assert all(len(probes) >= 2 for probes in result.final.values())
    assert result.quality.verdict in ("passed", "same as start")


def journal_run(workload, path, **kwargs):
    return tune(workload, journal=Journal(path), quality=True, **kwargs)


@pytest.mark.parametrize("interrupt_after", [1, 5, 9, 14])
def test_a_rerun_continues_from_the_journal_and_ends_where_an_uninterrupted_tune_ends(tmp_path, interrupt_after):
    speeds = {"workers=auto": 1.4, "precision=bf16": 2.0, "compile=on": 0.9}
    whole = journal_run(Workload(speeds), tmp_path / "whole.jsonl", budget_s=1500.0)

    workload = Workload(speeds, interrupt_after=interrupt_after)
    with pytest.raises(KeyboardInterrupt):
        journal_run(workload, tmp_path / "tune.jsonl", budget_s=1500.0)
    recorded = set(Journal(tmp_path / "tune.jsonl").recorded())
    before = len(workload.measured)
    workload.interrupt_after = None  # the user reruns the same command
    resumed = journal_run(workload, tmp_path / "tune.jsonl", budget_s=1500.0)

    assert resumed == whole
    measured_again = workload.measured[before:]
    assert not recorded & set(measured_again)  # nothing the journal has is measured twice
    # all that is measured is what the journal lacked: the uninterrupted tune's probes, less the recorded
    assert len(measured_again) == len(Journal(tmp_path / "whole.jsonl")) - len(recorded)


def test_a_rerun_of_a_finished_tune_measures_nothing_and_a_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "tune.jsonl"
    first = journal_run(Workload({"workers=auto": 1.5}), path)
    with path.open("a") as f:
        f.write('{"kind": "speed", "config": ["workers=au')  # killed mid-write
    workload = Workload({"workers=auto": 1.5})
    again = journal_run(workload, path)
    assert again == first and workload.measured == []
    assert all(json.loads(line) for line in path.read_text().splitlines())  # the torn line was cut off


def test_a_journal_damaged_before_its_last_line_stops_with_the_file_and_line(tmp_path):
    path = tmp_path / "tune.jsonl"
    journal_run(Workload({}), path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    with pytest.raises(JournalError, match=r"tune\.jsonl, line 2: .*delete the file"):
        Journal(path)


def test_a_journal_of_another_start_is_refused(tmp_path):
    path = tmp_path / "tune.jsonl"
    journal_run(Workload({}), path)
    with pytest.raises(JournalError, match="another tune"):
        Tuner(("size=quick",), AXES, Workload({}).measure, budget_s=600, presets={}, journal=Journal(path)).run()


def test_the_quality_guard_rejects_a_faster_configuration_that_learns_worse_and_says_why():
    # seed 1: under seed 0's draws the pooled-noise rule keeps the no-op compile=on (a 7% gap in two
    # pairs, one of the ~5% false calls it allows), and this test is about the quality guard
    workload = Workload({"precision=bf16": 2.0, "workers=auto": 1.4}, seed=1, quality_loss={"precision=bf16": 0.2})
    result = tune(workload, presets={}, quality=True)
    assert "precision=bf16" not in result.best and "workers=auto" in result.best
    check = result.quality
    assert check.verdict == WORSE and check.fallback == result.best
    assert "precision=bf16" in check.reason and "beyond the tolerance" in check.reason
    [rejected] = [s for s in result.steps if s.verdict == WORSE]
    # the rejection rests on two seeds each side, and the note names all four qualities
    start_quality, rejected_quality = (f"{p.quality:.3f}" for p in check.probes[:2])
    start_again, rejected_again = (f"{p.quality:.3f}" for p in check.confirmations)
    assert "precision=bf16" in rejected.candidate
    assert f"quality {rejected_quality} (seed 0) and {rejected_again} (seed 1)" in rejected.note
    assert f"against the start's {start_quality} (seed 0) and {start_again} (seed 1)" in rejected.note
    assert [p.config for p in check.probes] == [(), ("precision=bf16", "workers=auto"), ("workers=auto",)]
    # the fallback passed on its first run: no confirmation of it
    assert [p.config for p in check.confirmations] == [("seed=1",), ("precision=bf16", "seed=1", "workers=auto")]


def test_a_lower_is_better_quality_is_said_as_the_run_logged_it_with_its_direction():
    # an outside regression model's guard printed its val_mae negated ("quality -3.727 against the
    # start's -4.050"): the runner negates a `mode: min` metric so that higher is better inside
    workload = Workload({"precision=bf16": 2.0, "workers=auto": 1.4}, seed=1, quality_loss={"precision=bf16": 0.2})
    measure = workload.quality

    def as_error(configs, limit):  # an error of 4 - the fake's quality, lower is better
        return [
            replace(
                p,
                quality=None if p.quality is None else p.quality - 4.0,
                quality_metric="val_mae",
                lower_is_better=True,
            )
            for p in measure(configs, limit)
        ]

    workload.quality = as_error
    lines: list[str] = []
    result = tune(workload, presets={}, quality=True, progress=lines.append)
    assert "precision=bf16" not in result.best  # rejected as before: negated inside, the guard is unchanged
    said = [line for line in lines if "] start: quality " in line]
    assert said and all(re.search(r"start: quality 3\.\d{3} val_mae \(lower is better\)$", line) for line in said)
    [rejected] = [s for s in result.steps if s.verdict == WORSE]
    start_error, rejected_error = (f"{-p.quality:.3f}" for p in result.quality.probes[:2])
    assert start_error.startswith("3.") and float(rejected_error) > float(start_error)
    assert (
        f"quality {rejected_error} (seed 0)" in rejected.note and f"the start's {start_error} (seed 0)" in rejected.note
    )
    assert "(val_mae, lower is better): worse by 0." in rejected.note and "-3." not in rejected.note


def recorded_quality_batches(workload: Workload) -> list[list[Config]]:
    """The batches the quality guard hands the learning-run measure, as it hands them."""
    batches, measure = [], workload.quality

    def recording(configs, limit):
        batches.append(list(configs))
        return measure(configs, limit)

    workload.quality = recording
    return batches


def test_the_quality_guard_passes_a_configuration_that_learns_as_well_without_a_second_seed():
    workload = Workload({"precision=bf16": 2.0}, seed=1)  # seed: see above
    batches = recorded_quality_batches(workload)
    result = tune(workload, presets={}, quality=True)
    assert result.best == ("precision=bf16",) and result.quality.verdict == "passed"
    assert batches == [[()], [("precision=bf16",)]] and result.quality.confirmations == []
    assert result.quality.reason.startswith("precision=bf16: quality ") and "seed" not in result.quality.reason


def test_a_configuration_below_the_start_on_one_seed_but_within_tolerance_on_the_mean_of_two_is_kept():
    # seed 0's draw costs 0.03 (beyond the 0.02 tolerance), seed 1's nothing: the mean, 0.015, is within
    workload = Workload({"precision=bf16": 2.0}, seed=1, quality_loss={"precision=bf16": {0: 0.03}})
    batches = recorded_quality_batches(workload)
    result = tune(workload, presets={}, quality=True)
    check = result.quality
    assert result.best == ("precision=bf16",) and check.verdict == "passed" and check.fallback is None
    # the start and the candidate with the next seed, interleaved in one batch
    assert batches == [[()], [("precision=bf16",)], [("seed=1",), ("precision=bf16", "seed=1")]]
    assert check.seeds == [0, 1]
    first, second = check.probes[1], check.confirmations[1]
    assert check.probes[0].quality - first.quality > 0.02  # seed 0 alone would have rejected it
    assert f"quality {first.quality:.3f} (seed 0) and {second.quality:.3f} (seed 1)" in check.reason
    assert "within the tolerance of 0.02 on the mean of two seeds" in check.reason
    assert not [s for s in result.steps if s.verdict == WORSE]


def test_a_configuration_below_on_both_seeds_is_rejected_and_its_fallback_reuses_the_starts_second_seed():
    axes = [*AXES, axis("upsample", "upconv", "deconv", learning=True)]
    speeds = {"precision=bf16": 2.0, "upsample=deconv": 1.5, "workers=auto": 1.4}
    workload = Workload(speeds, seed=1, quality_loss={"upsample=deconv": 0.05})
    batches = recorded_quality_batches(workload)
    result = tune(workload, axes=axes, presets={}, quality=True)
    check = result.quality
    best = batches[1][0]  # what the search found: precision and upsample are two learning changes to undo
    assert {"precision=bf16", "upsample=deconv", "workers=auto"} <= set(best)
    without_bf16 = tuple(o for o in best if o != "precision=bf16")
    without_both = tuple(o for o in without_bf16 if o != "upsample=deconv")
    assert result.best == without_both and check.verdict == WORSE and check.fallback == without_both
    assert batches == [
        [()],
        [best],
        [("seed=1",), merge(best, ("seed=1",))],  # the start's second seed, with the first confirmed
        [without_bf16],
        [merge(without_bf16, ("seed=1",))],  # the start's second-seed run reused, not rerun
        [without_both],  # passes on its first run: not confirmed
    ]
    rejected = [s for s in result.steps if s.verdict == WORSE]
    assert [s.candidate for s in rejected] == [best, without_bf16]
    assert all(len(s.candidate_probes) == len(s.against_probes) == 2 for s in rejected)
    assert all(s.against_probes == [check.probes[0], check.confirmations[0]] for s in rejected)
    assert check.reason.count("beyond the tolerance") == 2


def test_a_learning_run_that_gives_no_quality_is_rejected_without_a_second_seed():
    workload = Workload({"precision=bf16": 2.0}, seed=1)
    measure = workload.quality

    def bf16_crashes(configs, limit):
        probes = measure(configs, limit)
        crashed = [Probe(p.config, None, failed="RuntimeError: NaN loss") for p in probes]
        return [c if "precision=bf16" in p.config else p for p, c in zip(probes, crashed, strict=True)]

    workload.quality = bf16_crashes
    result = tune(workload, presets={}, quality=True)
    assert result.best == () and result.quality.verdict == WORSE and result.quality.confirmations == []
    assert "its learning run gave no quality (RuntimeError: NaN loss)" in result.quality.reason


def test_when_the_starts_second_seed_run_fails_the_start_side_is_its_first_run_and_the_reason_says_so():
    workload = Workload({"precision=bf16": 2.0}, seed=1, quality_loss={"precision=bf16": {0: 0.03}})
    measure = workload.quality

    def start_crashes_on_seed_1(configs, limit):
        return [
            Probe(p.config, None, failed="OSError: disk full") if p.config == ("seed=1",) else p
            for p in measure(configs, limit)
        ]

    workload.quality = start_crashes_on_seed_1
    result = tune(workload, presets={}, quality=True)
    check = result.quality
    assert result.best == ("precision=bf16",) and check.verdict == "passed"  # mean of its two against the start's one
    assert "against the start's " in check.reason and "none (seed 1: OSError: disk full)" in check.reason
    assert f"mean {check.probes[0].quality:.3f}" in check.reason


def test_on_a_start_with_its_own_seed_the_confirmation_trains_with_the_next_one_instead():
    workload = Workload({"precision=bf16": 2.0}, seed=1, quality_loss={"precision=bf16": {7: 0.05}})
    batches = recorded_quality_batches(workload)
    Tuner(
        ("seed=7",),
        AXES,
        workload.measure,
        budget_s=3600.0,
        presets={},
        clock=workload.clock,
        quality=workload.quality,
        identity=workload.identity,
        seed=7,
    ).run()
    assert batches[2] == [("seed=8",), ("precision=bf16", "seed=8")]  # one seed= each: 7 replaced, not added


def test_the_best_preset_is_adopted_without_what_the_machine_did_not_apply():
    workload = Workload({"precision=bf16": 3.0, "compile=on": 0.9}, not_applied={"pin=on"})
    result = tune(workload)
    presets = {s.axis: s for s in result.steps if s.stage == "presets"}
    assert presets["+opt=all compile=off"].verdict == KEPT
    assert "without pin=on" in presets["+opt=all compile=off"].note
    assert "pin=on" not in result.best and "precision=bf16" in result.best and "compile=on" not in result.best


@pytest.mark.parametrize(
    "speeds",
    [
        {"precision=bf16": 3.0, "compile=on": 1.2, "workers=auto": 1.1},  # a CPU with AVX-512 BF16
        {"precision=bf16": 0.1, "compile=on": 0.95, "workers=auto": 1.2},  # bf16 emulated: +opt=all is slower
        {"precision=bf16": 1.0, "compile=on": 1.0, "workers=auto": 1.0},  # nothing helps
    ],
)
def test_the_tuned_configuration_is_never_slower_than_the_best_preset_beyond_noise(speeds):
    for seed in range(10):
        workload = Workload(speeds, seed=seed)
        result = tune(workload)
        best_known = max(workload.speed(c) for c in [(), *PRESETS.values()])
        assert workload.speed(result.best) >= 0.95 * best_known, (seed, result.best)
        for name, probes in result.final.items():
            side_by_side = compare_throughput(
                [p.images_per_s for p in result.final["tuned"]], [p.images_per_s for p in probes]
            )
            assert not (side_by_side.distinguishable and side_by_side.ratio < 1), (seed, name)


def test_progress_names_each_probe_its_candidate_and_images_per_s():
    lines: list[str] = []
    workload = Workload({"workers=auto": 1.5})
    tune(workload, presets={}, progress=lines.append)
    assert len(lines) == len(workload.measured)  # one line per probe run, none for a probe reused
    pattern = re.compile(r"\[step \d+, axes workers, [\d.]+/60\.0 min\] workers=auto: [\d.]+ images/s")
    assert any(pattern.fullmatch(line) for line in lines), lines


def test_progress_names_the_settings_a_probe_did_not_apply_apart_from_a_failure():
    lines: list[str] = []
    workload = Workload({"pin=on": 1.2}, not_applied={"pin=on"}, failing={"compile=on"})
    tune(workload, presets={}, progress=lines.append)
    assert any(line.endswith("pin=on: 12 images/s (cfg.pin not applied)") for line in lines), lines
    failed = [line for line in lines if "failed:" in line]
    assert failed and not any("not applied" in line for line in failed)


def test_the_result_is_json():
    result = tune(Workload({"workers=auto": 1.5}), quality=True)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["best"] == list(result.best) and {s["verdict"] for s in data["steps"]} <= {
        KEPT,
        SLOWER,
        "not distinguishable",
        NOT_APPLIED,
        FAILED,
        SKIPPED,
        WORSE,
    }


def test_a_candidate_cut_only_by_its_first_runs_one_time_cost_is_measured_again_and_kept():
    # compile=on: 1.4x faster, but its first probe pays a cold compile cache (far past the limit)
    workload = Workload({"compile=on": 1.4}, first_run_s={"compile=on": 500.0})
    result = tune(workload, presets={}, limit_floor_s=0)
    [step] = steps_of(result, "compile=on")
    assert step.candidate_probes[0].cut and not any(p.cut for p in step.candidate_probes[1:])
    assert step.verdict == KEPT and "compile=on" in result.best


# -- a CPU without bf16 instructions (AVX2 only): the presets are wrong there -------------------

REAL_AXES = [  # the U-Net on Carvana's axes, in space.SEARCH_ORDER
    axis("decode", "full", "reduced", learning=True),
    axis("cache", "off", "memory", "device"),
    axis("workers", "off", "auto"),
    axis("threads", "default", "one", "all"),
    axis("prefetch", "off", "on"),
    axis("memory_format", "baseline", "channels_last"),
    axis("upsample", "upconv", "deconv", learning=True),
    axis("compile", "off", "on"),
    axis("precision", "fp32", "bf16", "fp16", learning=True),
    axis("pin", "off", "on"),
]
ALL_REAL = (
    "cache=memory",
    "compile=on",
    "decode=reduced",
    "memory_format=channels_last",
    "pin=on",
    "precision=bf16",
    "prefetch=on",
    "upsample=deconv",
    "workers=auto",
)
REAL_PRESETS = {"+opt=all": ALL_REAL, "+opt=all compile=off": merge(ALL_REAL, ("compile=off",))}
PRECISIONS = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
EMULATED = {"precision=bf16": "precision bf16-mixed: emulated", "precision=fp16": "precision 16-mixed: emulated"}
AVX2_SPEEDS = {  # bf16 and fp16 emulated: 10x slower; the data side pays, compile does not on 2 cores
    "precision=bf16": 0.1,
    "precision=fp16": 0.1,
    "decode=reduced": 1.15,
    "cache=memory": 1.1,
    "workers=auto": 1.1,
    "memory_format=channels_last": 1.05,
    "compile=on": 0.95,
}


def avx2_tune(seed: int, speeds=AVX2_SPEEDS, quality_loss=None, **kwargs):
    """A 10-minute tune on the fake AVX2 machine, with the presets native.native_presets derives there."""
    presets, notes = native_presets(REAL_PRESETS, EMULATED, PRECISIONS)
    workload = Workload(speeds, seed=seed, not_applied={"pin=on"}, quality_loss=quality_loss)
    result = tune(workload, axes=REAL_AXES, presets=presets, budget_s=600.0, quality=True, emulated=EMULATED, **kwargs)
    return workload, presets, notes, result


def test_on_a_cpu_without_bf16_the_presets_are_fp32_ones_and_say_why():
    presets, notes = native_presets(REAL_PRESETS, EMULATED, PRECISIONS)
    assert list(presets) == ["+opt=all precision=fp32", "+opt=all compile=off precision=fp32"]
    assert all("precision=fp32" in p and "precision=bf16" not in p for p in presets.values())
    assert "preset +opt=all: precision bf16-mixed: emulated; measured as +opt=all precision=fp32" in notes


def test_a_preset_that_is_another_presets_fp32_form_on_a_cpu_without_bf16_is_measured_once():
    fp32_fast = merge(ALL_REAL, ("compile=off", "precision=fp32"))  # the third preset, spelt out
    presets, notes = native_presets(
        {**REAL_PRESETS, "+opt=all precision=fp32 compile=off": fp32_fast}, EMULATED, PRECISIONS
    )
    assert list(presets) == ["+opt=all precision=fp32", "+opt=all compile=off precision=fp32"]
    assert presets["+opt=all compile=off precision=fp32"] == fp32_fast
    assert (
        "preset +opt=all precision=fp32 compile=off: the same configuration as "
        "+opt=all compile=off precision=fp32 here, left out"
    ) in notes
    native, _ = native_presets({**REAL_PRESETS, "+opt=all precision=fp32 compile=off": fp32_fast}, {}, PRECISIONS)
    assert len(native) == 3  # with bf16 native the three are three configurations


@pytest.mark.parametrize("seed", range(5))
def test_ten_minutes_on_an_avx2_machine_visit_every_axis_and_end_at_the_fp32_fast_preset(seed):
    workload, presets, _, result = avx2_tune(seed)
    visited = {s.axis for s in result.steps if s.stage == "axes" and s.verdict != SKIPPED}
    assert visited == {a.name for a in REAL_AXES}, [(s.axis, s.verdict) for s in result.steps]
    fast_preset = workload.speed(presets["+opt=all compile=off precision=fp32"])
    assert workload.speed(result.best) >= 0.95 * fast_preset, result.best
    assert "precision=bf16" not in result.best and "precision=fp16" not in result.best
    assert workload.now <= 600.0 + 60.0  # at most one learning run over


@pytest.mark.parametrize("seed", range(3))
def test_on_an_avx2_machine_one_low_draw_of_deconvs_quality_does_not_cost_the_tune_its_fastest_preset(seed):
    # docs/BENCHMARKS.md, a CPU without bf16 (simulated): the fp32 fast preset's learning run drew
    # Dice 0.948 against the start's 0.974 and was rejected; without upsample=deconv (1.2-1.3x at
    # 128x192) the tuned result fell below that preset. Here deconv's seed-0 draw is 0.03 low, its
    # seed-1 draw is not: confirmed on the mean of two seeds, the preset is kept
    speeds = AVX2_SPEEDS | {"upsample=deconv": 1.25}
    workload, presets, _, result = avx2_tune(seed, speeds, quality_loss={"upsample=deconv": {0: 0.03}})
    assert "upsample=deconv" in result.best and result.quality.verdict == "passed", result.quality.reason
    assert len(result.quality.confirmations) == 2  # the start's and the tuned configuration's second seed
    fast_preset = workload.speed(presets["+opt=all compile=off precision=fp32"])
    assert workload.speed(result.best) >= 0.95 * fast_preset, result.best


@pytest.mark.parametrize("interrupt_at", [1, 2, 3], ids=["mid-confirmation", "after-confirmation", "after-fallback"])
def test_a_rerun_replays_the_guards_second_seed_runs_from_the_journal(tmp_path, interrupt_at):
    speeds, loss = {"precision=bf16": 2.0, "workers=auto": 1.4}, {"precision=bf16": 0.2}
    finished = Workload(speeds, seed=1, quality_loss=loss)
    whole = journal_run(finished, tmp_path / "whole.jsonl")
    assert whole.quality.confirmations  # the best was confirmed on a second seed, then rejected
    # the start's second-seed run is the first probe of the confirming batch
    confirming = finished.measured.index(("quality", ("seed=1",), 0))

    workload = Workload(speeds, seed=1, quality_loss=loss, interrupt_after=confirming + interrupt_at)
    with pytest.raises(KeyboardInterrupt):
        journal_run(workload, tmp_path / "tune.jsonl")
    recorded = set(Journal(tmp_path / "tune.jsonl").recorded())
    before = len(workload.measured)
    workload.interrupt_after = None
    resumed = journal_run(workload, tmp_path / "tune.jsonl")

    assert resumed == whole
    assert not recorded & set(workload.measured[before:])  # nothing the journal has is measured again
    confirmations = {("quality", p.config, 0) for p in whole.quality.confirmations}
    if interrupt_at == 1:  # Ctrl-C inside the confirming batch: neither run was journaled, both run again
        assert not confirmations & recorded and confirmations <= set(workload.measured[before:])
    else:  # both were journaled: replayed, not run again
        assert confirmations <= recorded


def test_an_emulated_precision_is_tried_after_its_axis_native_options_once_and_briefly():
    workload, _, _, result = avx2_tune(0)
    [bf16] = [s for s in result.steps if s.option == ("precision=bf16",)]
    assert bf16.probes_run == 1 and bf16.verdict == SLOWER
    assert bf16.note.startswith("tried last and once: precision bf16-mixed: emulated")
    # its time limit is the best's own probe time, not three times it: it costs one probe at most
    [limit] = [limit for config, limit in workload.limits if "precision=bf16" in config]
    assert limit <= max(p.wall_s for p in bf16.against_probes)
    assert bf16.candidate_probes[0].wall_s <= limit


def test_screening_stops_a_far_slower_probe_after_its_first_timed_steps_and_judges_it_slower():
    workload = Workload({"precision=bf16": 0.1})  # not known as emulated: screened by its own speed
    result = tune(workload, presets={})
    [step] = steps_of(result, "precision=bf16")
    [probe] = step.candidate_probes
    assert probe.screened and not probe.cut and step.verdict == SLOWER
    assert probe.wall_s < STARTUP_S + IMAGES / workload.speed(("precision=bf16",)) / 2  # far less than a full probe
    assert "screened out after its first timed steps" in step.note and "under 1/2 of the best's" in step.note
    assert step.low is None and step.high is None  # decided by screening: no interval drawn around its ratio
    unscreened = tune(Workload({"precision=bf16": 0.1}), presets={}, screen_factor=None)
    assert not any(p.screened for s in steps_of(unscreened, "precision=bf16") for p in s.candidate_probes)


def test_identical_configurations_are_measured_once():
    # on 2 cores workers=auto and cfg.workers=2 compose the same run
    workload = Workload({"workers=auto": 1.0}, aliases={"cfg.workers=2": "workers=auto"})
    workers = SearchAxis(
        "workers", (("workers=off",), ("workers=auto",), ("cfg.workers=2",)), ("workers", "cfg.workers")
    )
    result = tune(workload, axes=[workers, AXES[1]], presets={})
    assert not any(config == ("cfg.workers=2",) for _, config, _ in workload.measured)
    assert not any(s.option == ("cfg.workers=2",) for s in result.steps)
    # and a probe of one configuration is never measured again once it has its runs: the best is reused
    assert Counter(config for _, config, _ in workload.measured)[()] <= 2 + 1  # its rounds, and one final top-up


def test_each_decision_records_the_probes_and_seconds_it_took():
    _, _, _, result = avx2_tune(1)
    decided = [s for s in result.steps if s.verdict != SKIPPED and s.stage != "quality"]
    # each decided on probes it ran or reused; pin=on on what an earlier probe said of it (not applied)
    assert all(s.probes_run > 0 or s.reused > 0 or "known from an earlier probe" in s.note for s in decided)
    axes = [s for s in decided if s.stage == "axes" and s.probes_run]
    # a probe of the candidate is charged to the decision that ran it: at least its last probe's time
    assert axes and all(s.seconds >= s.candidate_probes[-1].wall_s for s in axes)
    spent = sum(s.seconds for s in result.steps)
    assert 0 < spent <= result.elapsed_s


def test_a_budget_spent_before_the_quality_check_still_checks_the_best_rather_than_answer_with_the_start(
    monkeypatch,
):
    # probes that overran their estimates left the learning run less than it needs: the best, far
    # faster than the start, is still checked (past the budget, said so), not replaced by the start
    from segperf.tune.search import quality_guard

    guard = quality_guard.run

    def spent_guard(search, best):
        search.ledger.budget_s = search.ledger.elapsed()  # nothing left
        return guard(search, best)

    monkeypatch.setattr(quality_guard, "run", spent_guard)
    result = tune(Workload({"workers=auto": 2.0}), presets={}, quality=True)
    assert result.best == ("workers=auto",) and result.quality.verdict == "passed"
    assert "ran past the budget" in result.quality.reason
    # and when the best learns worse, the fallback without its learning change is checked too,
    # rather than the start (which the search measured slower) becoming the answer
    worse = tune(
        Workload({"precision=bf16": 2.0, "workers=auto": 1.5}, seed=1, quality_loss={"precision=bf16": 0.2}),
        presets={},
        quality=True,
    )
    assert worse.best == ("workers=auto",) and worse.quality.fallback == ("workers=auto",)
    # the best's learning run, its confirming second-seed runs and the fallback's learning run
    assert worse.quality.reason.count("ran past the budget") == 3
    assert "the second-seed learning runs of precision=bf16 workers=auto ran past the budget" in worse.quality.reason


def test_a_compile_that_buys_nothing_distinguishable_is_left_out_of_the_presets_and_the_axes():
    # compile=on 2% faster: inside this noise, so the tie goes to the configuration that does not compile
    speeds = {"compile=on": 1.02, "workers=auto": 1.5, "precision=bf16": 2.0}
    result = tune(Workload(speeds), quality=False)
    assert "compile=on" not in result.best and {"workers=auto", "precision=bf16"} <= set(result.best)
    [uncompiled] = [s for s in result.steps if s.stage == "presets" and s.axis == "+opt=all compile=off"]
    assert uncompiled.verdict == KEPT and "taken without torch.compile" in uncompiled.note
    # alone on its axis too: the best without presets that compile keeps compile=off on a tie
    axes_only = tune(Workload(speeds), presets={}, quality=False)
    assert "compile=on" not in axes_only.best


def test_a_compile_that_is_distinguishably_faster_is_kept():
    result = tune(Workload({"compile=on": 1.5, "workers=auto": 1.5}), quality=False)
    assert "compile=on" in result.best


def test_the_tie_rule_applies_only_to_the_same_configuration_without_compile():
    assert stops_compiling(("compile=off", "pin=on"), ("compile=on", "pin=on"))
    assert stops_compiling(("pin=on",), ("compile=on", "pin=on"))  # compile=off as the default, unspelt
    # another configuration that happens not to compile is no tie-break of compile's
    assert not stops_compiling(("compile=off",), ("compile=on", "pin=on"))
    assert not stops_compiling(("compile=off", "pin=on"), ("compile=off", "pin=on"))


def test_a_configuration_whose_runs_keep_failing_is_not_retried_until_the_budget_is_gone_and_the_result_says_so():
    # +opt=all's compile=on fails at every run: the final side by side wants two usable runs of it
    workload = Workload({"workers=auto": 1.5}, failing={"compile=on"})
    result = tune(workload, budget_s=3600.0)
    failed_all = [c for kind, c, _ in workload.measured if kind == "speed" and "compile=on" in c]
    assert 1 <= len(failed_all) <= FINAL_GIVE_UP_FAILURES
    assert result.elapsed_s < 0.5 * 3600.0 and not result.stopped_by_budget
    assert result.failures == {"RuntimeError: the compiler failed": len(failed_all)}
    assert result.runs == len(workload.measured)
    assert "workers=auto" in result.best  # the rest of the tune is unharmed


def test_a_preset_screened_out_in_the_final_side_by_side_is_not_topped_up_until_the_budget_is_gone():
    # +opt=all's compile=on runs at a fifth of the speed: every probe of it falls under the screening
    # floor, so it never gets the full runs the final side by side tops up to
    workload = Workload({"workers=auto": 1.5, "compile=on": 0.2})
    result = tune(workload, budget_s=3600.0)
    slow = [c for kind, c, _ in workload.measured if kind == "speed" and "compile=on" in c]
    assert 1 <= len(slow) <= FINAL_GIVE_UP_FAILURES + 2  # its preset rounds, then at most the give-up's
    assert result.elapsed_s < 0.5 * 3600.0 and not result.stopped_by_budget
    assert "workers=auto" in result.best


def test_the_result_counts_the_runs_other_processes_kept_busy():
    workload = Workload({"workers=auto": 1.5}, seed=1)
    measure = workload.measure

    def half_busy(configs, limit, floor=None):  # every other probe ran beside another's load
        probes = measure(configs, limit, floor)
        return [replace(p, busy=i % 2 == 0) for i, p in enumerate(probes)]

    workload.measure = half_busy
    result = tune(workload, presets={})
    assert 0 < result.busy_runs < result.runs
    assert result.to_dict()["busy_runs"] == result.busy_runs


def test_the_presets_stage_measures_the_start_only_until_it_has_min_runs_probes():
    # presets as fast as the start stay open for max_runs rounds; the start is not measured again
    # for the same decision once it has min_runs probes (it was, each round: 4 probes of the start)
    workload = Workload({})
    result = tune(workload, min_runs=2, max_runs=4)
    presets = [s for s in result.steps if s.stage == "presets"]
    assert all(len(s.candidate_probes) == 4 for s in presets)
    assert all(len(s.against_probes) == 2 for s in presets)
    first_axis = next(
        i for i, (kind, config, _) in enumerate(workload.measured) if config not in [(), *PRESETS.values()]
    )
    assert sum(1 for _, config, _ in workload.measured[:first_axis] if config == ()) == 2


def test_a_tune_past_its_budget_says_by_how_much_and_which_probes_crossed_it():
    from segperf.tune.report import render

    workload = Workload({"workers=auto": 1.5})
    learn = workload.quality

    def slow_learning(configs, limit):  # the tuned configuration's learning run takes 400 s more than priced
        probes = learn(configs, limit)
        slow = [replace(p, wall_s=p.wall_s + 400.0) if p.config != () else p for p in probes]
        workload.now += sum(p.wall_s for p in slow) - sum(p.wall_s for p in probes)
        return slow

    workload.quality = slow_learning
    result = tune(workload, presets={}, budget_s=600.0, quality=True)
    assert result.best == ("workers=auto",) and result.elapsed_s > result.budget_s
    crossed = result.over_budget
    assert crossed["where"] == "quality" and crossed["probes"] == ["workers=auto"]
    assert crossed["took_s"] > crossed["priced_s"] + 380
    text = render({"result": result.to_dict()})
    over = result.elapsed_s - result.budget_s
    assert f"Over the budget by {over:.0f} s: it was crossed in quality, by workers=auto" in text
    within = tune(Workload({"workers=auto": 1.5}), presets={}, budget_s=600.0, quality=True)
    assert within.over_budget is None and "Over the budget" not in render({"result": within.to_dict()})

"""A finished probe's job read back: its results.json as the Probe the search decides on.

What a job's record says of its rate: SteadyProbe's steady-state images/s (results.json
`tune_probe`, segperf.callbacks.steady_probe), else `train.images_per_s`; whether it stopped at
the time limit (`trainer.max_time`: its rate stands, less precise, after its fewest timed steps;
cut, with no images/s, before them), inside a step at the hard limit (cut), or below the screening
floor (screened); the settings the machine did not apply (`adjusted`), whether other processes
kept it busy, and the quality metric it is judged by (segperf.quality). segperf.tune.runner
launches the jobs; the calibration (segperf.tune.calibrate) reads its probes the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from segperf.quality import of_results
from segperf.report.flags import busy_during
from segperf.tune.probe import Config, Probe


def not_applied(adjusted: Mapping[str, Any]) -> tuple[str, ...]:
    """`key: reason` for each setting the run adjusted away (results.json `adjusted`)."""
    return tuple(
        f"{key}: {change.get('reason') or 'adjusted'}"
        for key, change in sorted(adjusted.items())
        if not isinstance(change, Mapping) or change.get("used") != change.get("requested")
    )


def first_line(text: Any) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else str(text)


def probe_from_results(config: Config, run_dir: Path, *, limited: bool = False) -> Probe:
    """What the search sees of one finished job: its results.json as a Probe."""
    path = Path(run_dir) / "results.json"
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        return Probe(config, None, run_dir=str(run_dir), failed=f"no results.json in {run_dir} (the job did not run)")
    except (OSError, ValueError) as error:
        return Probe(config, None, run_dir=str(run_dir), failed=f"{path}: unreadable ({first_line(error)})")
    train, progress = results.get("train") or {}, results.get("progress") or {}
    quality = results.get("quality") or {}
    # the metric the run is judged by (segperf.quality: the U-Net's val Dice, the CNN's val accuracy,
    # a user's declared one); the probe holds it higher-is-better (negated where its mode is min)
    judged = of_results(quality)
    wall = (results.get("accounted") or {}).get("run_wall_s") or train.get("wall_s") or 0.0
    probe = Probe(
        config,
        train.get("images_per_s"),
        not_applied=not_applied(results.get("adjusted") or {}),
        quality=judged.higher_is_better(quality.get(judged.key)) if judged else None,
        quality_metric=judged.key if judged else None,
        lower_is_better=bool(judged and judged.lower_is_better),
        busy=busy_during(results),
        wall_s=float(wall),
        run_dir=str(run_dir),
    )
    status = results.get("status")
    hard = results.get("time_limit") or {}
    if hard.get("reached"):  # stopped inside a step (segperf.callbacks.hard_time_limit): no rate at all
        done = hard.get("steps_done", 0)
        why = f"cut inside step {done + 1} at the hard time limit of {hard.get('hard_limit_s', 0):.0f} s"
        return replace(probe, images_per_s=None, cut=True, failed=why)
    if status != "completed":
        return replace(probe, images_per_s=None, failed=first_line(results.get("error") or status))
    screen = results.get("tune_screen") or {}
    if screen.get("screened_out"):  # stopped on purpose after its first timed steps: its rate is the verdict
        return replace(probe, screened=True, images_per_s=train.get("images_per_s") or screen.get("images_per_s"))
    done, planned = progress.get("steps_done"), progress.get("steps_total")
    stopped = limited and done is not None and planned is not None and done < planned
    if steady := results.get("tune_probe"):
        return _steady_probe(probe, steady, stopped, done)
    if stopped:
        probe = replace(probe, cut=True)
        if not train.get("warmup_excluded"):  # stopped before warm-up ended: no steady-state rate
            return replace(
                probe, images_per_s=None, failed=f"cut at the time limit after {done} of {planned} steps, in warm-up"
            )
    if probe.images_per_s is None:
        return replace(probe, failed="no images/s recorded (too few steps)")
    return probe


def _steady_probe(probe: Probe, steady: Mapping[str, Any], stopped: bool, done: Any) -> Probe:
    """A probe whose SteadyProbe timed its steady state (results.json `tune_probe`): its images/s
    are those of the steps after the warm-up the times ended and the loader's queue. Stopped by the
    time limit (`stopped`) after its fewest timed steps, its rate stands, less precise; before them,
    it is cut, as a probe stopped in warm-up is."""
    timed, rate, width = steady.get("timed_steps") or 0, steady.get("images_per_s"), steady.get("half_width")
    probe = replace(probe, images_per_s=rate if timed >= 2 else None, timed_steps=timed, half_width=width)
    said = f", ±{width:.0%}" if width is not None else ""
    if steady.get("settled") is False:  # its times still fell through the first half: a warm-up never ended
        said += ", its step times still falling"
    if steady.get("stopped_by") == "precision":
        return probe
    if steady.get("stopped_by") == "cap":
        return replace(probe, imprecise=f"stopped at its cap of {steady.get('max_steps')} timed steps{said}")
    if stopped and timed < (steady.get("min_steps") or 2):
        where = "in warm-up" if timed == 0 else f"after {timed} timed steps"
        return replace(probe, cut=True, images_per_s=None, failed=f"cut at the time limit after {done} steps, {where}")
    if stopped:
        return replace(probe, imprecise=f"stopped at the time limit after {timed} timed steps{said}")
    if probe.images_per_s is None:
        return replace(probe, failed=f"no steady-state steps: its {done} steps were warm-up or the loader's queue")
    return replace(probe, imprecise=f"ran its size, {timed} timed steps{said}")

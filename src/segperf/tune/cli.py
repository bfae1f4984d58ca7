"""`python -m segperf.tune [overrides]`: the command line, and the tune the sweeper runs.

The command line is a Hydra multirun of conf/tune.yaml whose sweeper is the tuner
(hydra_plugins/segperf_tuner): Hydra composes the start (the training config with the same
overrides `python -m segperf.train` takes), the sweeper calls `tune()`, which checks the settings
(segperf.tune.settings_check), chooses the presets (segperf.tune.preset_choice) and the quality
guard's learning runs (segperf.tune.quality_runs), refuses a rerun of other settings into the
same folder (segperf.tune.journal.check_same_tune) and runs the search (segperf.tune.search);
every probe the search asks for is an ordinary training job (segperf.tune.probe_job).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from segperf.command_line import options_first, output_folder_problem, quote_path_values, workload_choice_problem
from segperf.config import CONFIG_DIR
from segperf.errors import SegperfError
from segperf.tune.probe_job import CONFIG_NAME, probe_job

PROG = "python -m segperf.tune"
# Hydra's flags that show something and stop (no multirun with them: Hydra allows one mode)
SHOW_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")


def main(argv: list[str] | None = None) -> int:
    """Tune with `argv` (training overrides, tune.* settings, Hydra's flags); the exit status."""
    args = [a for a in options_first(sys.argv[1:] if argv is None else argv) if a not in ("-m", "--multirun")]
    args = quote_path_values(["-m", *args])[1:]  # paths as segperf prints them (`=` and `,` too)
    if problem := output_folder_problem(["-m", *args], CONFIG_DIR / f"{CONFIG_NAME}.yaml"):
        return fail([problem])
    if problem := workload_choice_problem(args, CONFIG_DIR):  # as segperf.train: whose model and data
        return fail([problem])
    # what Hydra parses: a multirun (the sweeper is the tuner), unless a flag only shows something
    shows = any(a in SHOW_FLAGS or a.split("=", 1)[0] in SHOW_FLAGS for a in args)
    saved, sys.argv = sys.argv, [PROG, *([] if shows else ["--multirun"]), *args]
    try:
        probe_job()
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()  # so that main can run again in this process
    return 0


def fail(problems: list[str]) -> int:
    for problem in problems:
        print(f"segperf.tune: error: {problem}", file=sys.stderr)
    return 2


def say(line: str) -> None:
    print(f"segperf.tune: {line}", flush=True)


def tune(config: DictConfig, loader: Any, launcher: Any, arguments: list[str]) -> Any:
    """The tune (docs/tuning.md), from the sweeper: one error line per problem, exit 2."""
    try:
        return _tune(config, loader, launcher, list(arguments))
    except SegperfError as error:
        raise SystemExit(fail(str(error).splitlines())) from None


def _tune(config: DictConfig, loader: Any, launcher: Any, arguments: list[str]) -> Any:
    from segperf.config import cores_per_rank
    from segperf.schema import SettingsError
    from segperf.tune import later_noise, space
    from segperf.tune.journal import Journal, check_same_tune
    from segperf.tune.native import computes_on_cpu, emulated_precisions, native_presets
    from segperf.tune.preset_choice import composable_presets
    from segperf.tune.probe import config_of
    from segperf.tune.quality_runs import quality_measure
    from segperf.tune.runner import LaunchMeasure
    from segperf.tune.search import Tuner
    from segperf.tune.settings_check import settings_problems, sweep_problems
    from segperf.tune.space import override_key

    settings = config.get("tune")
    if settings is None:
        raise SegperfError(f"hydra/sweeper=segperf_tuner needs the tune settings of conf/tune.yaml: run {PROG}")
    if problems := settings_problems(settings) + sweep_problems(arguments):
        raise SettingsError(problems)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    choices = {str(k): v for k, v in config.hydra.runtime.choices.items()}
    plain = {k: v for k, v in OmegaConf.to_container(config, resolve=False).items() if k != "hydra"}
    # the start: the training overrides (the tune.* settings are the tuner's, not the probes')
    start = config_of(a for a in arguments if not override_key(a).split(".")[0] == "tune")
    cores = cores_per_rank(config.trainer.devices)
    on_cpu = computes_on_cpu(str(config.trainer.accelerator))
    axes = space.axes(plain, choices, cores, batch_size=settings.batch_size, compute_on_cpu=on_cpu)
    presets, notes = composable_presets(config, loader, settings, choices, start)
    emulated = emulated_precisions(str(config.trainer.accelerator)) if "precision" in choices else {}
    presets, preset_notes = native_presets(presets, emulated)
    notes += preset_notes
    probe = OmegaConf.to_container(settings.probe, resolve=True)
    speed = LaunchMeasure(config, loader, launcher, kind="speed", probe=probe)
    quality = quality_measure(config, loader, launcher, settings, choices, notes)
    check_same_tune(sweep_dir, {"probe": probe, "quality": OmegaConf.to_container(settings.quality)})
    journal = Journal(sweep_dir / "journal.jsonl")
    # the seed the start's learning run trains with: the guard confirms a failing run on the next one
    seed = quality.seed(start) if quality is not None else None
    seed = int(config.get("seed") or 0) if seed is None else seed
    tuner = Tuner(
        start,
        axes,
        speed,
        budget_s=settings.budget_minutes * 60,
        presets=presets,
        journal=journal,
        quality=quality,
        level=settings.level,
        min_runs=settings.min_runs,
        max_runs=settings.max_runs,
        progress=say,
        quality_tolerance=settings.quality.tolerance,
        limit_factor=settings.probe.time_limit_factor,
        limit_floor_s=settings.probe.min_time_limit_s,
        screen_factor=settings.probe.screen_factor or None,
        emulated=emulated,
        identity=speed.identity,
        seed=seed,
        later=later_noise.for_this_machine(settings.get("later_noise")),
    )
    for note in notes:
        say(f"note: {note}")
    say(
        f"from {' '.join(start) or 'the defaults'}: {len(axes)} axes ({', '.join(a.name for a in axes)}), "
        f"presets {', '.join(presets) or 'none'}, budget {settings.budget_minutes:g} min; probes in {sweep_dir}"
    )
    try:
        result = tuner.run()
    except (KeyboardInterrupt, SystemExit) as stop:
        code = 130 if isinstance(stop, KeyboardInterrupt) else stop.code
        if code not in (130, 143):
            raise
        again = f"{command(config, arguments)} {shlex.quote(f'hydra.sweep.dir={sweep_dir}')}"
        print(f"segperf.tune: interrupted; {len(journal)} probes kept in {journal.path}", file=sys.stderr)
        print(f"segperf.tune: continue with: {again}", file=sys.stderr)
        raise SystemExit(code) from None
    from segperf.tune.output import finish

    return finish(result, config, loader, settings, command(config, arguments), notes)


def command(config: DictConfig, arguments: list[str]) -> str:
    """The command line of this tune as a user types it (its Hydra overrides too, such as
    hydra/launcher=slurm; not the sweep folder's, which the caller adds where it is wanted)."""
    hydra_args = [o for o in config.hydra.overrides.hydra if not o.startswith(("hydra.sweep.dir=", "hydra.mode="))]
    # `--config-dir DIR` (a user's own model and data configs): Hydra keeps it as a config source
    config_dirs = [
        ["--config-dir", str(source.path)]
        for source in OmegaConf.select(config, "hydra.runtime.config_sources", default=None) or []
        if source.provider == "command-line" and source.schema == "file"
    ]
    return shlex.join([*PROG.split(), *(a for pair in config_dirs for a in pair), *arguments, *hydra_args])

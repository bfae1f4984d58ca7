"""`python -m segperf.tune [overrides]`: the command line, and the tune the sweeper runs.

The command line is a Hydra multirun of conf/tune.yaml whose sweeper is the tuner
(hydra_plugins/segperf_tuner): Hydra composes the start (the training config with the same
overrides `python -m segperf.train` takes) and the sweeper calls `tune()`. `run()` is the tune on
one screen, each step a call into the module that owns it: the settings, the tune's folder and its
journal, what this machine runs natively and the space, the runs (every probe an ordinary training
job, segperf.tune.probe_job), the search, what it leaves behind. `python -m segperf.tune calibrate
TUNE_DIR` studies a finished tune's probes against long runs (segperf.tune.calibrate).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from segperf.command_line import SHOW_FLAGS, override_key, prepared, problems
from segperf.config import CONFIG_DIR, cores_per_rank
from segperf.errors import SegperfError
from segperf.tune import later_noise, space
from segperf.tune.journal import Journal, open_tune_folder
from segperf.tune.native import what_runs_here
from segperf.tune.output import finish
from segperf.tune.preset_choice import presets_here
from segperf.tune.probe import Config, config_of
from segperf.tune.probe_job import CONFIG_NAME, probe_job
from segperf.tune.quality_runs import quality_measure, start_seed
from segperf.tune.runner import speed_measure
from segperf.tune.search import Tuner, TuneResult, search_arguments
from segperf.tune.settings_check import checked_settings

PROG = "python -m segperf.tune"
NAME = "segperf.tune"  # how its lines start


def main(argv: list[str] | None = None) -> int:
    """Tune with `argv` (training overrides, tune.* settings, Hydra's flags); the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate"]:
        from segperf.tune.calibrate.cli import main as calibrate  # its own arguments, no Hydra

        return calibrate(argv[1:])
    multirun = ("-m", "--multirun")
    try:  # as segperf.train's: paths quoted as a sweep's, the sweep folder tried, whose model and data
        args = prepared(["-m", *(a for a in argv if a not in multirun)], NAME, CONFIG_DIR / f"{CONFIG_NAME}.yaml")
    except SystemExit as stopped:
        return stopped.code
    args = [a for a in args if a not in multirun]
    # what Hydra parses: a multirun (the sweeper is the tuner), unless a flag only shows something
    shows = any(a in SHOW_FLAGS or override_key(a) in SHOW_FLAGS for a in args)
    saved, sys.argv = sys.argv, [PROG, *([] if shows else ["--multirun"]), *args]
    try:
        probe_job()
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()  # so that main can run again in this process
    return 0


def say(line: str) -> None:
    print(f"{NAME}: {line}", flush=True)


def tune(config: DictConfig, loader: Any, launcher: Any, arguments: list[str]) -> Any:
    """The tune (docs/tuning.md), from the sweeper: one error line per problem, exit 2."""
    try:
        return run(config, loader, launcher, list(arguments))
    except SegperfError as error:
        raise SystemExit(problems(NAME, str(error).splitlines())) from None


def run(config: DictConfig, loader: Any, launcher: Any, arguments: list[str]) -> TuneResult:
    """The tune, top to bottom: `config` is the start as Hydra composed it, `loader` Hydra's config
    loader (each job composed as the launcher will), `launcher` Hydra's, `arguments` the overrides."""
    settings = checked_settings(config, arguments)
    journal = open_tune_folder(config, settings)  # a rerun into it continues from its journal
    sweep_dir = journal.path.parent
    choices = {str(k): v for k, v in config.hydra.runtime.choices.items()}
    start = start_of(arguments)
    # the space: what this machine runs natively, the axes of this workload, the presets as run here
    native = what_runs_here(str(config.trainer.accelerator), choices)
    cores = cores_per_rank(config.trainer.devices)
    axes = space.axes(config, choices, cores, batch_size=settings.batch_size, compute_on_cpu=native.on_cpu)
    presets, notes = presets_here(config, loader, settings, choices, start, native.emulated)
    # the runs: probes for speed, learning runs for the quality guard, each a job of the launcher
    speed = speed_measure(config, loader, launcher, settings)
    quality = quality_measure(config, loader, launcher, settings, choices, notes)
    tuner = Tuner(
        start,
        axes,
        speed,
        presets=presets,
        journal=journal,
        quality=quality,
        progress=say,
        emulated=native.emulated,
        identity=speed.identity,
        seed=start_seed(config, quality, start),
        later=later_noise.for_this_machine(settings.get("later_noise")),
        **search_arguments(settings),
    )
    for note in notes:
        say(f"note: {note}")
    say(
        f"from {' '.join(start) or 'the defaults'}: {len(axes)} axes ({', '.join(a.name for a in axes)}), "
        f"presets {', '.join(presets) or 'none'}, budget {settings.budget_minutes:g} min; probes in {sweep_dir}"
    )
    again = f"{command(config, arguments)} {shlex.quote(f'hydra.sweep.dir={sweep_dir}')}"
    result = searched(tuner, journal, again)
    return finish(result, config, loader, settings, command(config, arguments), notes)


def start_of(arguments: list[str]) -> Config:
    """The tune's start: its training overrides (the tune.* settings are the tuner's, not the probes')."""
    return config_of(a for a in arguments if override_key(a).split(".")[0] != "tune")


def searched(tuner: Tuner, journal: Journal, again: str) -> TuneResult:
    """The search's result; stopped by Ctrl-C or SIGTERM, the probes kept and how to continue."""
    try:
        return tuner.run()
    except (KeyboardInterrupt, SystemExit) as stop:
        code = 130 if isinstance(stop, KeyboardInterrupt) else stop.code
        if code not in (130, 143):
            raise
        print(f"{NAME}: interrupted; {len(journal)} probes kept in {journal.path}", file=sys.stderr)
        print(f"{NAME}: continue with: {again}", file=sys.stderr)
        raise SystemExit(code) from None


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

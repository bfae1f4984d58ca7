"""`python -m segperf.tune [overrides]`: the command line, each probe's job, and the tune itself.

The command line is a Hydra multirun of conf/tune.yaml whose sweeper is the tuner
(hydra_plugins/segperf_tuner): Hydra composes the start (the training config with the same
overrides `python -m segperf.train` takes), the sweeper calls `tune()`, and every probe the
search asks for is an ordinary training job (`probe_job`: segperf.train's job, its console output
kept in its run folder's output.txt, so the console shows one progress line per probe).

The quality guard is a short learning run of the start and of the tuned configuration at the
run size `tune.quality.runs` sets for the model (the U-Net: size=demo at 64x96, which reaches val
Dice ~0.97 in about a minute on 2 cores; the CNN: size=mnist_demo, accuracy in seconds; a model
not listed, such as a user's own: the start's own run size, `tune.quality.runs.default` on top),
compared on validation quality (each run's `quality.metric`, negated where `quality.mode` is min);
a configuration that falls short is learned again, with the start, on the start's seed + 1
(segperf.tune.search, Tuner._guard), so the seed the start's learning job composes is handed on.
Not loss-curve parity over the same batches: upsample=deconv is another
net and bf16 other numerics, so their loss curves differ from the start's by design even when
they learn as well; the question the guard answers is whether they do.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, TextIO

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from segperf.command_line import options_first, output_folder_problem, quote_path_values, workload_choice_problem
from segperf.config import CONFIG_DIR
from segperf.errors import SegperfError

PROG = "python -m segperf.tune"
CONFIG_NAME = "tune"
# Hydra's flags that show something and stop (no multirun with them: Hydra allows one mode)
SHOW_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")


@contextmanager
def console_handlers_to(log: TextIO) -> Iterator[None]:
    """Point the logging handlers that write to the console at `log` for a while.

    Why: Lightning adds a console handler of its own to its loggers when it is imported before
    logging is configured (lightning/pytorch/__init__.py: a StreamHandler, propagate=False), bound
    to the stderr of that moment, so redirect_stderr does not reach it: each probe printed its
    seed, accelerator and stopping lines among the tune's progress lines."""
    consoles = {sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__}
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    moved = [
        (handler, handler.setStream(log))
        for logger in loggers
        for handler in logger.handlers
        if type(handler) is logging.StreamHandler and handler.stream in consoles
    ]
    try:
        yield
    finally:
        for handler, stream in moved:
            handler.setStream(stream)


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def probe_job(cfg: DictConfig) -> None:
    """One probe: segperf.train's job, with its console output in the run folder's output.txt.
    A problem that stops the whole tune (a full disk: exit 2) is repeated on the console."""
    from segperf.train import main as train_main

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stopped: SystemExit | None = None
    with (
        (run_dir / "output.txt").open("w") as log,
        console_handlers_to(log),
        redirect_stdout(log),
        redirect_stderr(log),
    ):
        try:
            train_main.__wrapped__(cfg)  # the undecorated job function (hydra.main wraps it with functools.wraps)
        except SystemExit as stop:
            stopped = stop
    if stopped is not None:
        if stopped.code not in (None, 0, 130, 143):
            for line in (run_dir / "output.txt").read_text().splitlines():
                if line.startswith("segperf: error:"):
                    print(line, file=sys.stderr)
        raise stopped


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


def settings_problems(settings: Any) -> list[str]:
    """Every out-of-range tune setting, one line each."""
    problems = []
    checks = [
        ("budget_minutes", settings.budget_minutes > 0, "must be > 0 minutes, e.g. 10"),
        ("level", 0 < settings.level < 1, "must be between 0 and 1, e.g. 0.95"),
        ("min_runs", settings.min_runs >= 2, "must be >= 2 (one run has no spread to judge noise by)"),
        ("max_runs", settings.max_runs >= settings.min_runs, f"must be >= tune.min_runs ({settings.min_runs})"),
        ("probe.steps", settings.probe.steps >= 2, "must be >= 2 timed steps (one has no spread), e.g. 8"),
        ("probe.max_steps", settings.probe.max_steps >= settings.probe.steps, "must be >= tune.probe.steps, e.g. 32"),
        (
            "probe.precision",
            0 < settings.probe.precision < 1,
            "must be between 0 and 1 (a relative half-width), e.g. 0.05",
        ),
        ("probe.val_images", settings.probe.val_images >= 1, "must be >= 1"),
        ("probe.time_limit_factor", settings.probe.time_limit_factor >= 1, "must be >= 1, e.g. 3"),
        ("probe.min_time_limit_s", settings.probe.min_time_limit_s > 0, "must be > 0 seconds, e.g. 60"),
        (
            "probe.screen_factor",
            settings.probe.screen_factor == 0 or settings.probe.screen_factor > 1,
            "must be > 1 (a probe below 1/factor of the best's images/s is stopped), or 0 for no screening",
        ),
        ("probe.screen_steps", settings.probe.screen_steps >= 1, "must be >= 1 timed steps, e.g. 2"),
        ("quality.tolerance", settings.quality.tolerance >= 0, "must be >= 0, e.g. 0.02"),
    ]
    for name, ok, what in checks:
        if not ok:
            problems.append(f"tune.{name}={OmegaConf.select(settings, name)}: {what}")
    problems += [
        f"tune.presets: entry {i} is empty; give its overrides" for i, p in enumerate(settings.presets) if not p
    ]
    return problems


def sweep_problems(arguments: list[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(arguments)
    return [
        f"{o.input_line}: a tune starts from one configuration; give one value "
        f"(to compare several: python -m segperf.train -m {o.input_line})"
        for o in parsed
        if o.is_sweep_override()
    ]


def tune(config: DictConfig, loader: Any, launcher: Any, arguments: list[str]) -> Any:
    """The tune (docs/tuning.md), from the sweeper: one error line per problem, exit 2."""
    try:
        return _tune(config, loader, launcher, list(arguments))
    except SegperfError as error:
        raise SystemExit(fail(str(error).splitlines())) from None


def _tune(config: DictConfig, loader: Any, launcher: Any, arguments: list[str]) -> Any:
    from segperf.config import cores_per_rank
    from segperf.schema import SettingsError
    from segperf.tune import space
    from segperf.tune.journal import Journal
    from segperf.tune.native import computes_on_cpu, emulated_precisions, native_presets
    from segperf.tune.probe import config_of
    from segperf.tune.runner import LaunchMeasure
    from segperf.tune.search import Tuner
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


def composable_presets(
    config: DictConfig, loader: Any, settings: Any, choices: dict, start: tuple
) -> tuple[dict, list]:
    """The presets spelt out as this workload's groups (segperf.tune.space.presets), without
    those Hydra cannot compose here: each left out, or cut down, with a note saying so."""
    from segperf.tune import space
    from segperf.tune.runner import first_line
    from segperf.tune.search import merge

    notes, kept = [], {}
    names = [" ".join(preset) for preset in settings.presets]
    try:
        expanded = space.presets(choices, names)
    except ValueError as error:
        raise SegperfError(f"tune.presets: {error}") from None
    for name, preset in expanded.items():
        try:
            loader.load_sweep_config(config, list(merge(start, preset)))
        except Exception as error:  # Hydra's and OmegaConf's composition errors
            notes.append(f"preset {name}: skipped, it does not compose here ({first_line(error)})")
            continue
        missing = sorted(
            {
                g
                for o in name.split()
                if o.lstrip("+").startswith("opt=")
                for g in space.preset_overrides(o.split("=")[1])
            }
            - set(choices)
        )
        if missing:
            notes.append(f"preset {name}: without {', '.join(missing)} (this workload has no such groups)")
        kept[name] = preset
    return kept, notes


def _coarse(config: DictConfig, runs: Any, settings: Any) -> str:
    """A warning where one validation image moves an accuracy by more than the guard's tolerance: an
    outside 6-class CNN's guard compared 0.188 with 0.188 (3 of 16 images, chance) and passed."""
    given = [o.split("=", 1)[1] for o in runs or [] if o.startswith("val_images=")]
    val = int(given[-1]) if given and given[-1].isdigit() else config.get("val_images")
    tolerance = settings.quality.tolerance
    if not isinstance(val, int) or val <= 0 or 1 / val <= tolerance:
        return ""
    return (
        f"; one of its {val} validation images moves an accuracy by {1 / val:.3f}, more than the guard's tolerance "
        f"({tolerance}): give the tune a run size at which the model learns (train_images=... val_images=...)"
    )


def quality_measure(config: DictConfig, loader: Any, launcher: Any, settings: Any, choices: dict, notes: list) -> Any:
    """The quality guard's learning runs: the model's own run size (tune.quality.runs.<model>), else
    tune.quality.runs.default on top of the start's own run size (a user's model: the size the
    tune was given), else none."""
    from segperf.tune.runner import LaunchMeasure

    if not settings.quality.enabled:
        notes.append("quality guard off (tune.quality.enabled=false): the tuned configuration's quality is not checked")
        return None
    model = str(choices.get("model"))
    runs = settings.quality.runs.get(model)
    own_size = runs is None
    if own_size:
        runs = settings.quality.runs.get("default")
    if runs is None:
        notes.append(f"no learning run for model={model} (tune.quality.runs.{model} or .default): quality not checked")
        return None
    if own_size:
        size = ", ".join(f"{k}={config.get(k)}" for k in ("train_images", "val_images", "batch_size"))
        extra = f" with {' '.join(runs)}" if runs else ""
        notes.append(
            f"quality guard: model={model} has no tune.quality.runs.{model}; its learning runs are the start's run "
            f"size ({size}){extra}, judged by the quality.metric each run records" + _coarse(config, runs, settings)
        )
    probe = OmegaConf.to_container(settings.probe, resolve=True)
    return LaunchMeasure(
        config,
        loader,
        launcher,
        kind="quality",
        probe=probe,
        quality_runs=list(runs),
        keep_batch_size=settings.batch_size,
        keep_run_size=own_size,
    )


def check_same_tune(sweep_dir: Path, identity: dict) -> None:
    """A rerun into a tune folder replays its journal: refuse one whose probes were of another
    size (tune.probe.*, tune.quality.*), which the journal's own check (the start) cannot see."""
    from segperf.perf.results import write_json_atomic

    path = sweep_dir / "tune_probe.json"
    if path.exists():
        recorded = json.loads(path.read_text())
        if recorded != json.loads(json.dumps(identity)):
            raise SegperfError(
                f"{path}: this tune folder holds probes of other tune.probe / tune.quality settings "
                f"({recorded}); give the same settings, or another folder (hydra.sweep.dir=...)"
            )
    else:
        write_json_atomic(path, identity)

"""What every entry point does to its command line before Hydra sees it.

Paths as values. Hydra's override grammar splits a value on `=` and `,` (a sweep) and refuses a
few other characters, but segperf's own folders have them: a sweep job's folder is named after
its overrides, `multirun/<date>/<time>/0_pin=on,workers=2`, and users paste it back as
`run_dir=...`, `ckpt=...` or `resume=...`. So the value of a path key is quoted for Hydra
(`run_dir='multirun/.../0_pin=on,workers=2'`) when the grammar would not read it as the one
string it is. A value the user quoted is left alone, and so is a value Hydra reads as a sweep of
paths in `-m` (`ckpt=a.ckpt,b.ckpt`) unless the whole value is itself an existing path; a sweep
of existing folders that have commas of their own becomes a sweep of quoted paths.

The output folder. Hydra creates the run's folder and writes its `.hydra/` files before segperf
runs, and reports a failure there with a traceback; `output_folder_problem` tries the folder
first, so that a read-only or full disk is one line naming the folder.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

# keys whose value is a path, in any entry point (train, infer, bench); `+key=` and `++key=` too
PATH_KEYS = (
    "run_dir",
    "ckpt",
    "resume",
    "out",
    "data.root",
    "data.cache_dir",
    "data.synthetic.cache_dir",
    "data.builtin.cache_dir",
    "hydra.run.dir",
    "hydra.sweep.dir",
)
_ARG = re.compile(r"^(?P<prefix>\+{0,2})(?P<key>[\w.]+)=(?P<value>.*)$", re.DOTALL)
# Hydra's flags after which no run folder is written (they show something and stop)
SHOW_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")
# Every command's exit status (docs/troubleshooting.md, "Exit statuses"): 0 done; 2 a problem the
# user can fix (a bad setting, path or input: one line each, no traceback); 1 a result that says
# no (segperf.compare's slower candidate) or an error of segperf's own (with its traceback); 130
# and 143 interrupted by Ctrl-C and SIGTERM.
USAGE_ERROR = 2
PROBE_BYTES = 64 * 1024  # more than Hydra's .hydra/ files take


def override_key(override: str) -> str:
    """The config key an override sets: `+opt=all` -> `opt`, `~data.cache_dir` -> `data.cache_dir`,
    `data.num_workers=2` -> `data.num_workers` (Hydra's `+`, `++` and `~` are how, not what)."""
    return override.split("=", 1)[0].lstrip("+~")


def problems(prog: str, message: str | list[str]) -> int:
    """Each problem on its own line of stderr, `<prog>: error: <line>`; returns USAGE_ERROR."""
    for line in message.splitlines() if isinstance(message, str) else message:
        print(f"{prog}: error: {line}", file=sys.stderr)
    return USAGE_ERROR


def fail(prog: str, message: str | list[str]) -> NoReturn:
    """A problem the user can fix: its lines, no traceback, exit status USAGE_ERROR."""
    raise SystemExit(problems(prog, message))


def prepared(
    argv: list[str],
    prog: str,
    config: Path,
    *,
    expand: Callable[[list[str]], list[str]] | None = None,
    workload: bool = True,
) -> list[str]:
    """Every command's command line before Hydra sees it, or `fail` with the one line that says what
    to fix: Hydra's flags first (options_first), `expand` (segperf.train's `resume=`), path values
    quoted for Hydra, the output folder tried, and, for a command that trains a workload, whose
    model and data it means and whether the axes given are that workload's. `config` is the
    command's primary config file (conf/<name>.yaml)."""
    from segperf.errors import SegperfError

    try:
        argv = quote_path_values(expand(options_first(argv)) if expand else options_first(argv))
    except SegperfError as error:
        fail(prog, str(error))
    checks = [output_folder_problem(argv, config)]
    if workload:
        checks += [workload_choice_problem(argv, config.parent)]
        checks += [workload_axis_problem(argv, config.parent, config.stem) if not any(checks) else None]
    if problem := next((p for p in checks if p), None):
        fail(prog, problem)
    plain_segperf_warnings()
    return argv


def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def options_first(argv: list[str]) -> list[str]:
    """Hydra's flags ahead of the overrides, each with its value, in their order.

    Hydra reads its command line with argparse, where the overrides are one positional of
    nargs="*": they must come as one run of words, so `a=1 -m b=2` or `a=1 --config-dir conf b=2`
    stop with "unrecognized arguments". Which words are flags, and how many values each takes, is
    read from Hydra's own parser (hydra.main builds its command line with the same function)."""
    from hydra._internal.utils import get_args_parser

    actions = get_args_parser()._option_string_actions
    flags: list[str] = []
    overrides: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        action = actions.get(arg.split("=", 1)[0]) if arg.startswith("-") else None
        if action is None:
            overrides.append(arg)
            i += 1
            continue
        takes = 0 if "=" in arg or action.nargs == 0 else 1
        if action.nargs == "?" and not (i + 1 < len(argv) and argv[i + 1] in (action.choices or ())):
            takes = 0  # --info alone: its default
        flags += argv[i : i + 1 + takes]
        i += 1 + takes
    return [*flags, *overrides]


def hydra_quote(text: str) -> str:
    """`text` as one single-quoted string of Hydra's grammar (its quote and the backslashes
    before it, or at the end, escaped)."""
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"'{body}'"


def _parsed(arg: str):
    """Hydra's reading of an override, or None where its grammar refuses it."""
    from hydra.errors import HydraException

    try:
        return _parser().parse_override(arg)
    except HydraException:
        return None


def _is_quoted(value: str) -> bool:
    return len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""


def path_value(arg: str) -> str:
    """The path an override `key=<value>` gives, unquoted and unescaped as Hydra will read it."""
    value = arg.split("=", 1)[1]
    if _is_quoted(value) or "\\" in value:
        parsed = _parsed(arg)
        if parsed is not None and isinstance(parsed.value(), str):
            return parsed.value()
    return value


def _existing(text: str) -> bool:
    return bool(text) and Path(text).expanduser().exists()


def _as_existing_paths(value: str) -> list[str] | None:
    """`value` cut at commas into two or more existing paths (each may have commas of its own),
    or None where it is not such a list."""
    parts, current = [], ""
    for piece in value.split(","):
        current = f"{current},{piece}" if current else piece
        if _existing(current):
            parts.append(current)
            current = ""
    return parts if len(parts) > 1 and not current else None


def quote_path_values(argv: list[str], keys: tuple[str, ...] = PATH_KEYS) -> list[str]:
    """`argv` with the value of every path key quoted where Hydra's grammar would not read it as
    the path it is (see the module doc); everything else unchanged."""
    multirun = any(a in ("-m", "--multirun") for a in argv)
    return [_quoted_arg(arg, keys, multirun) for arg in argv]


def _quoted_arg(arg: str, keys: tuple[str, ...], multirun: bool) -> str:
    match = _ARG.match(arg)
    if match is None or match["key"] not in keys:
        return arg
    value = match["value"]
    if not value or _is_quoted(value) or "${" in value:  # nothing, the user's quoting, an interpolation
        return arg
    parsed = _parsed(arg)
    if parsed is not None and not parsed.is_sweep_override() and parsed.value() == value:
        return arg  # Hydra reads it as this very string
    head = f"{match['prefix']}{match['key']}="
    if _existing(value):
        return head + hydra_quote(value)
    if multirun:
        listed = _as_existing_paths(value)
        if listed is not None:  # a sweep over existing folders whose names have commas
            return head + ",".join(hydra_quote(p) for p in listed)
        if parsed is not None and parsed.is_sweep_override():
            return arg  # a sweep of paths (each job says if its path is missing)
    if parsed is not None and not isinstance(parsed.value(), str) and not parsed.is_sweep_override():
        return arg  # null, a number: Hydra's value, not a path with odd characters
    return head + hydra_quote(value)


def _write_probe(folder: Path) -> None:
    fd, name = tempfile.mkstemp(prefix=".segperf-write-test-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    finally:
        Path(name).unlink(missing_ok=True)


def output_folder_problem(argv: list[str], config_file: Path) -> str | None:
    """One line when the run (or sweep) folder Hydra is about to create cannot be written — a
    read-only file system, no permission, a full disk — else None. Tried in the nearest folder
    that exists, with a temp file that is removed again; nothing is created."""
    if any(a in SHOW_FLAGS or a.startswith(("--cfg=", "--info=")) for a in argv):
        return None
    key = "hydra.sweep.dir" if any(a in ("-m", "--multirun") for a in argv) else "hydra.run.dir"
    given = [path_value(a) for a in argv if override_key(a) == key and "=" in a]
    if given:
        pattern = given[-1]
    else:
        from omegaconf import OmegaConf

        try:
            pattern = str(OmegaConf.select(OmegaConf.load(config_file), key, default=None) or "")
        except Exception:  # not ours to report: Hydra will
            return None
    static = pattern.split("${", 1)[0]
    folder = Path(static) if "${" not in pattern or static.endswith("/") else Path(static).parent
    folder = folder.expanduser().absolute()
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        where = existing or folder
        return f"{key}={pattern}: {where} is not a folder; choose another {key}=<folder>"
    from segperf.errors import WriteError, write_problem

    try:
        _write_probe(existing)
    except OSError as error:
        noun = "sweep" if key == "hydra.sweep.dir" else "run"
        problem = WriteError(existing / "probe", error, f"where the {noun} folder {pattern} goes")
        return write_problem(problem, setting=key, kept=False)
    return None


# Axes only some workloads have: each is a config group in the defaults list of the model or data
# option that has it (the U-Net's upsample, Carvana's data pipeline); the rest apply to any workload
WORKLOAD_ONLY_AXES = ("upsample", "decode", "cache", "augment")
GENERIC_AXES = ("workers", "prefetch", "pin", "memory_format", "compile", "precision", "threads", "batch_size")


def _config_dir(argv: list[str]) -> str | None:
    """The folder of `--config-dir DIR` / `-cd DIR` / `--config-dir=DIR`, where given."""
    for i, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config-dir="):
            return arg.split("=", 1)[1]
    return None


def workload_axis_problem(argv: list[str], config_dir: Path, config_name: str) -> str | None:
    """One line when the command line sets an axis the chosen workload does not have
    (`upsample=deconv` with a user's model, `cache=memory` with data=mnist), listing the axes it
    has; else None. Hydra would refuse it too, but only with "Could not override 'upsample'". The
    workload's groups are read by composing its model and data options (only when such an axis
    is on the command line)."""
    asked = [
        a
        for a in argv
        if _ARG.match(a) and _ARG.match(a)["prefix"] == "" and _ARG.match(a)["key"] in WORKLOAD_ONLY_AXES
    ]
    if not asked or any(a in SHOW_FLAGS for a in argv):
        return None
    choosing = [a for a in argv if _ARG.match(a) and _ARG.match(a)["key"] in ("model", "data") and "," not in a]
    user_dir = _config_dir(argv)
    if user_dir:
        choosing.append(f"hydra.searchpath=[file://{Path(user_dir).expanduser().absolute()}]")
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(str(config_dir), version_base="1.3"):
            choices = compose(config_name, overrides=choosing, return_hydra_config=True).hydra.runtime.choices
    except Exception:  # not ours to report: Hydra will, when it composes the run
        return None
    missing = [a for a in asked if _ARG.match(a)["key"] not in choices]
    if not missing:
        return None
    workload = f"model={choices.get('model')}, data={choices.get('data')}"
    has = [*GENERIC_AXES, *(axis for axis in WORKLOAD_ONLY_AXES if axis in choices)]
    return (
        f"{', '.join(missing)}: not an axis of this workload ({workload}); its axes are {', '.join(has)} "
        f"({', '.join(WORKLOAD_ONLY_AXES)} belong to the workloads that have them: the U-Net, Carvana)"
    )


def _chosen(argv: list[str], group: str) -> list[str] | None:
    """The options `group=a` (or a sweep `group=a,b`) on the command line names, None where it names none."""
    values = [_ARG.match(a)["value"] for a in argv if _ARG.match(a) and _ARG.match(a)["key"] == group]
    return [v.strip() for v in values[-1].split(",")] if values else None


def workload_choice_problem(argv: list[str], config_dir: Path) -> str | None:
    """One line when the command line's model= or data= cannot say whose workload it means, else None:

    - an option both the user's `--config-dir` and segperf's own conf/ have (`data=mnist` beside a
      lightning-hydra-template's configs/data/mnist.yaml): Hydra reads segperf's, which comes first
      on its search path, and would train segperf's MNIST without a word;
    - a model of the user's folder with no data= at all: the default data, Carvana, is the U-Net's,
      and is never taken for another model's (data=none: the module's own loaders)."""
    user_dir = _config_dir(argv)
    if not user_dir or any(a in SHOW_FLAGS for a in argv):
        return None
    user_dir_path = Path(user_dir).expanduser()
    for group in ("model", "data"):
        for option in _chosen(argv, group) or []:
            theirs, ours = user_dir_path / group / f"{option}.yaml", config_dir / group / f"{option}.yaml"
            if theirs.is_file() and ours.is_file():
                return (
                    f"{group}={option}: both your {theirs} and segperf's own {group}={option} ({ours}) have this "
                    f"name, and Hydra would take segperf's; give yours another name ({group}/my_{option}.yaml) "
                    f"and choose it with {group}=my_{option}"
                )
    models = _chosen(argv, "model") or []
    own = [m for m in models if (user_dir_path / "model" / f"{m}.yaml").is_file()]
    if own and _chosen(argv, "data") is None:
        return (
            f"model={own[0]} is yours ({user_dir_path / 'model' / f'{own[0]}.yaml'}), and no data= says what it "
            "trains on (the default data, Carvana, is segperf's U-Net's): name your data module's config, "
            f"data=<name> (a data/<name>.yaml in {user_dir}), or data=none to train on the module's own "
            "train_dataloader()"
        )
    return None


def set_up_command() -> None:
    """What every segperf command does first, before it imports torch, Lightning, albumentations or
    matplotlib (so each command's `python -m` module calls it ahead of its other imports): the
    environment those libraries read when imported (segperf.config.set_up_environment: the tools'
    caches in segperf's cache folder, albumentations offline), and the resolvers and schemas that
    segperf's configs name. Importing segperf does none of it: PerfMonitor in a user's own Trainer
    leaves their torch.compile cache, and their Hydra app's resolvers and groups, as they were.
    Hydra's launchers carry the resolvers and schemas to their jobs' processes (its Singleton
    state), and every process a command starts inherits the environment. Idempotent."""
    from segperf.config import register_resolvers, set_up_environment
    from segperf.schema import register_schema

    set_up_environment()
    register_resolvers()
    register_schema()


def plain_segperf_warnings() -> None:
    """On the command line, segperf's own warnings (a data check leaving files out, a folder's
    orphan masks) read as `segperf: warning: <message>` on stderr, like its notes and errors,
    not as Python's `<file>:<line>: UserWarning:` with a source line. A library user (PerfMonitor,
    the DataModules in their own script) still gets real warnings, which they can filter or catch.
    Warnings from anywhere else are shown as Python shows them."""
    import warnings

    package = str(Path(__file__).resolve().parent)
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and str(Path(filename).resolve()).startswith(package):
            print(f"segperf: warning: {message}", file=sys.stderr if file is None else file)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning

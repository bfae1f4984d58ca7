"""`python -m segperf.bench data [overrides]`: the loader benchmark's command line.

Hydra composes conf/bench.yaml (key names and types: segperf.bench.schema) and answers `--help`
and `--cfg job` before the benchmark's heavy imports (torch, PIL: segperf.bench.loader) are made.
A mistake stops it before any work with one `segperf.bench: error:` line per problem, each naming
its key, exit status 2: a misspelt key (with the key it was probably meant to be), a value of the
wrong type or out of range, or a flag of the argparse command line this replaced (with the
override that does the same).
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from segperf.bench.schema import BenchSettingsError, keys, register_schema, settings
from segperf.command_line import override_key, problems, quote_path_values
from segperf.config import CONFIG_DIR
from segperf.data.filechecks import write_bad_files
from segperf.errors import SegperfError

PROG = "python -m segperf.bench data"
ERROR_PREFIX = "segperf.bench"  # the prefix of its error lines
CONFIG_NAME = "bench"
# The flags of the argparse command line the overrides replaced, and the override for each.
OLD_FLAGS = {
    "--root": "data.root=PATH",
    "--images": "images=96",
    "--height": "data.height=256",
    "--width": "data.width=384",
    "--batch-size": "batch_size=6",
    "--min-seconds": "min_seconds=1.0",
    "--decode": "'data.decode=[full,reduced]'",
    "--cache": "'data.cache=[off,memory,device]'",
    "--workers": "'data.num_workers=[0,2]'",
    "--pin": "'data.pin_memory=[false,true]'",
    "--no-device-cache": "'data.cache=[off,memory]' (device left out of the list)",
    "--augment": "data.augment=basic",
    "--cold-cache": "cold_cache=true",
    "--threads": "num_threads=1",
    "--out": "out=PATH",
}
# Training's config groups (conf/<group>/) that a user of `segperf.train` may reach for; Hydra
# takes their names for groups here too, so they cannot be keys of the bench.
GROUPS = {
    "decode": "data.decode",
    "cache": "data.cache",
    "workers": "data.num_workers",
    "pin": "data.pin_memory",
    "augment": "data.augment",
    "threads": "num_threads",
    "size": "images and batch_size",
}

register_schema()


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def bench(cfg: DictConfig) -> None:
    from segperf.bench.loader import run

    run_dir = Path(HydraConfig.get().runtime.output_dir)  # absolute; printed relative as before
    try:
        run(settings(cfg), run_dir.relative_to(Path.cwd()) if run_dir.is_relative_to(Path.cwd()) else run_dir)
    except SegperfError as error:  # a bad value (a sweep's job), a missing or empty data.root, bad files
        write_bad_files(run_dir, {}, error)  # the whole list, where the error's cut list says it is
        raise SystemExit(problems(ERROR_PREFIX, str(error))) from None


def main(argv: list[str]) -> int:
    """Run the benchmark with `argv` (overrides and Hydra's flags); the exit status."""
    argv = quote_path_values(argv)  # data.root=, out= as segperf prints paths (`=` and `,` too)
    saved = sys.argv
    sys.argv = [PROG, *argv]  # what Hydra parses; its usage line names this command
    try:
        found = check(argv)
        if found:
            return problems(ERROR_PREFIX, found)
        bench()
        return 0
    except SystemExit as done:  # --help, Hydra's own errors, a failed check in the job
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()  # so that main can run again in this process


def check(argv: list[str]) -> list[str]:
    """The problems of a command line, one line each; none for Hydra's own flags (--help, --info)
    and for a sweep (-m: Hydra composes each job, and each job checks its values)."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in OLD_FLAGS:
            return [f"{flag}: options are Hydra overrides now: {OLD_FLAGS[flag]} (see {PROG} --help)"]
    from hydra._internal.utils import get_args_parser  # the parser hydra.main itself uses

    args = get_args_parser().parse_args(argv)  # a bad flag: Hydra's usage line, exit status 2
    if args.help or args.hydra_help or args.info or args.shell_completion or args.multirun:
        return []
    if args.config_path or args.config_name or args.config_dir:
        return []
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name=CONFIG_NAME, overrides=args.overrides)
    except (HydraException, OmegaConfBaseException) as error:
        return [composition_problem(error, args.overrides)]
    if args.cfg:
        return []  # only shows the config
    try:
        settings(cfg)
    except BenchSettingsError as error:
        return error.problems
    return []


def composition_problem(error: Exception, overrides: list[str]) -> str:
    """Hydra's multi-line composition error as one line that names the key."""
    if isinstance(error, OverrideParseException):  # not an override's syntax
        return f"{error.override}: {' '.join(str(error.message).split())}"
    cause = error.__cause__ or error
    text = str(error).splitlines()[0]
    group = re.match(r"Could not override '([\w/]+)'\. No match in the defaults list", text)
    if group:  # a key named like one of training's config groups
        name = group.group(1)
        use = f": here it is {GROUPS[name]}" if name in GROUPS else ""
        return f"{_override_of(name, overrides)}: {name} is one of training's config groups, not a bench key{use}"
    key = getattr(cause, "full_key", None)
    if isinstance(cause, ConfigKeyError | ConfigAttributeError) and key:
        return f"{_override_of(key, overrides)}: no such key{_did_you_mean(key)} (see {PROG} --cfg job)"
    if key:  # a value of the wrong type
        message = str(getattr(cause, "msg", cause)).splitlines()[0]
        return f"{_override_of(key, overrides)}: {message}"
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _override_of(key: str, overrides: list[str]) -> str:
    """The override that set `key` as the user typed it (or the key)."""
    for override in overrides:
        if override_key(override) == key:
            return override
    return key


def _did_you_mean(key: str) -> str:
    known = keys()
    leaf = [k for k in known if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]]  # height: data.height
    close = leaf or difflib.get_close_matches(key, known, n=1, cutoff=0.7)
    return f"; did you mean {close[0]}?" if close else ""

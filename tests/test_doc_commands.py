"""Every command the README and the docs pages show in a ```bash block still works as shown.

Each one is checked the cheapest way that would catch it going stale: a `python -m segperf.train`,
`.infer` or `.tune` command is composed by Hydra with its overrides (each value of a sweep), and
its settings checked; `python -m segperf.bench data` goes through the bench's own checks; the
report and the data generators parse their arguments; a `make` command is expanded by `make -n`
and the segperf commands of its recipe are checked the same way. What none of that can do (a
system package install, a GPU machine's script, a shell loop) is in ALLOWED, with the reason and,
where a test runs it, that test's name, which must exist. Placeholder folders
(`/path/to/carvana`, ...) stand for the tiny test data sets.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from segperf.config import CONFIG_DIR
from tests.conftest import REPO
from tests.doc_commands import DocCommand, all_commands
from tests.extras import needs_extra

# A command starting with one of these is not run or composed here; the reason says why, and a
# "tests/<file>.py::<test>" in it names the test that runs it (checked to exist).
ALLOWED = {
    "sudo ": "installs a system package (perf) or changes a kernel setting: the administrator's step",
    "tensorboard --logdir": (
        "run by tests/test_cli.py::test_train_command_on_a_data_folder_writes_results_that_tensorboard_reads"
    ),
    "make test": "what CI runs (`make test`); `make -n test` is checked below for the target's existence",
    "make gpu-wheels": (
        "run by tests/gpu/test_rehearsal.py::test_rehearsal_installs_the_wheels_runs_the_check_and_leaves_its_files"
    ),
    "GPU_CHECK_REHEARSE=1 python -m pytest tests/gpu": (
        "the GPU check's CPU rehearsal from the venv: run by "
        "tests/gpu/test_rehearsal.py::test_rehearsal_installs_the_wheels_runs_the_check_and_leaves_its_files"
    ),
    "python -m segperf.train resume=": (
        "needs an interrupted run's folder: run by "
        "tests/test_interrupt.py::test_ctrl_c_mid_training_saves_a_checkpoint_and_resume_finishes_the_run"
    ),
    "python scripts/framework_efficiency.py": (
        "run by tests/test_framework_efficiency.py::"
        "test_both_sides_train_the_same_steps_and_images_and_the_ratio_is_printed_and_written"
    ),
    "python scripts/monitor_overhead.py": (
        "run by tests/test_monitor_overhead.py::"
        "test_the_script_alternates_measured_and_unmeasured_runs_and_prints_both_figures"
    ),
    "python scripts/decision_rule_rates.py": (
        "run by tests/test_decision_rule_rates.py::"
        "test_every_cell_is_simulated_and_printed_with_its_uncertainty_and_sweep_size"
    ),
    "python scripts/long_run_record.py": (
        "run by tests/test_long_run.py::test_the_long_run_script_reads_the_memory_and_the_records_size"
    ),
    "python -m segperf.tune calibrate": (
        "run by tests/test_probe_calibration.py::"
        "test_a_study_of_a_tiny_tune_runs_a_probe_and_a_long_run_of_each_configuration_and_writes_its_table"
    ),
    "export TORCHINDUCTOR_CACHE_DIR=": "points the compile cache of the commands after it at a fresh folder",
    "for i in 1 2 3 4; do python -m segperf.train +opt=all": (
        "four compiled runs at once on one cache: the same as "
        "tests/test_compile_cache.py::test_concurrent_compiled_runs_against_one_cache_all_complete_and_a_fresh_run_after_them_too"
        "; each run is the `python -m segperf.train +opt=all` after it, composed here"
    ),
    "git clone <repo> fresh": "a fresh clone, as CI (.ci/run) starts from; its make targets are checked below",
    "for r in 0 1 2; do for cfg in": (
        "the shell loop that measured the image folder's story (runs alternated by hand); each of its runs is a "
        "configuration of the `-m ... workers=off,auto prefetch=off,on cache=off,memory` sweep on the same page, "
        "which is composed here"
    ),
}
# A `make` target whose recipe runs no segperf command, and what exercises it
MAKE_WITHOUT_SEGPERF = {
    "test": "CI runs it",
    "docs": "tests/test_docs_site.py::test_the_site_builds_with_strict_checks",
    "gpu-wheels": "tests/gpu/test_rehearsal.py::test_rehearsal_installs_the_wheels_runs_the_check_and_leaves_its_files",
}


def placeholders(tiny: dict[str, Path]) -> dict[str, str]:
    return {
        "/path/to/carvana": str(tiny["carvana"]),
        "/path/to/mnist": str(tiny["mnist"]),
        "/path/to/photos": str(tiny["photos"]),
    }


@pytest.fixture(scope="module")
def tiny_data(tiny_carvana, tiny_mnist, tmp_path_factory) -> dict[str, Path]:
    from tests.test_imagefolder import make_folder

    photos = make_folder(tmp_path_factory.mktemp("photos") / "photos", {"cat": 4, "dog": 4, "fox": 4})
    return {"carvana": tiny_carvana, "mnist": tiny_mnist, "photos": photos}


@pytest.fixture
def after_a_tune(tmp_path, monkeypatch) -> None:
    """A cache folder holding a tune's preset, as `python -m segperf.tune` leaves it, so that
    `+opt=tuned` (shown right after the tune) composes as it would for the user."""
    from segperf.tune.output import preset_body, preset_text, write_preset
    from tests.test_tune_runner import compose_tune

    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    best = ("precision=bf16", "upsample=deconv", "workers=auto")
    write_preset(tmp_path / "tune", preset_text(preset_body(best, compose_tune(*best).hydra.runtime.choices), ["docs"]))


def allowed_reason(command: DocCommand) -> str | None:
    return next((why for prefix, why in ALLOWED.items() if command.text.startswith(prefix)), None)


def sweep_choices(args: list[str]) -> list[list[str]]:
    """One list of overrides per value of each sweep override (the others at their first value):
    every value of a `-m` command is composed once, without composing the whole grid."""
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    parsed = OverridesParser.create().parse_overrides(overrides)
    firsts, sweeps = [], []
    for text, override in zip(overrides, parsed, strict=True):
        if override.is_sweep_override():
            values = [str(v) for v in override.sweep_string_iterator()]
            firsts.append(f"{override.get_key_element()}={values[0]}")
            sweeps.append((len(firsts) - 1, override.get_key_element(), values))
        else:
            firsts.append(text)
    lists = [firsts]
    for index, key, values in sweeps:
        for value in values[1:]:
            lists.append([*firsts[:index], f"{key}={value}", *firsts[index + 1 :]])
    return lists


def compose_train(args: list[str]) -> None:
    from segperf.command_line import quote_path_values
    from segperf.schema import problems_in

    for overrides in sweep_choices(quote_path_values(args)):  # paths quoted as the command line does
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
        problems = [p for p in problems_in(cfg) if "val_images" not in p]  # the tiny sets hold few images
        assert problems == [], (overrides, problems)


def compose_infer(args: list[str]) -> None:
    from segperf.command_line import quote_path_values

    for overrides in sweep_choices(quote_path_values(args)):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            compose(config_name="infer", overrides=overrides, return_hydra_config=True)


def check_tune(args: list[str]) -> None:
    from segperf.tune import settings_check
    from tests.test_tune_runner import compose_tune

    cfg = compose_tune(*args)
    assert settings_check.settings_problems(cfg.tune) == [] and settings_check.sweep_problems(args) == [], args


def check_bench(args: list[str]) -> None:
    from segperf.bench.cli import check

    assert args[:1] == ["data"], args
    assert check(args[1:]) == [], args


class Parsed(Exception):
    """Raised in place of the real work once a command's arguments have parsed."""


def parses(module: str, work: str, args: list[str], monkeypatch) -> None:
    """`python -m <module> <args>` parses: its `main` reaches `work` (replaced by a stop)."""
    import importlib

    target = importlib.import_module(module)

    def stop(*_args, **_kwargs):
        raise Parsed

    monkeypatch.setattr(target, work, stop)
    with pytest.raises(Parsed):
        target.main(args)


PYTHON_CHECKS = {
    "segperf.train": lambda args, mp: compose_train(args),
    "segperf.infer": lambda args, mp: compose_infer(args),
    "segperf.tune": lambda args, mp: check_tune(args),
    "segperf.bench": lambda args, mp: check_bench(args),
    "segperf.report": lambda args, mp: parses("segperf.report.cli", "load_sweep", args, mp),
    "segperf.data.carvana.synthetic": lambda args, mp: parses("segperf.data.carvana.synthetic", "generate", args, mp),
    "segperf.data.imagefolder.builtin": lambda args, mp: parses(
        "segperf.data.imagefolder.builtin", "generate", args, mp
    ),
}


def check_python(argv: list[str], monkeypatch) -> None:
    assert argv[:2] == ["python", "-m"] and argv[2] in PYTHON_CHECKS, f"no check for {argv[:3]}: add one"
    PYTHON_CHECKS[argv[2]](argv[3:], monkeypatch)


def make_recipe(argv: list[str]) -> list[list[str]]:
    """The segperf commands `make` would run for `argv` (make -n: nothing runs), as `python -m ...`."""
    done = subprocess.run(["make", "-n", *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [shlex.split(line) for line in done.stdout.replace("\\\n", " ").splitlines() if line.strip()]
    return [["python", *words[1:]] for words in lines if words[0].endswith("/python") and words[1:3] != ["-m", "pip"]]


def check_make(argv: list[str], monkeypatch) -> None:
    targets = [a for a in argv[1:] if "=" not in a]
    if "report" in targets and not any(a.startswith("SWEEP=") for a in argv):
        argv = [*argv, "SWEEP=multirun/newest"]  # the newest sweep, which this checkout does not have
    runs = [r for r in make_recipe(argv) if r[1:3] == ["-m", "segperf"] or (len(r) > 2 and r[2].startswith("segperf."))]
    if not runs:
        assert targets and all(t in MAKE_WITHOUT_SEGPERF for t in targets), f"{argv}: runs no segperf command"
    for run in runs:
        check_python(run, monkeypatch)


def check(command: DocCommand, tiny: dict[str, Path], monkeypatch) -> None:
    """`command` with its placeholders filled in: the data folders by the tiny sets, and any
    other `<...>` (`<date>/<time>`, `<path>`, `<that run>`) by a word, as a user types one."""
    text = command.text
    for placeholder, path in placeholders(tiny).items():
        text = text.replace(placeholder, path)
    text = re.sub(r"<([^<>]+)>", lambda m: re.sub(r"\W+", "_", m.group(1)), text)
    argv = shlex.split(text, comments=True)
    if argv[0] == "make":
        check_make(argv, monkeypatch)
    elif argv[0] == "python":
        check_python(argv, monkeypatch)
    else:
        pytest.fail(f"{command}: no check for `{argv[0]}` commands; add one, or an ALLOWED entry with the reason")


COMMANDS = all_commands()


@pytest.mark.slow  # ~90 compositions and a few `make -n`: about a minute of CPU
@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.page}:{c.line}" for c in COMMANDS])
def test_every_command_the_docs_show_composes_or_is_allowed_with_a_reason(
    command, tiny_data, after_a_tune, monkeypatch
):
    if (why := allowed_reason(command)) is not None:
        assert len(why) > 20, command
        return
    if "hydra/launcher=slurm" in command.text:
        needs_extra("slurm")  # the launcher's config is the plugin's
    check(command, tiny_data, monkeypatch)


def test_the_docs_show_commands_of_every_kind():
    """A guard for the reader above: the pages' blocks are found (a renamed page or a changed
    fence would otherwise check nothing)."""
    heads = {" ".join(c.argv[:3]) for c in COMMANDS}
    pages = {c.page for c in COMMANDS}
    assert {"python -m segperf.train", "python -m segperf.tune", "python -m segperf.bench", "make demo"} <= heads
    assert {"README.md", "docs/tuning.md", "docs/scaling-out.md", "docs/loader-benchmark.md"} <= pages


def test_every_allowed_command_is_shown_and_every_test_it_names_exists():
    texts = [c.text for c in COMMANDS]
    for prefix in ALLOWED:
        assert any(t.startswith(prefix) for t in texts), f"ALLOWED[{prefix!r}] matches no command: remove it"
    named = [w for why in [*ALLOWED.values(), *MAKE_WITHOUT_SEGPERF.values()] for w in why.split() if "::" in w]
    for reference in named:
        path, test = reference.rstrip(",;.)").split("::")
        tree = ast.parse((REPO / path).read_text())
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert test in names, f"{reference}: no such test"


def test_a_misspelt_override_in_a_doc_command_is_caught(tiny_data, monkeypatch):
    """The check can fail: a command with a key the config does not have is refused."""
    wrong = DocCommand("README.md", 1, "python -m segperf.train -m workers=off,auto pin=of")
    with pytest.raises(Exception, match="pin"):
        check(wrong, tiny_data, monkeypatch)
    with pytest.raises(AssertionError):
        check(DocCommand("README.md", 1, "make no-such-target"), tiny_data, monkeypatch)

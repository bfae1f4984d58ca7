"""The GPU check's one sweep: what `tests/gpu/` judges, run once per test session.

A plan is the check's runs (`+opt=` presets, in order), its run size and the training entry
point: on a GPU, `python -m segperf.train` over the seed's ladder and three presets; in the
rehearsal on a CPU, four tiny eager runs through `tests.gpu.entry` with a fake NVML. `run_check`
checks the imports, writes the built-in data, runs the sweep under the time left, makes its
report, and judges it (tests/gpu/verdicts.py); `write_files` leaves what docs/GPU.md needs.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.gpu import verdicts

REPO = Path(__file__).resolve().parents[2]
CONF = Path(__file__).resolve().parent / "conf"  # the check's sizes and extra presets, on Hydra's search path
LADDER = ("0_baseline", "1_prefetch", "2_workers", "3_pin", "4_deconv", "5_channels_last", "6_compile", "7_bf16")
# what a run needs, and the packages the GPU machine's image lacks (they come from `make gpu-wheels`)
NEEDED = ("hydra", "omegaconf", "antlr4", "yaml", "packaging", "torch", "lightning", "torchmetrics", "numpy", "PIL")
NEEDED += ("psutil", "pynvml", "matplotlib", "tensorboard", "segperf", "tests.gpu.probe")
FROM_WHEELS = ("hydra", "omegaconf", "antlr4")
# the report's charts that matter to the check
CHARTS = ("training_time_by_phase.png", "training_throughput.png", "jitter_utilization.png")


@dataclass(frozen=True)
class Plan:
    rehearsal: bool
    presets: tuple[str, ...]
    size: str
    entry: tuple[str, ...]
    extra: tuple[str, ...] = ()
    budget_s: float = 480.0


def gpu_plan(budget_s: float) -> Plan:
    return Plan(
        False, (*LADDER, "all", "all_cache_device", "all_fp16"), "gpu_check", ("-m", "segperf.train"), (), budget_s
    )


def rehearsal_plan(budget_s: float) -> Plan:
    """The ladder's first step, its pin step, +opt=all and the device cache (both bf16): compile
    takes a minute on a CPU and fp16 seconds a step, so the rehearsal runs eager and has no fp16."""
    return Plan(True, ("0_baseline", "3_pin", "all", "all_cache_device"), "gpu_rehearse", ("-m", "tests.gpu.entry"),
                ("compile=off",), budget_s)  # fmt: skip


@dataclass
class Check:
    """A judged sweep: its folder, runs, report (if made) and one verdict per claim."""

    sweep: Path
    plan: Plan
    runs: list[verdicts.Run]
    verdicts: dict[str, verdicts.Verdict]
    log: list[str] = field(default_factory=list)


def check_imports(site: str | None, rehearsal: bool) -> list[str]:
    """Every import a run needs and where it came from (the wheels in `site`, or the machine);
    raises naming what is missing, or (on a GPU) what does not come from the wheels."""
    lines, missing = [], []
    for name in NEEDED:
        try:
            module = importlib.import_module(name)
        except Exception as error:
            missing.append(f"{name} ({type(error).__name__}: {error})")
            continue
        where = "wheel" if site and module.__file__.startswith(site) else "machine"
        lines.append(f"  {name:16} {getattr(module, '__version__', ''):14} {where:8} {module.__file__}")
    if site:
        missing += [f"{n} not from the wheels" for n in FROM_WHEELS if not sys.modules[n].__file__.startswith(site)]
    import torch

    cuda = torch.cuda.is_available()
    lines.append(f"  CUDA: {cuda}" + (f", {torch.cuda.get_device_name()}" if cuda else ""))
    if not rehearsal and not cuda:
        missing.append("a CUDA device (torch sees none: rehearse on a CPU with --gpu-rehearse)")
    if missing:
        raise RuntimeError("the GPU check is missing: " + "; ".join(missing))
    return lines


def overrides(plan: Plan) -> list[str]:
    return [f"size={plan.size}", f"hydra.searchpath=[file://{CONF}]", *plan.extra]


def prepare_data(plan: Plan) -> None:
    """The built-in data set, written before the sweep so that no run counts it in its set-up."""
    from hydra import compose, initialize_config_dir

    from segperf.command_line import set_up_command
    from segperf.config import CONFIG_DIR
    from segperf.data.carvana.synthetic import ensure_synthetic

    set_up_command()  # segperf's resolvers and schemas, as the command's entry registers them
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides(plan))
    if cfg.data.get("root") is None:
        options = dict(cfg.data.synthetic)
        ensure_synthetic(options.pop("cache_dir"), **options)


def run_check(plan: Plan, work: Path, started: float, site: str | None = None) -> Check:
    """The sweep into `work`/sweep, stopped (SIGTERM: the running job records itself as
    interrupted) 60 s before the budget that began at `started`, then its report and verdicts."""
    log = check_imports(site, plan.rehearsal)
    prepare_data(plan)
    sweep = work / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [site, str(REPO / "src"), str(REPO)]))}
    env |= {"PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"} | ({"SEGPERF_FAKE_NVML": "1"} if plan.rehearsal else {})
    command = [sys.executable, *plan.entry, "-m", "+opt=" + ",".join(plan.presets), *overrides(plan)]
    command.append(f"hydra.sweep.dir={sweep}")
    left = max(30.0, plan.budget_s - 60 - (time.monotonic() - started))
    log.append(f"sweep: {' '.join(command[1:])} (at most {left:.0f} s)")
    try:
        done = subprocess.run(command, cwd=REPO, env=env, timeout=left)
        log.append(f"sweep: exit status {done.returncode}")
    except subprocess.TimeoutExpired:
        log.append(f"sweep: stopped at the time limit ({left:.0f} s); what finished is judged")
    report = subprocess.run([sys.executable, "-m", "segperf.report", str(sweep)], cwd=REPO, env=env, timeout=120)
    if report.returncode:
        log.append(f"report: exit status {report.returncode}; the verdicts read results.json alone")
    runs = verdicts.read_sweep(sweep) if sweep.is_dir() else []
    judged = verdicts.all_verdicts(runs, list(plan.presets), plan.rehearsal, read_report(sweep))
    return Check(sweep, plan, runs, judged, log)


def read_report(sweep: Path) -> dict | None:
    try:
        return json.loads((sweep / "report.json").read_text())
    except (OSError, ValueError):
        return None


def write_files(check: Check, out: Path) -> list[str]:
    """At most 7 files flat in `out` (the 8th is the caller's log): verdicts.txt and .json,
    report.md, three charts, and results.tar.gz with every run's results.json and summary.txt,
    report.json and multirun.yaml."""
    out.mkdir(parents=True, exist_ok=True)
    text = verdicts.render(list(check.verdicts.values()), check.runs, check.plan.rehearsal)
    (out / "verdicts.txt").write_text(text)
    (out / "verdicts.json").write_text(json.dumps([asdict(v) for v in check.verdicts.values()], indent=1) + "\n")
    for name in ("report.md", *CHARTS):
        if (check.sweep / name).is_file():
            shutil.copy(check.sweep / name, out / name)
    kept = ("results.json", "summary.txt", "report.json", "multirun.yaml")
    if check.sweep.is_dir():
        with tarfile.open(out / "results.tar.gz", "w:gz") as archive:
            for path in sorted(check.sweep.rglob("*")):
                if path.name in kept and path.is_file():
                    archive.add(path, arcname=str(path.relative_to(check.sweep)))
    return sorted(p.name for p in out.iterdir())

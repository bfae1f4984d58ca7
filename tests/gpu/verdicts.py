"""The GPU check's verdicts: one PASS / FAIL / SKIP line per claim segperf makes about GPUs, each
with the figure behind it, read from a sweep's results.json files (and report.json if present).

    python -m tests.gpu.verdicts <sweep dir> [--out DIR] [--planned 0_baseline,...] [--rehearsal]

tests/gpu/test_claims.py asserts each verdict as a test; this command judges a sweep again (e.g.
the results.tar.gz a GPU run sent back, unpacked). Writes verdicts.txt (for people) and
verdicts.json (a list of {check, status, figure}) into --out (default: the sweep folder) and
prints verdicts.txt. Exit status 0: no FAIL; 3: at least
one FAIL; 2: no run to judge. SKIP means the evidence cannot exist here (no CUDA device, or no
run of that kind in this sweep), never that it was looked for and not found: that is a FAIL.

Runs are found by their `+opt=<preset>` override (the job folder's name), as the check's sweep
names them: 0_baseline ... 7_bf16 (the seed's ladder), all, all_cache_device, all_fp16. What each
check reads is results.json's own sections plus `gpu_probe` (tests/gpu/probe.py). Only the
standard library: it runs wherever the sweep's files are.

Speed is a GPU's claim: the two speed checks (data_wait share, images/s) judge CUDA runs only. On a
CPU they say what it measured and SKIP: +opt=all's bf16 and compile are slower than the baseline
on a CPU without bf16 instructions, which is true of that CPU, not a defect of the check.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
INTERVAL_S = 0.05  # the sampler period segperf promises
MAX_PERIOD_S = 0.1  # slower than this, the sampler fell behind
MAX_DEVICE_OVER_HOST = 1.2  # device time per step can exceed the host's only by the launch queue's backlog
PEAK_TOLERANCE = 0.02
# NVIDIA's dense (no sparsity) peaks, FLOP/s, per Lightning precision: the datasheets' starred figures
# are with sparsity, twice these. "32-true" allows plain fp32 and TF32 (tensor cores, when enabled).
DENSE_PEAKS: dict[str, dict[str, tuple[float, ...]]] = {
    "h200 sxm": {"32-true": (67e12, 494.7e12), "bf16-mixed": (989.4e12,), "16-mixed": (989.4e12,)},
    "h200 nvl": {"32-true": (60e12, 417.5e12), "bf16-mixed": (835.5e12,), "16-mixed": (835.5e12,)},
}
# what a speed check says of runs on a CPU, after their figure
CPU_SPEED = " (measured on a CPU: speed is judged on a GPU only)"
_JOB_DIR = re.compile(r"^(\d+)_(.*)$")


@dataclass
class Run:
    name: str
    opt: str | None
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.results.get("status") == "completed"

    @property
    def cuda(self) -> bool:
        return str(self.results.get("device", "")).startswith("cuda")

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.results
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def adjusted(self, setting: str) -> dict[str, Any]:
        """results.json's `adjusted[setting]` ({requested, used, reason}; keys are dotted names), or {}."""
        return (self.results.get("adjusted") or {}).get(setting) or {}

    def why_not_ok(self) -> str:
        status = self.results.get("status", "no results.json")
        return f"{self.label}: {status} ({self.results.get('error') or 'no error'})"

    @property
    def label(self) -> str:
        return f"+opt={self.opt}" if self.opt else self.name


@dataclass
class Verdict:
    check: str
    status: str
    figure: str


def read_sweep(sweep: Path) -> list[Run]:
    """Every job folder below `sweep` (a folder without results.json is a run that never finished)."""
    runs = []
    for folder in sorted(p for p in sweep.iterdir() if p.is_dir() and _JOB_DIR.match(p.name)):
        overrides = dict(item.split("=", 1) for item in _JOB_DIR.match(folder.name)[2].split(",") if "=" in item)
        try:
            results = json.loads((folder / "results.json").read_text())
        except (OSError, ValueError):
            results = {}
        runs.append(Run(folder.name, overrides.get("+opt"), results))
    return runs


def by_opt(runs: list[Run], opt: str) -> Run | None:
    return next((r for r in runs if r.opt == opt), None)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{1000 * x:.1f} ms"


# -- the checks: each takes the runs and returns one Verdict ------------------------------------
def check_runs(runs: list[Run], planned: list[str]) -> Verdict:
    name = "runs completed"
    expected = planned or [r.opt or r.name for r in runs]
    missing = [p for p in expected if by_opt(runs, p) is None and not any(r.name == p for r in runs)]
    failed = [r.why_not_ok() for r in runs if not r.ok]
    done = sum(1 for r in runs if r.ok)
    figure = f"{done} of {len(expected)} planned runs completed"
    if missing:
        figure += "; never started (time limit?): " + ", ".join(missing)
    if failed:
        figure += "; not completed: " + "; ".join(failed)
    errors = [f"{r.label}: {e}" for r in runs for e in r.get("gpu_probe.errors") or []]
    if errors:
        figure += "; the probe's own errors (its evidence is missing there): " + "; ".join(errors[:4])
    return Verdict(name, PASS if done and not missing and not failed else FAIL, figure)


def check_nvml(runs: list[Run], rehearsal: bool = False) -> Verdict:
    name = "NVML utilization sampled every 50 ms, non-zero in training"
    ok_runs = [r for r in runs if r.ok]
    sampled = [r for r in ok_runs if r.get("resources.gpu_util_max") is not None or r.cuda]
    if not sampled:
        return Verdict(name, SKIP, "no GPU sampled in any run (no CUDA device; --rehearse uses a fake NVML)")
    problems, periods, utils = [], [], []
    for r in sampled:
        interval, samples = r.get("resources.interval_s"), r.get("resources.samples") or 0
        wall = r.get("accounted.run_wall_s")
        period = wall / samples if wall and samples else None
        util = r.get("phases.train_step.gpu_util_mean_percent")
        notes = " ".join(r.get("resources.notes") or [])
        if interval is None or interval > INTERVAL_S + 1e-9:
            problems.append(f"{r.label}: interval {interval}")
        if period is None or period > MAX_PERIOD_S:
            problems.append(f"{r.label}: one sample every {_ms(period)}")
        if not util:
            problems.append(f"{r.label}: GPU util during train_step {util}")
        if "using nvmlDeviceGetUtilizationRates" in notes or "not supported either" in notes:
            problems.append(f"{r.label}: no sub-second driver samples ({notes[:160]})")
        if not r.get("resources.gpu_mem_peak_bytes"):
            problems.append(f"{r.label}: no GPU memory sampled")
        periods += [period] if period else []
        utils += [util] if util else []
    source = "fake NVML (rehearsal)" if rehearsal else "NVML driver samples"
    figure = (
        f"{len(sampled)} runs, {source}: a sample every {_ms(min(periods, default=None))}–"
        f"{_ms(max(periods, default=None))}, GPU util during train_step "
        f"{min(utils, default=0):.0f}–{max(utils, default=0):.0f}%"
    )
    if problems:
        return Verdict(name, FAIL, figure + "; " + "; ".join(problems[:6]))
    return Verdict(name, PASS, figure)


def _steady_host_step(r: Run) -> float | None:
    wait, step = r.get("jitter.data_wait.mean"), r.get("jitter.train_step.mean")
    return None if wait is None or step is None else wait + step


def check_cuda_events(runs: list[Run]) -> Verdict:
    name = "CUDA-event device step times, consistent with the host phases"
    cuda = [r for r in runs if r.ok and r.cuda]
    if not cuda:
        return Verdict(name, SKIP, "no CUDA run")
    problems, ratios = [], []
    for r in cuda:
        device, host = r.get("jitter.device_step"), _steady_host_step(r)
        steps = r.get("jitter.train_step.count")
        if not device or not device.get("count"):
            problems.append(f"{r.label}: no device step times")
            continue
        if steps is None or abs(device["count"] - steps) > 1:  # one: the loop's last fetch, counted or not
            problems.append(f"{r.label}: {device['count']} device steps vs {steps} host steps")
        ratio = device["mean"] / host if host else None
        if ratio is None or not 0 < ratio <= MAX_DEVICE_OVER_HOST:
            problems.append(f"{r.label}: device {_ms(device['mean'])} vs host {_ms(host)} per step")
        else:
            ratios.append((ratio, r))
    figure = f"{len(cuda)} CUDA runs"
    if ratios:
        low, high = min(ratios, key=lambda x: x[0]), max(ratios, key=lambda x: x[0])
        figure += (
            f"; device/host time per step {low[0]:.2f} ({low[1].label}) to {high[0]:.2f} ({high[1].label}), "
            f"e.g. {high[1].label}: {_ms(high[1].get('jitter.device_step.mean'))} on the device vs "
            f"{_ms(_steady_host_step(high[1]))} host data_wait+train_step"
        )
    return Verdict(name, FAIL if problems else PASS, "; ".join([figure, *problems[:6]]))


def _batches(r: Run) -> list[dict[str, Any]]:
    return r.get("gpu_probe.batches") or []


def check_pin(runs: list[Run]) -> Verdict:
    name = "pin=on applied (pinned host batches)"
    asked = [r for r in runs if r.get("config.data.pin_memory") and r.get("config.data.cache") != "device"]
    if not asked:
        return Verdict(name, SKIP, "no run with pin=on")
    not_ok = [r for r in asked if not r.ok]
    if not_ok:
        return Verdict(name, FAIL, "; ".join(r.why_not_ok() for r in not_ok))
    adjusted = [r for r in asked if r.adjusted("data.pin_memory").get("used") is False]
    if not any(r.cuda for r in asked):
        reason = adjusted[0].adjusted("data.pin_memory").get("reason") if adjusted else "not adjusted"
        return Verdict(name, SKIP, f"no CUDA device: {len(adjusted)} of {len(asked)} runs adjusted pin off ({reason})")
    problems, pinned = [], []
    for r in asked:
        batches = _batches(r)
        loaders = [x for x in r.get("gpu_probe.loader") or [] if x.get("is_dataloader")]
        if r in adjusted:
            problems.append(f"{r.label}: adjusted ({r.adjusted('data.pin_memory').get('reason')})")
        if not batches:
            problems.append(f"{r.label}: no sampled batches (no gpu_probe)")
            continue
        n = sum(all(b["pinned"]) for b in batches)
        pinned.append(f"{r.label} {n}/{len(batches)}")
        if n < len(batches) or not all(x.get("pin_memory") for x in loaders):
            problems.append(f"{r.label}: {n} of {len(batches)} sampled batches pinned")
    control = [r for r in runs if r.ok and r.cuda and r.get("config.data.pin_memory") is False and _batches(r)]
    figure = "sampled host batches pinned: " + ", ".join(pinned)
    if control:
        figure += f" (pin=off, {control[0].label}: {sum(all(b['pinned']) for b in _batches(control[0]))} pinned)"
    return Verdict(name, FAIL if problems else PASS, "; ".join([figure, *problems[:6]]))


def check_device_cache(runs: list[Run]) -> Verdict:
    name = "cache=device: batches made on the device, no DataLoader"
    device_runs = [r for r in runs if r.get("config.data.cache") == "device"]
    if not device_runs:
        return Verdict(name, SKIP, "no run with cache=device")
    problems, figures = [], []
    for r in device_runs:
        if not r.ok:
            problems.append(r.why_not_ok())
            continue
        chain, batches = r.get("gpu_probe.loader") or [], _batches(r)
        classes = " > ".join(x["class"] for x in chain) or "unknown"
        where = r.get("gpu_probe.device")
        on_device = sum(b["devices"] == [where] for b in batches)
        share = data_wait_share(r)
        figures.append(
            f"{r.label}: loader {classes}; {on_device}/{len(batches)} sampled batches already on {where} "
            f"before the copy step; data_wait {_pct(share)} of each step"
        )
        if any(x.get("is_dataloader") for x in chain) or not any(x["class"] == "DeviceBatches" for x in chain):
            problems.append(f"{r.label}: loader is {classes}")
        if not batches or on_device < len(batches):
            problems.append(f"{r.label}: {on_device} of {len(batches)} sampled batches on {where}")
    return Verdict(name, FAIL if problems else PASS, "; ".join(figures + problems))


def check_compile(runs: list[Run]) -> Verdict:
    name = "compile ran (no eager fallback; Triton on CUDA)"
    compiled = [r for r in runs if r.get("config.model.compile")]
    if not compiled:
        return Verdict(name, SKIP, "no run with compile=on")
    problems, figures = [], []
    for r in compiled:
        if not r.ok:
            problems.append(r.why_not_ok())
            continue
        probe = r.get("gpu_probe.compile") or {}
        counters = probe.get("counters") or {}
        graphs = (counters.get("stats") or {}).get("unique_graphs", 0)
        breaks = sum((counters.get("graph_break") or {}).values())
        kernels = (counters.get("inductor_metrics") or {}).get("generated_kernel_count", 0)
        hits = (counters.get("inductor") or {}).get("fxgraph_cache_hit", 0)
        figures.append(
            f"{r.label}: {graphs} graphs, {breaks} graph breaks, {kernels} kernels generated, {hits} FX-cache hits"
            + (f", Triton {probe['triton']}" if probe.get("triton") else "")
            + f", warm-up {r.get('train.warmup_s') or 0:.0f} s"
        )
        fallback = r.adjusted("model.compile").get("reason") or probe.get("fallback")
        if fallback:
            problems.append(f"{r.label}: fell back to eager ({fallback})")
        elif not probe:
            problems.append(f"{r.label}: no gpu_probe compile record")
        elif not probe.get("compiled_at_end") or not graphs or not (kernels or hits):
            problems.append(f"{r.label}: nothing compiled")
        if r.cuda and probe and not probe.get("triton"):
            problems.append(f"{r.label}: Triton never imported")
    return Verdict(name, FAIL if problems else PASS, "; ".join(figures + problems))


def check_precision(runs: list[Run], precision: str, dtype: str) -> Verdict:
    name = f"{dtype} autocast ran ({precision})"
    asked = [r for r in runs if r.get("config.trainer.precision") == precision]
    if not asked:
        return Verdict(name, SKIP, f"no run with trainer.precision={precision}")
    problems, figures = [], []
    for r in asked:
        if not r.ok:
            problems.append(r.why_not_ok())
            continue
        samples = r.get("gpu_probe.autocast") or []
        n = sum(1 for s in samples if s.get("enabled") and s.get("dtype") == dtype)
        loss = r.get("quality.val_loss")
        shown = f"{loss:.3f}" if isinstance(loss, float | int) else loss
        figure = f"{r.label}: autocast {dtype} in {n}/{len(samples)} sampled steps, val loss {shown}"
        scale = r.get("gpu_probe.grad_scaler.scale")
        if precision == "16-mixed":
            figure += f", loss scale {scale}"
            if not scale or not math.isfinite(scale):
                problems.append(f"{r.label}: no finite GradScaler scale")
        figure += f", {r.get('train.images_per_s') or 0:.1f} images/s"
        figures.append(figure)
        if not samples or n < len(samples):
            problems.append(f"{r.label}: autocast {dtype} in {n} of {len(samples)} sampled steps")
        if loss is None or not math.isfinite(loss):
            problems.append(f"{r.label}: val loss {loss}")
    return Verdict(name, FAIL if problems else PASS, "; ".join(figures + problems))


def dense_peaks(device_name: str, precision: str) -> tuple[float, ...] | None:
    name = device_name.lower()
    if not re.search(r"\bh200\b", name):
        return None
    return DENSE_PEAKS["h200 nvl" if "nvl" in name else "h200 sxm"].get(precision)


def check_mfu(runs: list[Run]) -> Verdict:
    name = "MFU against a known dense peak"
    cuda = [r for r in runs if r.ok and r.cuda]
    if not cuda:
        measured = [r for r in runs if r.ok and r.get("throughput.measured_mfu") is not None]
        figure = "no CUDA run: a CPU has no spec-sheet peak"
        if measured:
            run = by_opt(measured, "all") or measured[0]
            figure += f"; MFU against the measured peak: {run.label} {_pct(run.get('throughput.measured_mfu'))}"
        return Verdict(name, SKIP, figure)
    problems, figures = [], []
    for r in cuda:
        mfu, peak = r.get("throughput.mfu"), r.get("throughput.peak_flops_per_s")
        gpu = (r.get("machine.gpus") or [{}])[0].get("name", "?")
        precision = r.get("precision") or r.get("config.trainer.precision")
        dense = dense_peaks(gpu, precision)
        text = f"{r.label}: {_pct(mfu)} of {peak / 1e12 if peak else 0:.1f} TFLOP/s ({precision})"
        if r.get("throughput.measured_mfu") is not None:
            text += f", {_pct(r.get('throughput.measured_mfu'))} of the measured peak"
        figures.append(text)
        if mfu is None or peak is None:
            problems.append(f"{r.label}: no MFU (peak {peak})")
        elif not 0 < mfu <= 1:
            problems.append(f"{r.label}: MFU {_pct(mfu)} is not a fraction of the peak")
        elif dense is not None and not any(abs(peak - d) <= PEAK_TOLERANCE * d for d in dense):
            sparse = any(abs(peak - 2 * d) <= PEAK_TOLERANCE * 2 * d for d in dense)
            what = "the with-sparsity figure" if sparse else "not a dense figure"
            problems.append(f"{r.label}: peak {peak / 1e12:.1f} TFLOP/s is {what} for {gpu} ({precision})")
    gpu = (cuda[0].get("machine.gpus") or [{}])[0].get("name", "?")
    known = "" if dense_peaks(gpu, "bf16-mixed") else f" (dense peaks not on file for {gpu}: not verified)"
    best = [f for f in figures if f.startswith("+opt=all:")] or figures[:1]
    return Verdict(name, FAIL if problems else PASS, "; ".join(best + problems) + known)


def check_host_sync(runs: list[Run]) -> Verdict:
    name = "no host synchronization per step in the hot path"
    counted = [r for r in runs if r.ok and r.get("gpu_probe.sync.counted")]
    broken = [r.label for r in runs if str(r.get("gpu_probe.sync.why_not")).startswith("failed")]
    if broken:
        return Verdict(name, FAIL, "counting failed in " + ", ".join(broken) + " (gpu_probe.errors)")
    if not counted:
        why = next((r.get("gpu_probe.sync.why_not") for r in runs if r.get("gpu_probe.sync.why_not")), None)
        return Verdict(name, SKIP, why or "no run counted synchronizations")
    problems, figures = [], []
    for r in counted:
        sync = r.get("gpu_probe.sync")
        where = ", ".join(f"{k} x{v}" for k, v in list(sync["where"].items())[:2])
        text = (
            f"{r.label}: {sync['syncs']} syncs in {sync['steps']} steady steps "
            f"({sync['steps_with_sync']} steps with one)" + (f" at {where}" if where else "")
        )
        if r.get("config.trainer.precision") == "16-mixed":  # GradScaler reads found_inf every step
            figures.append(text + " [fp16 loss scaling: not judged]")
            continue
        figures.append(text)
        if not sync["steps"] or sync["steps_with_sync"] > sync["steps"] / 2:
            problems.append(f"{r.label}: a synchronization in {sync['steps_with_sync']} of {sync['steps']} steps")
    shown = [f for f in figures if f.startswith(("+opt=all:", "+opt=all_cache_device:", "+opt=0_baseline:"))]
    return Verdict(name, FAIL if problems else PASS, "; ".join((shown or figures[:2]) + problems))


def data_wait_share(r: Run) -> float | None:
    """Of each steady training step (after warm-up), the share spent waiting for the batch."""
    per_batch = r.get("jitter.per_batch") or {}
    skip = per_batch.get("warmup_steps", 0)
    waits, steps = per_batch.get("data_wait_s", [])[skip:], per_batch.get("train_step_s", [])[skip:]
    total = sum(waits) + sum(steps)
    return sum(waits) / total if total > 0 else r.get("phases.data_wait.fraction")


def _compare(runs: list[Run], name: str, value: Callable[[Run], float | None], better) -> tuple[Verdict | None, Any]:
    base, best = by_opt(runs, "0_baseline"), by_opt(runs, "all")
    if base is None or best is None:
        return Verdict(name, SKIP, "needs runs of +opt=0_baseline and +opt=all"), None
    for r in (base, best):
        if not r.ok:
            return Verdict(name, FAIL, r.why_not_ok()), None
    a, b = value(base), value(best)
    if a is None or b is None:
        return Verdict(name, FAIL, f"no figure: baseline {a}, +opt=all {b}"), None
    return None, (a, b, better(a, b), base.cuda and best.cuda)


def check_data_wait(runs: list[Run]) -> Verdict:
    name = "data_wait share falls from the baseline to +opt=all"
    done, values = _compare(runs, name, data_wait_share, lambda a, b: b < a)
    if done:
        return done
    a, b, better, on_gpu = values
    ladder = ", ".join(f"{r.opt} {_pct(data_wait_share(r))}" for r in runs if r.ok and r.opt and r.opt[0].isdigit())
    figure = f"data_wait of each steady step: baseline {_pct(a)} -> +opt=all {_pct(b)}; ladder: {ladder}"
    return Verdict(name, (PASS if better else FAIL) if on_gpu else SKIP, figure + ("" if on_gpu else CPU_SPEED))


def check_images_per_s(runs: list[Run], report: dict[str, Any] | None = None) -> Verdict:
    name = "+opt=all trains more images/s than the baseline"
    done, values = _compare(runs, name, lambda r: r.get("train.images_per_s"), lambda a, b: b > a)
    if done:
        return done
    a, b, better, on_gpu = values
    figure = f"+opt=all {b:.2f} images/s vs baseline {a:.2f}: {b / a:.2f}x"
    row = next((c for c in (report or {}).get("configurations", []) if c.get("label") == "+opt=all"), None)
    if row and row.get("speedup") is not None:
        figure += f" (report.json: speed-up {row['speedup']:.2f}x, distinguishable: {row.get('distinguishable')})"
    return Verdict(name, (PASS if better else FAIL) if on_gpu else SKIP, figure + ("" if on_gpu else CPU_SPEED))


def all_verdicts(runs: list[Run], planned: list[str], rehearsal: bool = False, report=None) -> dict[str, Verdict]:
    """One verdict per claim, by the name its test in tests/gpu/test_claims.py asks for."""
    return {
        "runs": check_runs(runs, planned),
        "nvml": check_nvml(runs, rehearsal),
        "cuda_events": check_cuda_events(runs),
        "pin": check_pin(runs),
        "device_cache": check_device_cache(runs),
        "compile": check_compile(runs),
        "bf16": check_precision(runs, "bf16-mixed", "bfloat16"),
        "fp16": check_precision(runs, "16-mixed", "float16"),
        "mfu": check_mfu(runs),
        "host_sync": check_host_sync(runs),
        "data_wait": check_data_wait(runs),
        "images_per_s": check_images_per_s(runs, report),
    }


def render(verdicts: list[Verdict], runs: list[Run], rehearsal: bool) -> str:
    machine = next((r.results["machine"] for r in runs if r.results.get("machine")), {})
    gpus = ", ".join(g.get("name", "?") for g in machine.get("gpus") or []) or "no GPU"
    head = [
        f"segperf GPU check{' (REHEARSAL: CPU, fake NVML, tiny sizes)' if rehearsal else ''}",
        f"machine: {gpus}; torch {machine.get('torch')}; CUDA {machine.get('cuda')}; "
        f"driver {machine.get('nvidia_driver')}; {machine.get('cpu_available')} CPUs; python {machine.get('python')}",
        "",
    ]
    lines = [f"{v.status}  {v.check}: {v.figure}" for v in verdicts]
    counts = {s: sum(v.status == s for v in verdicts) for s in (PASS, FAIL, SKIP)}
    overall = FAIL if counts[FAIL] else PASS
    tail = ["", f"RESULT: {overall} ({counts[PASS]} pass, {counts[FAIL]} fail, {counts[SKIP]} skip)"]
    return "\n".join(head + lines + tail) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where verdicts.txt/.json go (default: the sweep)")
    parser.add_argument("--planned", default="", help="comma-separated +opt presets the sweep was to run")
    parser.add_argument("--rehearsal", action="store_true", help="label the output as the CPU rehearsal")
    args = parser.parse_args(argv)
    runs = read_sweep(args.sweep) if args.sweep.is_dir() else []
    if not runs:
        print(f"tests.gpu.verdicts: no job folders in {args.sweep}", file=sys.stderr)
        return 2
    report_file = args.sweep / "report.json"
    try:
        report = json.loads(report_file.read_text()) if report_file.exists() else None
    except ValueError:
        report = None
    planned = [p for p in args.planned.split(",") if p]
    verdicts = list(all_verdicts(runs, planned, args.rehearsal, report).values())
    out = args.out or args.sweep
    out.mkdir(parents=True, exist_ok=True)
    text = render(verdicts, runs, args.rehearsal)
    (out / "verdicts.txt").write_text(text)
    (out / "verdicts.json").write_text(json.dumps([asdict(v) for v in verdicts], indent=1) + "\n")
    print(text, end="")
    return 3 if any(v.status == FAIL for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
